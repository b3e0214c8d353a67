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

#include <algorithm>
#include <cstdint>
#include <vector>

#include "loom/error.h"
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
  // per segment. Empty for concat, which copies the inputs whole.
  std::vector<uint64_t> segment_src;
  uint64_t num_tokens = 0;       // tokens inside segments
  uint64_t nonempty_docs = 0;
  uint64_t truncated_docs = 0;   // documents split over more than one segment

  uint64_t num_packs() const { return pack_offsets.size() - 1; }
  uint64_t padding_tokens() const { return num_packs() * seq_len - num_tokens; }
  double padding_fraction() const;
  double truncated_fraction() const;
};

// part / whole, 0 for nothing: the report's padding and truncated fractions.
inline double fraction(uint64_t part, uint64_t whole) {
  return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

// Refuses a document longer than a packed segment can address: doc_pos is a u32 in the format.
inline void check_doc_length(uint64_t doc, uint64_t len) {
  LOOM_CHECK(len <= 0xffffffffull, "document ", doc, " has ", len,
             " tokens; packed shards address at most 2^32-1 tokens of one document");
}

// concat's cut, walked pack by pack from the document lengths: the one implementation of it, under
// plan_concat and under loom-pack's concat index (streamed a batch of packs at a time, with no
// segment per document kept). The totals count the documents and tokens walked so far.
class ConcatCut {
 public:
  ConcatCut(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len);  // kept by reference
  ConcatCut(std::vector<uint64_t>&&, uint32_t) = delete;
  // Calls f(doc, doc_pos, length, ends_doc) for each segment of the next pack, in order; returns
  // how many (0: no token left). next_pack([](auto...) {}) only counts them.
  template <typename F>
  uint64_t next_pack(F&& f);

  uint64_t num_tokens() const { return tokens_; }
  uint64_t nonempty_docs() const { return nonempty_; }
  uint64_t truncated_docs() const { return truncated_; }  // split over more than one segment

 private:
  const uint64_t* lens_;
  uint64_t num_docs_;
  uint32_t L_;
  uint64_t d_ = 0, pos_ = 0;  // the next token: position pos_ of document d_
  uint64_t tokens_ = 0, nonempty_ = 0, truncated_ = 0;
};

template <typename F>
uint64_t ConcatCut::next_pack(F&& f) {
  uint64_t segs = 0;
  uint32_t fill = 0;
  while (fill < L_ && d_ < num_docs_) {
    const uint64_t len = lens_[d_];
    if (pos_ == 0) {  // a document begins
      check_doc_length(d_, len);
      if (len == 0) {
        ++d_;
        continue;
      }
      ++nonempty_;
      tokens_ += len;
    }
    const uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(len - pos_, L_ - fill));
    const bool ends = pos_ + take == len;
    f(d_, static_cast<uint32_t>(pos_), take, ends);
    ++segs;
    fill += take;
    if (ends) {
      if (pos_ > 0) ++truncated_;
      ++d_;
      pos_ = 0;
    } else {
      pos_ += take;
    }
  }
  return segs;
}

PackPlan plan_concat(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len);
PackPlan plan_bestfit(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len, uint64_t seed);
PackPlan plan_packs(const std::vector<uint64_t>& doc_lengths, uint32_t seq_len, PackStrategy strategy, uint64_t seed);

}  // namespace loom::packer
