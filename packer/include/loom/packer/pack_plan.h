// Where every document's tokens go in the packs, planned from the length index alone (O(documents)
// memory, no token read); pack.h then streams the tokens in that order.
//
// L = seq_len. Documents are numbered globally (inputs in command-line order); empty documents
// get no segment.
//   concat  (InternLM's pack_sample_into_one): documents back to back, a new pack every L tokens;
//           a document cut at a pack boundary continues at position 0 of the next pack. Only the
//           last pack is padded.
//   bestfit (best-fit decreasing, "Fewer Truncations Improve Language Modeling", 2024): a document
//           longer than L is cut into L-token chunks plus a remainder; chunks are never split
//           further. Chunks are placed longest first (ties: lower document, then earlier chunk,
//           first) into the open pack with the least room that still fits them (ties: the pack
//           opened first), else into a new pack: a counting sort and per-room heaps of open packs.
//           The seed then shuffles the order of the packs (Fisher-Yates on SplitMix64, the same
//           on every platform); within a pack, segments keep their placement order.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/packed_format.h"

namespace loom::packer {

struct PlannedSegment {
  uint64_t doc;
  uint32_t doc_pos;   // first token's position in its document
  uint32_t length;
  bool ends_doc;
};

struct PackPlan {
  uint32_t seq_len = 0;
  std::vector<uint64_t> pack_offsets{0};  // pack p = segments[pack_offsets[p], pack_offsets[p+1])
  std::vector<PlannedSegment> segments;
  // bestfit: each segment's first token, globally (all documents' tokens back to back), beside
  // segments: its gather reads them in plan order instead of a document's offsets (a random miss)
  // per segment. Empty (concat, which copies the inputs whole): found through the offsets.
  std::vector<uint64_t> segment_src;
  uint64_t num_tokens = 0;       // tokens inside segments
  uint64_t nonempty_docs = 0;
  uint64_t truncated_docs = 0;   // documents split over more than one segment

  uint64_t num_packs() const { return pack_offsets.size() - 1; }
  uint64_t padding_tokens() const { return num_packs() * seq_len - num_tokens; }
  double padding_fraction() const;
  double truncated_fraction() const;
};

PackPlan plan_concat(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len);
PackPlan plan_bestfit(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len, uint64_t seed);
PackPlan plan_packs(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len, PackStrategy strategy, uint64_t seed);

}  // namespace loom::packer
