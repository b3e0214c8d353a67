// loom-dedup's work-file reader (WorkReader: every stage reads the work files of the stage before
// it from a work folder that a cluster's filesystem shares) on an arbitrary file. The input's first
// byte holds options (bit 0: recompute the header's records checksum, so that mutations get past
// verify() to what is behind it), the rest is the file. It is opened as the kind its header names,
// with the record sizes a stage passes (openings below), and read as the stages read it: verify(),
// every record's fields (up to 4096 records), and work_file_done.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "loom/dedup/work_file.h"
#include "loom/log.h"

namespace {
using loom::dedup::WorkHeader;
using loom::dedup::WorkKind;

// The (kind, record_bytes) pairs a stage opens a file of this kind with: a signatures file with
// the default 14 x 8 hashes and with the H its aux names (a run whose settings match it); any
// other kind with its one record size. A kind no stage reads is opened as edges (and refused).
std::vector<std::pair<WorkKind, uint32_t>> openings(uint32_t kind, uint32_t aux) {
  switch (static_cast<WorkKind>(kind)) {
    case WorkKind::kSignatures:
      if (aux < 1 || aux > 65536) return {{WorkKind::kSignatures, 8 * (3 + 14 * 8)}};
      return {{WorkKind::kSignatures, 8 * (3 + 14 * 8)}, {WorkKind::kSignatures, 8 * (3 + aux)}};
    case WorkKind::kBandKeys: return {{WorkKind::kBandKeys, 16}};
    case WorkKind::kEdges: return {{WorkKind::kEdges, 16}};
    case WorkKind::kContamination: return {{WorkKind::kContamination, 24}};
    case WorkKind::kRemovals: return {{WorkKind::kRemovals, 64}};
  }
  return {{WorkKind::kEdges, 16}};
}

void read_as(const std::string& path, WorkKind kind, uint32_t record_bytes) {
  uint64_t params = 0;
  loom::fuzz::expect_only_loom_errors([&] {
    const loom::dedup::WorkReader r(path, kind, record_bytes);
    params = r.header().params_xxh64;
    r.verify();
    volatile uint64_t sink = r.header().aux;
    for (uint64_t i = 0; i < r.num_records() && i < 4096; ++i)
      for (uint32_t k = 0; k < record_bytes / 8; ++k) sink = sink + r.record(i)[k];
  });
  (void)loom::dedup::work_file_done(path, kind, record_bytes, params);  // logs and swallows a refusal
}
}  // namespace

// work_file_done logs each refusal: errors only, or the log would drown libFuzzer's.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loom::log::set_level(loom::log::Level::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) != 0)
    loom::fuzz::fix_checksum(file, offsetof(WorkHeader, records_xxh64), file, sizeof(WorkHeader), UINT64_MAX);
  uint32_t kind = 0, aux = 0;
  if (file.size() >= sizeof(WorkHeader)) {
    std::memcpy(&kind, file.data() + offsetof(WorkHeader, kind), 4);
    std::memcpy(&aux, file.data() + offsetof(WorkHeader, aux), 4);
  }
  const std::string path = loom::fuzz::scratch() / "w.work";
  loom::fuzz::put_file(path, file);
  for (const auto& [k, record_bytes] : openings(kind, aux)) read_as(path, k, record_bytes);
  return 0;
}
