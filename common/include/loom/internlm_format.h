// InternLM's token shard (tools/tokenizer.py of InternLM/InternLM), written byte for byte and read
// back for verify/convert. Same text in docs/FORMAT.md.
//
//   NAME.bin       one line per document: {"tokens": [1, 2, 3]}\n  (Python json.dumps spacing:
//                  ", " between ids, ": " after the key; an empty document is {"tokens": []}).
//   NAME.bin.meta  a NumPy .npy file (format 1.0), dtype '<i4' (little-endian int32), C order,
//                  shape (N, 2): row i = (byte offset of line i in NAME.bin, token count of line i).
//
// The offsets are int32, so a .bin may not grow past 2^31-1 bytes: InternLM overflows silently,
// loom refuses (InternlmWriter::fits()). The format records no vocab size; readers check ids
// against one only when told it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/sys.h"

namespace loom {

inline constexpr char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
inline constexpr uint64_t kInternlmMaxOffset = 2147483647;  // int32 max

// The bytes of an .npy (format 1.0) holding an int32 array of shape (rows, 2), as numpy.save writes
// it (header padded with spaces and a newline to a multiple of 64 bytes).
std::string npy_int32_pairs(const std::vector<int32_t>& data_row_major);

class InternlmWriter {
 public:
  explicit InternlmWriter(const std::string& bin_path);
  // Whether a document of these ids still starts below 2^31 bytes.
  bool fits() const { return bin_.bytes_written() <= kInternlmMaxOffset; }
  void add_doc(const uint32_t* ids, size_t n);
  void add_doc(const std::vector<uint32_t>& ids) { add_doc(ids.data(), ids.size()); }
  // The line add_doc writes for these ids ({"tokens": [1, 2]} and a newline), appended to out; any thread.
  static void format_doc(const uint32_t* ids, size_t n, std::string& out);
  // Lines made by format_doc, back to back in bytes: tokens[i] ids and lengths[i] bytes each.
  void add_formatted(const char* bytes, const uint64_t* tokens, const uint64_t* lengths, size_t ndocs);
  uint64_t num_docs() const { return meta_.size() / 2; }
  uint64_t num_tokens() const { return num_tokens_; }
  uint64_t bytes_written() const { return bin_.bytes_written(); }
  void commit();

 private:
  std::string bin_path_;
  sys::AtomicFile bin_;
  std::vector<int32_t> meta_;
  std::string line_;
  uint64_t num_tokens_ = 0;
};

// A memory-mapped InternLM shard. The constructor checks the .npy header (int32, shape (N, 2)),
// the sizes (N x 8 overflow-checked before any is trusted), and that offsets are increasing and
// inside the .bin (O(N)). read_doc() parses one line;
// verify_deep() parses every line and checks the counts, that lines tile the file, and ids < vocab
// when vocab_size > 0.
class InternlmReader {
 public:
  explicit InternlmReader(const std::string& bin_path);
  const std::string& bin_path() const { return bin_.path(); }
  uint64_t num_docs() const { return num_docs_; }
  uint64_t num_tokens() const { return num_tokens_; }
  uint64_t doc_len(uint64_t i) const { return static_cast<uint64_t>(rows_[2 * i + 1]); }
  uint64_t doc_offset(uint64_t i) const { return static_cast<uint64_t>(rows_[2 * i]); }
  // Appends document i's ids to out; throws on a malformed line.
  void read_doc(uint64_t i, std::vector<uint32_t>& out) const;
  // Largest id seen (for picking a dtype on convert) is returned.
  template <typename F>
  uint32_t verify_deep(uint32_t vocab_size, F&& on_bytes) const;
  uint32_t verify_deep(uint32_t vocab_size = 0) const {
    return verify_deep(vocab_size, [](uint64_t) {});
  }

 private:
  uint32_t verify_doc(uint64_t i, uint32_t vocab_size, std::vector<uint32_t>& scratch) const;
  sys::MappedFile meta_, bin_;
  std::vector<int32_t> rows_;
  uint64_t num_docs_ = 0;
  uint64_t num_tokens_ = 0;
};

template <typename F>
uint32_t InternlmReader::verify_deep(uint32_t vocab_size, F&& on_bytes) const {
  bin_.advise_sequential();
  std::vector<uint32_t> scratch;
  uint32_t max_id = 0;
  for (uint64_t i = 0; i < num_docs_; ++i) {
    uint32_t m = verify_doc(i, vocab_size, scratch);
    max_id = m > max_id ? m : max_id;
    const uint64_t end = i + 1 < num_docs_ ? doc_offset(i + 1) : bin_.size();
    on_bytes(end - doc_offset(i));
  }
  return max_id;
}

}  // namespace loom
