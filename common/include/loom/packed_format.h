// loom packed shard, format version 1: fixed-length training sequences ("packs") that carry their
// document boundaries. Written by `loom-pack pack`, read by loom-train. Same text in docs/FORMAT.md.
//
//   NAME.bin       num_packs * seq_len token ids, little-endian, dtype as the source shards;
//                  pack p is tokens [p*seq_len, (p+1)*seq_len). Positions not covered by a segment
//                  hold pad_id and carry no loss and no attention.
//   NAME.bin.meta  a 128-byte header, then
//                  uint64 seg_offsets[num_packs + 1]: pack p's segments are
//                         segments[seg_offsets[p], seg_offsets[p+1]); seg_offsets[0] == 0,
//                         seg_offsets[num_packs] == num_segments;
//                  PackedSegment segments[num_segments] (24 bytes each, below).
//
// Header, little-endian:
//   off size field
//     0    8 magic            "LOOMPACK"
//     8    4 version          u32, 1
//    12    4 header_size      u32, 128
//    16    4 dtype_bytes      u32, 2 or 4
//    20    4 vocab_size       u32
//    24    4 bos_id           i32 (-1: none)
//    28    4 eos_id           i32 (-1: none)
//    32    4 flags            u32, the source shards' flags (bit 0 bos added, bit 1 eos added)
//    36    4 seq_len          u32, tokens per pack (L)
//    40    4 pad_id           u32, the id written into padding (eos_id, or 0 without one)
//    44    4 strategy         u32, 0 = concat, 1 = bestfit
//    48    8 num_packs        u64, >= 1
//    56    8 num_segments     u64
//    64    8 num_tokens       u64, tokens inside segments (num_packs*seq_len - padding)
//    72    8 num_source_docs  u64, documents of the source shards
//    80    8 bin_xxh64        u64, XXH64 of NAME.bin
//    88    8 index_xxh64      u64, XXH64 of seg_offsets and segments (contiguous bytes)
//    96    8 model_fingerprint u64, as in the token shards
//   104    8 seed             u64, the seed the packer was run with
//   112    8 set_id           u64, the output set's identity, equal in every file of the set: XXH64
//                             of the run's settings and inputs (two runs share it only when they
//                             write the same files); 0: not recorded (files written before sets were)
//   120    4 shard_index      u32, this file's place in its set, < shard_count (0 when set_id is 0)
//   124    4 shard_count      u32, the number of files of the set (0 when set_id is 0)
//
// An output set is the files one `loom-pack pack` run writes: NAME.bin, or NAME-00000.bin ...
// when rolled (--max-packs-per-shard). loom-train refuses a dataset folder holding two set_ids,
// or a set missing a shard_index or holding one twice.
//
// PackedSegment, 24 bytes: a run of one document's tokens inside one pack.
//     0    8 doc              u64, index of the source document (inputs in command-line order,
//                             documents in shard order)
//     8    4 start            u32, first position in the pack
//    12    4 length           u32, >= 1; start + length <= seq_len; segments of a pack are sorted by
//                             start and do not overlap
//    16    4 doc_pos          u32, position of the segment's first token inside its document
//                             (> 0 when a document was cut and this is a continuation)
//    20    4 seg_flags        u32, bit 0: the segment ends its document (else the document continues
//                             in a later segment)
//
// The trainer derives from segments: position ids (restarting per segment, or doc_pos-based),
// attention that never crosses a segment, and no loss from a segment's last token to the next one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/hash.h"
#include "loom/shard_format.h"
#include "loom/sys.h"

namespace loom {

inline constexpr char kPackedMagic[8] = {'L', 'O', 'O', 'M', 'P', 'A', 'C', 'K'};
inline constexpr uint32_t kPackedVersion = 1;
inline constexpr uint32_t kSegEndsDoc = 1u << 0;

enum class PackStrategy : uint32_t { kConcat = 0, kBestfit = 1 };
const char* pack_strategy_name(PackStrategy s);

struct PackedHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint32_t dtype_bytes;
  uint32_t vocab_size;
  int32_t bos_id;
  int32_t eos_id;
  uint32_t flags;
  uint32_t seq_len;
  uint32_t pad_id;
  uint32_t strategy;
  uint64_t num_packs;
  uint64_t num_segments;
  uint64_t num_tokens;
  uint64_t num_source_docs;
  uint64_t bin_xxh64;
  uint64_t index_xxh64;
  uint64_t model_fingerprint;
  uint64_t seed;
  uint64_t set_id;
  uint32_t shard_index;
  uint32_t shard_count;
};
static_assert(sizeof(PackedHeader) == 128, "the packed header is 128 bytes on disk");
static_assert(offsetof(PackedHeader, set_id) == 112 && offsetof(PackedHeader, shard_index) == 120 &&
                  offsetof(PackedHeader, shard_count) == 124,
              "the output set's identity sits in what were the reserved bytes 112..127");
static_assert(offsetof(PackedHeader, vocab_size) == offsetof(ShardHeader, vocab_size) &&
                  offsetof(PackedHeader, dtype_bytes) == offsetof(ShardHeader, dtype_bytes),
              "loom headers share their first 24 bytes (detail::read_loom_header)");

struct PackedSegment {
  uint64_t doc;
  uint32_t start;
  uint32_t length;
  uint32_t doc_pos;
  uint32_t seg_flags;
};
static_assert(sizeof(PackedSegment) == 24, "a packed segment is 24 bytes on disk");

// Writes a packed shard; add_pack() takes the pack's tokens (<= seq_len; the rest is padded) and
// its segments. The index is kept in memory (O(packs), not O(tokens)).
class PackedWriter {
 public:
  PackedWriter(const std::string& bin_path, const TokenizerInfo& info, uint32_t seq_len, PackStrategy strategy,
               uint64_t seed);
  void add_pack(const uint32_t* tokens, size_t n, const PackedSegment* segs, size_t num_segs);
  void add_pack(const std::vector<uint32_t>& tokens, const std::vector<PackedSegment>& segs) {
    add_pack(tokens.data(), tokens.size(), segs.data(), segs.size());
  }
  // A whole pack as seq_len raw little-endian ids of the shard's dtype, padding included, copied
  // from loom shards whose ids the caller checks (ShardStreamCheck) before publish(); segments as
  // for add_pack.
  void add_pack_raw(const uint8_t* bytes, const PackedSegment* segs, size_t num_segs) {
    const size_t end = num_segs;
    add_packs_raw(bytes, 1, segs, &end);
  }
  // n such packs back to back (one write; 1 MiB or more bypasses the file's buffer): pack i's
  // segments are segs[seg_ends[i-1], seg_ends[i]).
  void add_packs_raw(const uint8_t* bytes, size_t n, const PackedSegment* segs, const size_t* seg_ends);
  // add_packs_raw in parts, for bytes that do not pass through a buffer (concat copies its packs
  // straight from the input files): the index of n packs here, their bytes, in order, through
  // copy_raw (then hash_raw of the same bytes) or write_raw. seal() checks the sizes agree.
  void add_index(size_t n, const PackedSegment* segs, const size_t* seg_ends);
  void copy_raw(const sys::File& src, uint64_t src_offset, size_t n_ids) { bin_.copy_raw(src, src_offset, n_ids); }
  void hash_raw(const uint8_t* bytes, size_t n_ids) { bin_.hash_raw(bytes, n_ids); }
  void write_raw(const uint8_t* bytes, size_t n_ids) { bin_.write_raw(bytes, n_ids); }
  // add_packs_raw in two halves for two threads, batch after batch in the same order: add_index and
  // hash_raw(bytes, n * seq_len) on one, write_unhashed(bytes, n * seq_len) on another (the halves
  // touch different members).
  void write_unhashed(const uint8_t* bytes, size_t n_ids) { bin_.write_unhashed(bytes, n_ids); }
  void hash_as(const Xxh64& h) { bin_.hash_as(h); }
  // Room for this many more packs and segments in the index (no regrowth on large runs).
  void reserve(uint64_t packs, uint64_t segments) {
    seg_offsets_.reserve(seg_offsets_.size() + packs);
    segments_.reserve(segments_.size() + segments);
  }
  uint64_t num_packs() const { return seg_offsets_.size() - 1; }
  uint64_t num_tokens() const { return num_tokens_; }
  uint32_t pad_id() const { return pad_id_; }
  // The output set this file belongs to (header bytes 112..127), before seal(); set_id != 0 and
  // shard_index < shard_count. Without it the header records none (0, as older files).
  void set_output_set(uint64_t set_id, uint32_t shard_index, uint32_t shard_count);
  // Writes the .meta and renames both files into place. Zero packs is an error.
  void commit(uint64_t num_source_docs);
  // commit() in two steps: seal() writes everything under temporary names and closes the files;
  // publish() renames them into place.
  void seal(uint64_t num_source_docs);
  void publish() { bin_.publish(); }
  // The index written as the packs come, when every pack's segment count is known before its
  // segments (loom-pack's plan): before any pack, seg_offsets (num_packs + 1 of them, from 0) go to
  // the .meta; each add_index then appends its segments there instead of keeping them (concat adds
  // them on the thread that hashes while the .bin is still being copied), and seal() checks that
  // the packs added had exactly those offsets and writes only the header. Same bytes as seal()
  // alone.
  void open_index(const std::vector<uint64_t>& seg_offsets);

 private:
  std::string bin_path_;
  TokenizerInfo info_;
  uint32_t seq_len_, pad_id_;
  PackStrategy strategy_;
  uint64_t seed_;
  uint64_t set_id_ = 0;
  uint32_t shard_index_ = 0, shard_count_ = 0;
  detail::TokenBinWriter bin_;
  std::vector<uint64_t> seg_offsets_{0};
  std::vector<PackedSegment> segments_;
  std::vector<uint32_t> pack_;
  uint64_t num_tokens_ = 0;
  bool index_open_ = false;    // open_index(): segments go to the .meta as they come
  Xxh64 index_hash_;           // of what open_index() and add_index() wrote so far
  uint64_t declared_offsets_xxh64_ = 0;
  uint64_t declared_packs_ = 0;
  // Checks a pack's segments; returns the tokens they cover.
  uint32_t check_segments(size_t n, const PackedSegment* segs, size_t num_segs) const;
};

// A memory-mapped packed shard. Every check that needs no token is the constructor's (O(packs +
// segments)), so loom-pack verify and loom-train's loader refuse the same files whether or not they
// read the data: the header (bos_id and eos_id in [-1, vocab_size), flags only bits 0 and 1, pad_id
// < vocab_size, a known strategy), the counts' byte sizes overflow-checked before anything is
// mapped, the files' sizes, index_xxh64, seg_offsets, and every segment's bounds, doc and seg_flags
// (only bit 0). verify_deep() reads the .bin: ids < vocab_size and the .bin checksum.
class PackedReader {
 public:
  explicit PackedReader(const std::string& bin_path);

  const PackedHeader& header() const { return header_; }
  const std::string& bin_path() const { return bin_.path(); }
  uint64_t num_packs() const { return header_.num_packs; }
  uint32_t seq_len() const { return header_.seq_len; }
  uint32_t dtype_bytes() const { return header_.dtype_bytes; }
  uint64_t padding_tokens() const { return header_.num_packs * header_.seq_len - header_.num_tokens; }
  TokenizerInfo tokenizer() const;
  const uint8_t* pack_bytes(uint64_t p) const { return bin_.data() + p * header_.seq_len * header_.dtype_bytes; }
  // Pack p's seq_len ids, widened to uint32 into out (resized).
  void read_pack(uint64_t p, std::vector<uint32_t>& out) const;
  const PackedSegment* segments_begin(uint64_t p) const { return segments_ + seg_offsets_[p]; }
  const PackedSegment* segments_end(uint64_t p) const { return segments_ + seg_offsets_[p + 1]; }
  uint64_t num_segments(uint64_t p) const { return seg_offsets_[p + 1] - seg_offsets_[p]; }
  const sys::MappedFile& bin() const { return bin_; }

  // id_limit > 0 also requires every id < id_limit (verify --vocab-size).
  template <typename F>
  void verify_deep(F&& on_bytes, uint32_t id_limit = 0) const;
  void verify_deep() const {
    verify_deep([](uint64_t) {});
  }

 private:
  void verify_range(uint64_t begin_token, uint64_t end_token, uint32_t id_limit) const;
  sys::MappedFile meta_, bin_;
  PackedHeader header_{};
  const uint64_t* seg_offsets_ = nullptr;
  const PackedSegment* segments_ = nullptr;
};

template <typename F>
void PackedReader::verify_deep(F&& on_bytes, uint32_t id_limit) const {
  const uint64_t got = detail::scan_in_chunks(
      bin_, dtype_bytes(), header_.num_packs * header_.seq_len,
      [&](uint64_t b, uint64_t e, uint32_t mx) {
        if (mx >= header_.vocab_size || (id_limit && mx >= id_limit)) verify_range(b, e, id_limit);
      },
      on_bytes);
  if (got != header_.bin_xxh64) detail::fail_bin_checksum(bin_path(), got, header_.bin_xxh64);
}

// check_same_tokenizer of two packed shards, and the same pad_id (the trainer pads every batch with
// one id).
void check_same_tokenizer(const PackedReader& a, const PackedReader& b);

}  // namespace loom
