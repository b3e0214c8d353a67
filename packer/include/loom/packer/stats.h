// `loom-pack stats`: documents, tokens, the length distribution, dtype and tokenizer fingerprint
// of shards of any kind, as text for people or as one JSON object for machines.
//
// Lengths are document lengths (loom, InternLM) or segment lengths (packed shards). For packed
// shards `documents` counts the segments that end a document, so every non-empty source
// document counts once even when a pack run was rolled into several files. Percentiles use the
// nearest-rank method (median = the lower middle element). Histogram buckets are powers of two:
// [0, 0], [1, 1], [2, 3], [4, 7], ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::packer {

struct FileStats {
  std::string path, kind, dtype, fingerprint;  // fingerprint "" when the format has none
  uint64_t documents = 0, tokens = 0, packs = 0, padding_tokens = 0;
};

struct HistogramBucket {
  uint64_t min, max, count;
};

struct Stats {
  std::vector<FileStats> files;
  uint64_t documents = 0, tokens = 0;
  uint64_t min = 0, median = 0, p99 = 0, max = 0;
  std::vector<HistogramBucket> histogram;  // non-empty buckets only
  std::string dtype;        // "uint16", "uint32", "text" (InternLM) or "mixed"
  std::string fingerprint;  // "" when no input has one or the inputs disagree
  bool has_packed = false;
  uint64_t packs = 0, padding_tokens = 0;
};

Stats collect_stats(const std::vector<std::string>& bin_paths);
std::string stats_text(const Stats& s);
// One JSON object, newline-terminated.
std::string stats_json(const Stats& s);

}  // namespace loom::packer
