// A small safetensors writer and a checking reader (the Hugging Face format, so Python reads loom's
// weights with `safetensors` or ten lines of numpy):
//
//   u64 LE  N            length of the JSON header in bytes
//   N bytes JSON         {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                         "__metadata__": {"key": "string", ...}}   padded with spaces to 8-byte alignment
//   rest    data         raw little-endian tensor bytes; offsets are relative to the start of the data,
//                        tensors are contiguous, in header order, with no holes
//
// dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "loom/sys.h"

namespace simdjson::dom {
class element;
}  // namespace simdjson::dom

namespace loom::safetensors {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
using Metadata = std::map<std::string, std::string>;

struct WriteResult {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;  // of the whole file, for the checkpoint manifest
};

// Writes tensors (moved to CPU, made contiguous) to path through sys::AtomicFile. Names must be unique.
WriteResult write(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});

// Opens and checks a file: header length, JSON, every dtype and shape against its byte range, the
// ranges contiguous and covering the data exactly. Any lie throws loom::Error naming the file.
class Reader {
 public:
  explicit Reader(const std::string& path);
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // A CPU copy of tensor `name` (throws if absent).
  torch::Tensor get(const std::string& name) const;
  const Metadata& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  struct Entry {
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  // One tensor's header entry, checked against the data_size bytes after the header.
  static Entry parse_entry(const std::string& path, const std::string& name, const simdjson::dom::element& value,
                           uint64_t data_size);
  void parse_metadata(const simdjson::dom::element& value);
  sys::MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
  Metadata metadata_;
};

}  // namespace loom::safetensors
