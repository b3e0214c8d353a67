#include "safetensors.h"

#include <simdjson.h>

#include <cstring>
#include <set>

#include "loom/json_text.h"
#include "loom/error.h"
#include "loom/hash.h"

namespace loom::safetensors {

namespace {

struct DtypeName {
  torch::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {torch::kFloat64, "F64"}, {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"},
    {torch::kInt64, "I64"},   {torch::kInt32, "I32"},   {torch::kInt16, "I16"},   {torch::kInt8, "I8"},
    {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"},
};

const char* dtype_name(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  LOOM_FAIL("safetensors: unsupported tensor dtype ", c10::toString(t));
}

}  // namespace

WriteResult write(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  std::vector<torch::Tensor> cpu;
  cpu.reserve(tensors.size());
  std::set<std::string> seen;
  std::string header = "{";
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LOOM_ASSERT(seen.insert(name).second, "safetensors: duplicate tensor name ", name);
    LOOM_ASSERT(name != "__metadata__", "safetensors: reserved tensor name");
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const uint64_t n = static_cast<uint64_t>(c.numel()) * c.element_size();
    if (header.size() > 1) header += ",";
    header += json_quote(name) + ":{\"dtype\":\"" + dtype_name(c.scalar_type()) + "\",\"shape\":[";
    for (int64_t i = 0; i < c.dim(); ++i) header += (i ? "," : "") + std::to_string(c.size(i));
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    offset += n;
    cpu.push_back(std::move(c));
  }
  if (!metadata.empty()) {
    if (header.size() > 1) header += ",";
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    header += "}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  sys::AtomicFile out(path);
  Xxh64 h;
  auto emit = [&](const void* p, size_t n) {
    out.write(p, n);
    h.update(p, n);
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  emit(len, 8);
  emit(header.data(), header.size());
  for (const auto& c : cpu) emit(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  WriteResult r{out.bytes_written(), h.digest()};
  out.commit();
  return r;
}

Reader::Reader(const std::string& path) : file_(path) {
  const uint64_t size = file_.size();
  LOOM_CHECK(size >= 8, path, ": not a safetensors file: ", size, " bytes, expected at least the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(file_.data()[i]) << (8 * i);
  LOOM_CHECK(n >= 2 && n <= size - 8, path, ": safetensors header length ", n, " at byte 0 does not fit in the ",
             size, "-byte file");
  data_start_ = 8 + n;
  const uint64_t data_size = size - data_start_;

  simdjson::dom::parser parser;
  simdjson::padded_string json(reinterpret_cast<const char*>(file_.data()) + 8, n);
  simdjson::dom::element root;
  auto err = parser.parse(json).get(root);
  LOOM_CHECK(!err, path, ": safetensors header (bytes 8..", 8 + n, ") is not valid JSON: ", simdjson::error_message(err));
  simdjson::dom::object obj;
  LOOM_CHECK(!root.get(obj), path, ": safetensors header is not a JSON object");

  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto field : obj) {
    const std::string name(field.key);
    if (name == "__metadata__") {
      parse_metadata(field.value);
      continue;
    }
    const Entry e = parse_entry(path, name, field.value, data_size);
    LOOM_CHECK(entries_.emplace(name, e).second, path, ": tensor '", name, "' appears twice");
    names_.push_back(name);
    ranges.push_back({e.begin, e.end, name});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const auto& r : ranges) {
    LOOM_CHECK(r.begin == at, path, ": tensor '", r.name, "' starts at data byte ", r.begin, ", expected ", at,
               " (tensors must be contiguous without holes or overlap)");
    at = r.end;
  }
  LOOM_CHECK(at == data_size, path, ": tensors cover ", at, " data bytes but the file holds ", data_size);
}

void Reader::parse_metadata(const simdjson::dom::element& value) {
  simdjson::dom::object md;
  LOOM_CHECK(!value.get(md), path(), ": __metadata__ is not an object");
  for (auto kv : md) {
    std::string_view v;
    LOOM_CHECK(!kv.value.get(v), path(), ": __metadata__ value of '", kv.key, "' is not a string");
    metadata_[std::string(kv.key)] = std::string(v);
  }
}

Reader::Entry Reader::parse_entry(const std::string& path, const std::string& name, const simdjson::dom::element& value,
                                  uint64_t data_size) {
  std::string_view dtype;
  simdjson::dom::array shape, offs;
  LOOM_CHECK(!value["dtype"].get(dtype), path, ": tensor '", name, "' has no string dtype");
  LOOM_CHECK(!value["shape"].get(shape), path, ": tensor '", name, "' has no shape array");
  LOOM_CHECK(!value["data_offsets"].get(offs), path, ": tensor '", name, "' has no data_offsets array");
  Entry e{};
  bool known = false;
  for (const auto& d : kDtypes)
    if (dtype == d.name) {
      e.dtype = d.type;
      known = true;
    }
  LOOM_CHECK(known, path, ": tensor '", name, "' has unknown dtype '", dtype, "'");
  // The element count and byte size must not wrap: a wrapped product could match a small byte
  // range, and allocating the tensor would then fail in LibTorch instead of here.
  uint64_t numel = 1, want = 0;
  bool fits = true;
  for (auto dim : shape) {
    int64_t d = 0;
    LOOM_CHECK(!dim.get(d) && d >= 0, path, ": tensor '", name, "' has a bad shape entry");
    e.shape.push_back(d);
    fits = fits && !__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  }
  fits = fits && !__builtin_mul_overflow(numel, static_cast<uint64_t>(c10::elementSize(e.dtype)), &want) &&
         want <= static_cast<uint64_t>(INT64_MAX);
  LOOM_CHECK(fits, path, ": tensor '", name, "' has a shape of 2^63 bytes or more");
  LOOM_CHECK(offs.size() == 2, path, ": tensor '", name, "' data_offsets must have 2 entries");
  LOOM_CHECK(!offs.at(0).get(e.begin) && !offs.at(1).get(e.end) && e.begin <= e.end, path, ": tensor '", name,
             "' has bad data_offsets");
  LOOM_CHECK(e.end - e.begin == want, path, ": tensor '", name, "' is ", dtype, " of ", numel,
             " elements = ", want, " bytes, but data_offsets [", e.begin, ", ", e.end, ") hold ", e.end - e.begin);
  LOOM_CHECK(e.end <= data_size, path, ": tensor '", name, "' ends at data byte ", e.end, " beyond the ",
             data_size, " data bytes");
  return e;
}

torch::Tensor Reader::get(const std::string& name) const {
  auto it = entries_.find(name);
  LOOM_CHECK(it != entries_.end(), path(), ": no tensor named '", name, "'");
  const Entry& e = it->second;
  torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  if (e.end > e.begin) std::memcpy(t.data_ptr(), file_.data() + data_start_ + e.begin, e.end - e.begin);
  return t;
}

}  // namespace loom::safetensors
