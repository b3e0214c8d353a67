#include "loom/packer/stats.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/packed_format.h"
#include "loom/progress.h"
#include "loom/shard_format.h"

namespace loom::packer {

namespace {
std::string dtype_name(uint32_t bytes) { return str("uint", bytes * 8); }

// Bucket 0 holds length 0, bucket k >= 1 holds [2^(k-1), 2^k).
size_t bucket_of(uint64_t len) {
  size_t k = 0;
  while (len) ++k, len >>= 1;
  return k;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += str("\\u00", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
    else o += c;
  }
  return o;
}
}  // namespace

Stats collect_stats(const std::vector<std::string>& bin_paths) {
  Stats s;
  std::vector<uint64_t> lengths;
  for (const std::string& path : bin_paths) {
    FileStats f;
    f.path = path;
    const ShardKind kind = detect_shard_kind(path);
    if (kind == ShardKind::kPacked) {
      PackedReader r(path);
      f.kind = "packed";
      f.dtype = dtype_name(r.dtype_bytes());
      f.fingerprint = hex64(r.header().model_fingerprint);
      f.tokens = r.header().num_tokens;
      f.packs = r.num_packs();
      f.padding_tokens = r.padding_tokens();
      for (uint64_t p = 0; p < r.num_packs(); ++p)
        for (const PackedSegment* g = r.segments_begin(p); g != r.segments_end(p); ++g) {
          lengths.push_back(g->length);
          if (g->seg_flags & kSegEndsDoc) ++f.documents;
        }
      s.has_packed = true;
    } else if (kind == ShardKind::kInternlm) {
      InternlmReader r(path);
      f.kind = "internlm";
      f.dtype = "text";
      f.documents = r.num_docs();
      f.tokens = r.num_tokens();
      for (uint64_t i = 0; i < r.num_docs(); ++i) lengths.push_back(r.doc_len(i));
    } else if (kind == ShardKind::kMegatron) {
      MegatronReader r(path);
      f.kind = "megatron";
      f.dtype = megatron_dtype_name(r.dtype_code());
      f.documents = r.num_docs();
      f.tokens = r.num_tokens();
      for (uint64_t i = 0; i < r.num_docs(); ++i) lengths.push_back(r.doc_len(i));
    } else {
      ShardReader r(path);  // also reports an unknown magic
      f.kind = "loom";
      f.dtype = dtype_name(r.dtype_bytes());
      f.fingerprint = hex64(r.header().model_fingerprint);
      f.documents = r.num_docs();
      f.tokens = r.num_tokens();
      for (uint64_t i = 0; i < r.num_docs(); ++i) lengths.push_back(r.doc_len(i));
    }
    s.documents += f.documents;
    s.tokens += f.tokens;
    s.packs += f.packs;
    s.padding_tokens += f.padding_tokens;
    s.dtype = s.files.empty() || s.dtype == f.dtype ? f.dtype : "mixed";
    s.fingerprint = s.files.empty() || s.fingerprint == f.fingerprint ? f.fingerprint : "";
    s.files.push_back(f);
  }
  if (!lengths.empty()) {
    std::sort(lengths.begin(), lengths.end());
    const size_t n = lengths.size();
    s.min = lengths.front();
    s.max = lengths.back();
    s.median = lengths[(n - 1) / 2];
    s.p99 = lengths[static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n))) - 1];
    std::vector<uint64_t> counts(bucket_of(s.max) + 1, 0);
    for (uint64_t len : lengths) ++counts[bucket_of(len)];
    for (size_t k = 0; k < counts.size(); ++k) {
      if (!counts[k]) continue;
      const uint64_t lo = k == 0 ? 0 : uint64_t{1} << (k - 1), hi = k == 0 ? 0 : (uint64_t{1} << k) - 1;
      s.histogram.push_back({lo, hi, counts[k]});
    }
  }
  return s;
}

std::string stats_text(const Stats& s) {
  std::ostringstream os;
  for (const FileStats& f : s.files) {
    os << f.path << ": " << f.kind << ", " << f.dtype << ", " << f.documents << " documents, " << f.tokens << " tokens";
    if (f.kind == "packed") os << ", " << f.packs << " packs, " << f.padding_tokens << " padding tokens";
    if (!f.fingerprint.empty()) os << ", tokenizer " << f.fingerprint;
    os << "\n";
  }
  os << "total: " << s.files.size() << " files, " << format_count(s.documents) << " documents, " << format_count(s.tokens)
     << " tokens, dtype "
     << s.dtype << ", tokenizer " << (s.fingerprint.empty() ? "-" : s.fingerprint) << "\n";
  if (s.has_packed) {
    const uint64_t slots = s.tokens + s.padding_tokens;
    os << "packs: " << format_count(s.packs) << ", padding tokens: " << format_count(s.padding_tokens) << " ("
       << format_percent(static_cast<double>(s.padding_tokens), static_cast<double>(slots)) << ")\n";
  }
  os << (s.has_packed ? "segment" : "document") << " length: min " << s.min << ", median " << s.median << ", p99 "
     << s.p99 << ", max " << s.max << "\n";
  uint64_t most = 1;
  for (const auto& b : s.histogram) most = std::max(most, b.count);
  for (const auto& b : s.histogram) {
    os << "  [" << b.min << ", " << b.max << "] " << b.count << " "
       << std::string(static_cast<size_t>(40.0 * static_cast<double>(b.count) / static_cast<double>(most) + 0.5), '#')
       << "\n";
  }
  return os.str();
}

std::string stats_json(const Stats& s) {
  std::ostringstream os;
  os << "{\"files\": " << s.files.size() << ", \"documents\": " << s.documents << ", \"tokens\": " << s.tokens
     << ", \"min\": " << s.min << ", \"median\": " << s.median << ", \"p99\": " << s.p99 << ", \"max\": " << s.max
     << ", \"histogram\": [";
  for (size_t i = 0; i < s.histogram.size(); ++i)
    os << (i ? ", " : "") << "{\"min\": " << s.histogram[i].min << ", \"max\": " << s.histogram[i].max
       << ", \"count\": " << s.histogram[i].count << "}";
  os << "], \"dtype\": \"" << s.dtype << "\", \"fingerprint\": ";
  if (s.fingerprint.empty()) os << "null";
  else os << "\"" << s.fingerprint << "\"";
  if (s.has_packed) os << ", \"packs\": " << s.packs << ", \"padding_tokens\": " << s.padding_tokens;
  os << ", \"shards\": [";
  for (size_t i = 0; i < s.files.size(); ++i) {
    const FileStats& f = s.files[i];
    os << (i ? ", " : "") << "{\"path\": \"" << json_escape(f.path) << "\", \"kind\": \"" << f.kind
       << "\", \"documents\": " << f.documents << ", \"tokens\": " << f.tokens << "}";
  }
  os << "]}\n";
  return os.str();
}

}  // namespace loom::packer
