#include "tensorboard.h"

#include <chrono>
#include <cstring>

#include "loom/error.h"

namespace loom {

namespace {

struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
  }
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
template <typename T>
void put_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86/arm little-endian hosts
  out.append(b, sizeof(T));
}
void put_bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, field << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}
double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
std::string file_version_event(double wall_time) {
  std::string e;
  put_varint(e, 1 << 3 | 1);
  put_le(e, wall_time);
  put_bytes_field(e, 3, "brain.Event:2");
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const Crc32cTable table;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table.t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string out;
  const uint64_t len = data.size();
  put_le(out, len);
  put_le(out, masked_crc32c(out.data(), 8));
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()));
  return out;
}

std::string scalar_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes_field(v, 1, tag);
    put_varint(v, 2 << 3 | 5);
    put_le(v, value);
    put_bytes_field(summary, 1, v);
  }
  std::string e;
  put_varint(e, 1 << 3 | 1);
  put_le(e, wall_time);
  put_varint(e, 2 << 3 | 0);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes_field(e, 5, summary);
  return e;
}

std::vector<std::string> read_tfrecords(const std::string& path, bool stop_at_damage) {
  const std::string bytes = sys::read_file(path);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    try {
      const size_t index = out.size();
      LOOM_CHECK(bytes.size() - at >= 12, path, ": record ", index, " at byte ", at, ": truncated header (",
                 bytes.size() - at, " bytes left, expected 12)");
      uint64_t len;
      uint32_t len_crc;
      std::memcpy(&len, bytes.data() + at, 8);
      std::memcpy(&len_crc, bytes.data() + at + 8, 4);
      LOOM_CHECK(len_crc == masked_crc32c(bytes.data() + at, 8), path, ": record ", index, " at byte ", at,
                 ": length CRC mismatch");
      LOOM_CHECK(len <= bytes.size() - at - 12 && bytes.size() - at - 12 - len >= 4, path, ": record ", index,
                 " at byte ", at, ": length ", len, " runs past the end of the file");
      std::string data = bytes.substr(at + 12, len);
      uint32_t data_crc;
      std::memcpy(&data_crc, bytes.data() + at + 12 + len, 4);
      LOOM_CHECK(data_crc == masked_crc32c(data.data(), data.size()), path, ": record ", index, " at byte ", at,
                 ": data CRC mismatch");
      out.push_back(std::move(data));
      at += 16 + len;
    } catch (const Error&) {
      if (stop_at_damage) return out;
      throw;
    }
  }
  return out;
}

int64_t event_step(const std::string& e) {
  size_t at = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; at < e.size() && shift < 64; shift += 7) {
      const auto b = static_cast<uint8_t>(e[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    LOOM_FAIL("tensorboard event: truncated varint at byte ", at);
  };
  while (at < e.size()) {
    const uint64_t key = varint();
    const uint64_t field = key >> 3, wire = key & 7;
    if (field == 2 && wire == 0) return static_cast<int64_t>(varint());
    if (wire == 0) varint();
    else if (wire == 1) at += 8;
    else if (wire == 5) at += 4;
    else if (wire == 2) at += varint();
    else LOOM_FAIL("tensorboard event: unsupported wire type ", wire, " at byte ", at);
  }
  return 0;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t keep_through_step) {
  sys::make_dirs(dir);
  path_ = dir + "/events.out.tfevents.loom";
  std::vector<std::string> kept;
  if (keep_through_step >= 0 && sys::exists(path_)) {
    for (auto& r : read_tfrecords(path_, /*stop_at_damage=*/true))
      if (kept.empty() || event_step(r) <= keep_through_step) kept.push_back(std::move(r));  // [0] = version
  }
  // A log, appended as the run goes (TensorBoard reads it live), so not an AtomicFile: a crash
  // loses at most the record being written, which the reader of a resumed run drops.
  file_ = sys::File::create(path_);
  if (kept.empty()) kept.push_back(file_version_event(now_s()));
  std::string all;
  for (const auto& r : kept) all += tfrecord(r);
  file_.write_all(all.data(), all.size());
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  const std::string rec = tfrecord(scalar_event(now_s(), step, scalars));
  file_.write_all(rec.data(), rec.size());
}

}  // namespace loom
