// loom-dedup's intermediate files, format version 1. The same text is in docs/DEDUP.md.
//
// Every intermediate file is a 64-byte header followed by num_records fixed-size records, all
// little-endian:
//   off size field
//     0    8 magic           "LOOMDDP\0"
//     8    4 version         u32, 1
//    12    4 kind            u32: 1 signatures, 2 band keys, 3 edges, 4 contamination, 5 removals
//    16    4 record_bytes    u32, the size of one record
//    20    4 aux             u32, kind-specific: the number of hashes H (signatures), the band (band
//                            keys, edges; `bands` is the exact band), 0 otherwise
//    24    8 num_records     u64
//    32    8 params_xxh64    u64, XXH64 of what the file was made from (the settings that change it
//                            and the checksums of the files it was computed from); a stage whose
//                            output has the params it would write, and whose records match their
//                            checksum, is not redone
//    40    8 records_xxh64   u64, XXH64 (seed 0) of the records' bytes
//    48   16 reserved        zero
//
// Records, by kind (u64 fields, the removals' last two f64; "doc" is a document id: source << 40 |
// index in the source, where the sources are the reference sets, then the inputs, in command-line
// order):
//   1 signatures     length, exact_h0, exact_h1, sig[0..H): one per document of one source, in order
//   2 band keys      key, doc: one per document with a shingle (every document for the exact band),
//                    sorted by key then doc
//   3 edges          a, b with a < b: a candidate pair, sorted, unique
//   4 contamination  doc, eval item, token position of the first shared n-gram: sorted by doc
//   5 removals       doc, matched doc (or kNoDoc), reason (1 exact, 2 near, 3 contaminated, 4
//                    contaminated and only reported), eval item, position, length, estimate (f64),
//                    Jaccard (f64, NaN: not computed): sorted by doc
//
// A numpy reader: np.fromfile(path, dtype='<u8', offset=64).reshape(num_records, record_bytes // 8).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/sys.h"

namespace loom::dedup {

inline constexpr char kWorkMagic[8] = {'L', 'O', 'O', 'M', 'D', 'D', 'P', '\0'};
inline constexpr uint32_t kWorkVersion = 1;
enum class WorkKind : uint32_t { kSignatures = 1, kBandKeys = 2, kEdges = 3, kContamination = 4, kRemovals = 5 };
const char* work_kind_name(WorkKind kind);

struct WorkHeader {
  char magic[8];
  uint32_t version;
  uint32_t kind;
  uint32_t record_bytes;
  uint32_t aux;
  uint64_t num_records;
  uint64_t params_xxh64;
  uint64_t records_xxh64;
  uint8_t reserved[16];
};
static_assert(sizeof(WorkHeader) == 64, "the work file header is 64 bytes on disk");

// Document ids: the source in the high bits, the document's index in its source in the low 40.
inline constexpr uint32_t kDocIndexBits = 40;
inline constexpr uint64_t kNoDoc = ~uint64_t{0};
inline uint64_t make_doc(uint64_t source, uint64_t index) { return source << kDocIndexBits | index; }
inline uint64_t doc_source(uint64_t doc) { return doc >> kDocIndexBits; }
inline uint64_t doc_index(uint64_t doc) { return doc & ((uint64_t{1} << kDocIndexBits) - 1); }

// Writes records under a temporary name (sys::AtomicFile); commit() fills in the header and
// renames the file into place, so a killed stage leaves no file under the final name.
class WorkWriter {
 public:
  WorkWriter(const std::string& path, WorkKind kind, uint32_t record_bytes, uint32_t aux, uint64_t params);
  void add(const void* record);
  void add_many(const void* records, uint64_t n);
  uint64_t num_records() const { return num_records_; }
  void commit();

 private:
  sys::AtomicFile file_;
  WorkHeader header_{};
  uint64_t num_records_ = 0;
  Xxh64 hash_;
};

// A memory-mapped work file (outside bytes: the work folder may be shared). The constructor checks
// the magic, version, kind, record size (a signatures file's also against its H), that the reserved
// bytes are zero and that num_records fits the file exactly (compared as a count: num_records x
// record_bytes may wrap); verify() also the records' checksum (one pass). record_bytes: a
// positive multiple of 8.
class WorkReader {
 public:
  WorkReader(const std::string& path, WorkKind kind, uint32_t record_bytes);
  const WorkHeader& header() const { return header_; }
  const std::string& path() const { return map_.path(); }
  uint64_t num_records() const { return header_.num_records; }
  const uint64_t* record(uint64_t i) const {
    return reinterpret_cast<const uint64_t*>(map_.data() + sizeof(WorkHeader) + i * header_.record_bytes);
  }
  void verify() const;
  // verify(), and check(i, record) for every record i in the same pass (a stage's checks of what
  // the records hold, which throw loom::Error). A checksum mismatch is reported first: a corrupted
  // file is called that, not refused for the garbage in one of its records.
  template <typename Check>
  void verify(Check&& check) const;

 private:
  void check_digest(uint64_t got) const;
  sys::MappedFile map_;
  WorkHeader header_{};
};

template <typename Check>
void WorkReader::verify(Check&& check) const {
  const uint64_t block = std::max<uint64_t>(1, (uint64_t{1} << 20) / header_.record_bytes);  // 1 MiB at a time
  Xxh64 hash;
  std::exception_ptr bad;
  for (uint64_t i = 0; i < num_records(); i += block) {
    const uint64_t n = std::min(block, num_records() - i);
    hash.update(record(i), n * header_.record_bytes);
    if (bad) continue;
    try {
      for (uint64_t k = i; k < i + n; ++k) check(k, record(k));
    } catch (const Error&) {
      bad = std::current_exception();
    }
  }
  check_digest(hash.digest());
  if (bad) std::rethrow_exception(bad);
}

// Whether path holds a complete work file of this kind made from `params` whose records match
// their checksum: a stage skips an output for which this is true. A file that exists but fails is
// logged and redone.
bool work_file_done(const std::string& path, WorkKind kind, uint32_t record_bytes, uint64_t params);

}  // namespace loom::dedup
