// Megatron-LM's indexed dataset ("mmap", megatron/core/datasets/indexed_dataset.py), written as its
// IndexedDatasetBuilder writes it and read back for verify/stats/head/convert. Same text in
// docs/FORMAT.md. Two files per dataset, PREFIX.bin and PREFIX.idx (tools/preprocess_data.py names
// them PREFIX_{json key}_document.bin/.idx); all integers little-endian:
//
//   PREFIX.bin   the ids of every sequence back to back, as the dtype below, no header.
//   PREFIX.idx   off      size  field
//                  0         9  magic              "MMIDIDX\0\0"
//                  9         8  version            u64, 1
//                 17         1  dtype code         u8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                                                  6 float64, 7 float32, 8 uint16 (Megatron's DType);
//                                                  preprocess_data.py writes 8 (uint16) when the
//                                                  tokenizer's vocab_size < 65500, else 4 (int32)
//                 18         8  sequence count S   u64
//                 26         8  document count D   u64, the length of document_indices: documents + 1
//                 34      4*S  sequence_lengths   int32[S], ids per sequence
//                        8*S  sequence_pointers  int64[S], byte offset of each sequence in PREFIX.bin:
//                                                  0, then the running sum of length * dtype size
//                        8*D  document_indices   int64[D], 0 first, non-decreasing, S last: document
//                                                  d is sequences [document_indices[d], [d+1])
//
// A document is one or more sequences (one per sentence with --split-sentences); a document of no
// sequence is possible (preprocess_data.py writes one for an empty text). A multimodal dataset has
// S more bytes (int8 sequence modes); loom neither writes nor reads those. The format has no
// checksum and no tokenizer record: a reader checks that the index is self-consistent and matches
// the .bin's size; ids are checked against a vocab size only when given one.
//
// loom writes one sequence per document that has ids, none for a document without (so converting
// a loom shard gives what preprocess_data.py writes without --split-sentences), under temporary
// names: the .bin, then the .idx, fsynced and renamed, the .idx last.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/sys.h"

namespace loom {

inline constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kMegatronVersion = 1;
inline constexpr uint64_t kMegatronHeaderBytes = 34;  // magic, version, dtype code, S, D
// Megatron's DType codes that hold token ids loom reads and writes.
inline constexpr uint8_t kMegatronInt32 = 4;
inline constexpr uint8_t kMegatronUint16 = 8;
// DType.optimal_dtype: uint16 below this many pieces, else int32.
inline constexpr uint64_t kMegatronUint16Below = 65500;

inline uint8_t megatron_dtype_for_vocab(uint64_t vocab_size) {
  return vocab_size < kMegatronUint16Below ? kMegatronUint16 : kMegatronInt32;
}
inline uint32_t megatron_dtype_bytes(uint8_t code) { return code == kMegatronUint16 ? 2 : 4; }
// "uint16", "int32", ... for a DType code; "unknown" outside 1..8.
const char* megatron_dtype_name(uint8_t code);
// PREFIX.idx of PREFIX.bin (of PREFIX, Megatron's name of a dataset, too).
std::string megatron_idx_path(const std::string& bin_path);
// Whether PREFIX.idx exists and starts with the magic.
bool is_megatron_dataset(const std::string& bin_path);

// Writes a dataset under temporary names; commit() makes it visible. Every id must be < id_limit
// (the tokenizer's vocab_size) and fit the dtype. Destroyed without commit(), it leaves nothing.
class MegatronWriter {
 public:
  MegatronWriter(const std::string& bin_path, uint8_t dtype_code, uint64_t id_limit);
  void add_doc(const uint32_t* ids, size_t n);
  void add_doc(const std::vector<uint32_t>& ids) { add_doc(ids.data(), ids.size()); }
  // The bytes add_doc writes to the .bin for these ids, appended to out (ids checked); any thread.
  void format_doc(const uint32_t* ids, size_t n, std::string& out) const;
  // Documents made by format_doc, back to back in bytes, tokens[i] ids each.
  void add_formatted(const char* bytes, const uint64_t* tokens, size_t ndocs);
  uint64_t num_docs() const { return document_indices_.size() - 1; }
  uint64_t num_tokens() const { return num_tokens_; }
  uint8_t dtype_code() const { return dtype_; }
  // Writes the .idx and renames both into place. Zero documents is an error (as for every loom writer).
  void commit();

 private:
  std::string bin_path_;
  uint8_t dtype_;
  uint64_t id_limit_;
  sys::AtomicFile bin_;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_{0};
  uint64_t num_tokens_ = 0;
  std::string scratch_;
};

// A memory-mapped dataset. The constructor checks the whole index before anything is trusted:
// magic, version, a dtype code loom reads (uint16 or int32), the .idx's size for S and D (12 x S
// and 8 x D overflow-checked first), every length >= 0, every pointer where the lengths before it
// put it, document_indices from 0, non-decreasing, ending at S, and the .bin's size (O(S + D)). verify_deep() also reads every id:
// >= 0 (int32) and < vocab_size when that is > 0.
class MegatronReader {
 public:
  explicit MegatronReader(const std::string& bin_path);
  const std::string& bin_path() const { return bin_.path(); }
  const std::string& idx_path() const { return idx_.path(); }
  uint8_t dtype_code() const { return dtype_; }
  uint32_t dtype_bytes() const { return megatron_dtype_bytes(dtype_); }
  uint64_t num_sequences() const { return num_sequences_; }
  uint64_t num_docs() const { return num_docs_; }
  uint64_t num_tokens() const { return num_tokens_; }
  // Tokens of document i (all its sequences).
  uint64_t doc_len(uint64_t i) const { return doc_token_begin(i + 1) - doc_token_begin(i); }
  // Appends document i's ids to out.
  void read_doc(uint64_t i, std::vector<uint32_t>& out) const;
  // One pass over the .bin; returns the largest id. on_bytes(n) reports progress.
  template <typename F>
  uint32_t verify_deep(uint32_t vocab_size, F&& on_bytes) const;
  uint32_t verify_deep(uint32_t vocab_size = 0) const {
    return verify_deep(vocab_size, [](uint64_t) {});
  }

 private:
  // The index, read from the mapping once the constructor has checked it (pointers agree with the
  // lengths, so a sequence's first token is its pointer over the dtype size).
  uint64_t sequence_token_begin(uint64_t s) const;
  uint64_t doc_token_begin(uint64_t d) const { return sequence_token_begin(static_cast<uint64_t>(document_index(d))); }
  int64_t document_index(uint64_t d) const;
  uint32_t check_ids(uint64_t begin, uint64_t end, uint32_t vocab_size) const;
  sys::MappedFile idx_, bin_;
  uint8_t dtype_ = 0;
  uint64_t num_sequences_ = 0, num_docs_ = 0, num_tokens_ = 0;
  uint64_t pointers_at_ = 0, doc_indices_at_ = 0;  // byte offsets in the .idx
};

template <typename F>
uint32_t MegatronReader::verify_deep(uint32_t vocab_size, F&& on_bytes) const {
  bin_.advise_sequential();
  constexpr uint64_t kChunk = uint64_t{1} << 16;
  uint32_t max_id = 0;
  for (uint64_t t = 0; t < num_tokens(); t += kChunk) {
    const uint64_t end = t + kChunk < num_tokens() ? t + kChunk : num_tokens();
    const uint32_t m = check_ids(t, end, vocab_size);
    max_id = m > max_id ? m : max_id;
    on_bytes((end - t) * dtype_bytes());
  }
  return max_id;
}

}  // namespace loom
