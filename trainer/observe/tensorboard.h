// TensorBoard event files written directly (no TensorFlow, no protobuf library):
//
//   file    events.out.tfevents.loom  in the run's tensorboard/ folder
//   record  u64 LE length | u32 LE masked_crc32c(length bytes) | data | u32 LE masked_crc32c(data)
//           masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8, c = CRC-32C (Castagnoli) of x
//   data    an Event protobuf: wall_time (1, double), step (2, int64), file_version (3, string,
//           first record "brain.Event:2") or summary (5, Summary{ repeated Value value = 1 },
//           Value{ tag = 1 string, simple_value = 2 float })
//
// Resume: the constructor keeps the existing file's records up to `keep_through_step` and drops the
// rest (a resumed run rewrites the steps after its checkpoint), so steps stay consistent.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/sys.h"

namespace loom {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord around `data`.
std::string tfrecord(const std::string& data);
// An Event protobuf with one scalar per (tag, value).
std::string scalar_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars);

// Parses the records of a file (checking both CRCs and the framing); throws loom::Error naming the
// file, record index and byte offset on damage. Returns each record's data. stop_at_damage: return
// the records before the first damaged one instead (a crash's torn last record, on resume).
std::vector<std::string> read_tfrecords(const std::string& path, bool stop_at_damage = false);
// The step field of an Event (0 when absent).
int64_t event_step(const std::string& event);

class TensorBoardWriter {
 public:
  // keep_through_step < 0: start a new file (dropping any old one).
  TensorBoardWriter(const std::string& dir, int64_t keep_through_step);
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sys::File file_;
};

}  // namespace loom
