#include "loom/dedup/work_file.h"

#include <cstddef>
#include <cstring>

#include "loom/error.h"
#include "loom/log.h"

namespace loom::dedup {

const char* work_kind_name(WorkKind kind) {
  switch (kind) {
    case WorkKind::kSignatures: return "signatures";
    case WorkKind::kBandKeys: return "band keys";
    case WorkKind::kEdges: return "edges";
    case WorkKind::kContamination: return "contamination";
    case WorkKind::kRemovals: return "removals";
  }
  return "unknown";
}

WorkWriter::WorkWriter(const std::string& path, WorkKind kind, uint32_t record_bytes, uint32_t aux, uint64_t params)
    : file_(path) {
  std::memcpy(header_.magic, kWorkMagic, 8);
  header_.version = kWorkVersion;
  header_.kind = static_cast<uint32_t>(kind);
  header_.record_bytes = record_bytes;
  header_.aux = aux;
  header_.params_xxh64 = params;
  file_.write(&header_, sizeof header_);  // rewritten by commit()
}

void WorkWriter::add(const void* record) { add_many(record, 1); }

void WorkWriter::add_many(const void* records, uint64_t n) {
  const size_t bytes = n * header_.record_bytes;
  file_.write(records, bytes);
  hash_.update(records, bytes);
  num_records_ += n;
}

void WorkWriter::commit() {
  header_.num_records = num_records_;
  header_.records_xxh64 = hash_.digest();
  file_.write_at(0, &header_, sizeof header_);
  file_.commit();
}

WorkReader::WorkReader(const std::string& path, WorkKind kind, uint32_t record_bytes) : map_(path) {
  LOOM_ASSERT(record_bytes > 0 && record_bytes % 8 == 0, path, ": records of ", record_bytes, " bytes asked for");
  LOOM_CHECK(map_.size() >= sizeof(WorkHeader), path, ": ", map_.size(), " bytes, shorter than the ",
             sizeof(WorkHeader), "-byte header of a loom-dedup work file");
  std::memcpy(&header_, map_.data(), sizeof header_);
  LOOM_CHECK(std::memcmp(header_.magic, kWorkMagic, 8) == 0, path, ": not a loom-dedup work file (bad magic)");
  LOOM_CHECK(header_.version == kWorkVersion, path, ": work file version ", header_.version, ", this build reads ",
             kWorkVersion);
  LOOM_CHECK(header_.kind == static_cast<uint32_t>(kind), path, ": holds kind ", header_.kind, ", expected ",
             static_cast<uint32_t>(kind), " (", work_kind_name(kind), ")");
  LOOM_CHECK(header_.record_bytes == record_bytes, path, ": records of ", header_.record_bytes,
             " bytes, expected ", record_bytes, " (made with other settings?)");
  if (kind == WorkKind::kSignatures) {
    const uint32_t hashes = record_bytes / 8 - 3;
    LOOM_CHECK(record_bytes >= 32 && header_.aux == hashes, path, ": ", header_.aux,
               " hashes a signature (aux), but records of ", record_bytes, " bytes hold ", hashes);
  }
  const uint8_t zero[sizeof header_.reserved] = {};
  LOOM_CHECK(std::memcmp(header_.reserved, zero, sizeof zero) == 0, path, ": reserved header bytes ",
             offsetof(WorkHeader, reserved), "-", sizeof(WorkHeader) - 1, " are not zero (written by a newer loom-dedup?)");
  // Compared as a count, not as a size: num_records x record_bytes may wrap past 2^64.
  const uint64_t fit = (map_.size() - sizeof(WorkHeader)) / record_bytes;
  LOOM_CHECK(header_.num_records <= fit, path, ": ", header_.num_records, " records of ", record_bytes,
             " bytes, more than the ", map_.size(), "-byte file holds (truncated?)");
  const uint64_t want = sizeof(WorkHeader) + header_.num_records * uint64_t{record_bytes};
  LOOM_CHECK(map_.size() == want, path, ": ", map_.size(), " bytes, expected ", want, " for ", header_.num_records,
             " records of ", record_bytes, " bytes (trailing bytes?)");
}

void WorkReader::verify() const {
  check_digest(xxh64(map_.data() + sizeof(WorkHeader), map_.size() - sizeof(WorkHeader)));
}

void WorkReader::check_digest(uint64_t got) const {
  LOOM_CHECK(got == header_.records_xxh64, path(), ": records checksum ", hex64(got), ", the header says ",
             hex64(header_.records_xxh64), " (corrupted)");
}

bool work_file_done(const std::string& path, WorkKind kind, uint32_t record_bytes, uint64_t params) {
  if (!sys::exists(path)) return false;
  try {
    WorkReader r(path, kind, record_bytes);
    if (r.header().params_xxh64 != params) {
      log::info(path, ": made from other inputs or settings, redone");
      return false;
    }
    r.verify();
    return true;
  } catch (const Error& e) {
    log::warn(e.what(), "; redone");
    return false;
  }
}

}  // namespace loom::dedup
