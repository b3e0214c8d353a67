// loom token shard, format version 1. The same text is in docs/FORMAT.md.
//
// A shard is two files written together (the .meta last, so its presence marks the pair complete):
//
//   NAME.bin       token ids of all documents back to back, little-endian, no header.
//                  dtype uint16 when vocab_size <= 65536, else uint32 (header.dtype_bytes says which).
//   NAME.bin.meta  a 128-byte header, then uint64 offsets[num_docs + 1], counted in tokens:
//                  document i is tokens [offsets[i], offsets[i+1]) of NAME.bin;
//                  offsets[0] == 0 and offsets[num_docs] == num_tokens.
//
// Header, all fields little-endian:
//   off size field
//     0    8 magic              "LOOMTOK\0"
//     8    4 version            u32, 1
//    12    4 header_size        u32, 128 (the offsets start here)
//    16    4 dtype_bytes        u32, 2 (uint16) or 4 (uint32)
//    20    4 vocab_size         u32, every id is < vocab_size
//    24    4 bos_id             i32, the model's BOS id, -1 if it has none
//    28    4 eos_id             i32, the model's EOS id, -1 if it has none
//    32    4 flags              u32, bit 0: each document starts with bos_id, bit 1: ends with eos_id
//    36    4 reserved0          0
//    40    8 num_docs           u64, >= 1
//    48    8 num_tokens         u64
//    56    8 bin_xxh64          u64, XXH64 (seed 0) of NAME.bin's bytes
//    64    8 offsets_xxh64      u64, XXH64 (seed 0) of the offsets array's bytes
//    72    8 model_fingerprint  u64, XXH64 (seed 0) of the SentencePiece .model file
//    80    4 encoder            u32, what encoded the text: 0 not recorded, 1 libsentencepiece,
//                               2 loom's encoder (loom/spm_encoder.h); the ids are the same either way
//    84    4 reserved1          0
//    88    8 settings_xxh64     u64, XXH64 (seed 0) of the canonical text of the loom-tokenize
//                               settings that change the output (docs/TOKENIZE.md, "Output and
//                               reruns"); 0 not recorded (loom-pack's outputs, older loom-tokenize).
//                               loom-tokenize --resume keeps a shard only when it equals its own.
//    96   32 reserved           zero; opening a shard ignores it, later versions may use it
//
// Adding a field: take it from `reserved`, with 0 meaning what files written before it mean, and
// keep the version (opening a shard ignores reserved bytes, so every reader still opens it; the
// commands that copy its data refuse it, below).
//
// What a reader checks, and where (the same list is in docs/FORMAT.md):
//   on open (ShardReader's constructor, O(num_docs), every command): magic, version, header_size,
//     dtype_bytes, vocab_size; num_docs >= 1; every size computed from a count overflow-checked
//     before anything is mapped ((num_docs + 1) x 8, num_tokens x dtype_bytes); the .meta's and the
//     .bin's sizes; bos_id and eos_id in [-1, vocab_size); flags only bits 0 and 1, naming ids that
//     exist; encoder a known value; offsets from 0, non-decreasing, ending at num_tokens, and their
//     checksum. The .bin and .meta must be regular files (sys::File::open_regular: a FIFO is
//     refused, never waited on).
//   by verify_deep() (one sequential pass; also ShardStreamCheck, so merge, split, convert and
//     pack): the reserved bytes zero (a field of a newer loom that a copy would lose, or damage);
//     every id < vocab_size; bos/eos where the flags say; the .bin checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/hash.h"
#include "loom/sys.h"

namespace loom {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "loom's file formats assume a little-endian host");

inline constexpr char kShardMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kShardFlagBos = 1u << 0;
inline constexpr uint32_t kShardFlagEos = 1u << 1;
// ShardHeader::encoder values.
inline constexpr uint32_t kShardEncoderUnrecorded = 0;
inline constexpr uint32_t kShardEncoderSentencePiece = 1;
inline constexpr uint32_t kShardEncoderLoom = 2;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint32_t dtype_bytes;
  uint32_t vocab_size;
  int32_t bos_id;
  int32_t eos_id;
  uint32_t flags;
  uint32_t reserved0;
  uint64_t num_docs;
  uint64_t num_tokens;
  uint64_t bin_xxh64;
  uint64_t offsets_xxh64;
  uint64_t model_fingerprint;
  uint32_t encoder;
  uint32_t reserved1;
  uint64_t settings_xxh64;
  uint8_t reserved[32];
};
static_assert(sizeof(ShardHeader) == 128, "the shard header is 128 bytes on disk");
static_assert(offsetof(ShardHeader, settings_xxh64) == 88, "settings_xxh64 at byte 88");

// What a writer is told about the tokenizer; recorded in the header.
struct TokenizerInfo {
  uint32_t vocab_size = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  uint32_t flags = 0;  // kShardFlagBos | kShardFlagEos
  uint64_t model_fingerprint = 0;
};

// The one tokenizer-compatibility check: throws loom::Error unless b was made with the same tokenizer
// as a, that is vocab_size, bos_id, eos_id, flags (whether documents carry bos/eos) and
// model_fingerprint all equal. The message names both and every field that differs, b's value
// first: "b.bin: tokenizer differs from a.bin: vocab_size 200 vs 100, eos_id 3 vs 2; only shards of
// one tokenizer go together". The names are file paths, or what the caller calls each side.
void check_same_tokenizer(const TokenizerInfo& a, const std::string& a_name, const TokenizerInfo& b,
                          const std::string& b_name);

// uint16 when every id fits.
inline uint32_t dtype_bytes_for_vocab(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }
inline std::string meta_path_for(const std::string& bin_path) { return bin_path + ".meta"; }

namespace detail {
// Hashes ids [begin, end) of a raw .bin into h and returns the largest. The hash reads the range
// from memory (its arithmetic hides the misses) and the max scan then from cache: keep ranges
// L2-sized.
uint32_t hash_ids(Xxh64& h, const uint8_t* bytes, uint32_t dtype_bytes, uint64_t begin, uint64_t end);

// One sequential pass over a .bin of `total_tokens` ids in chunks of 128 KiB: each is hashed, its
// largest id found in the same loop, then check(begin, end, max_id) runs on it while it is still
// in L2. Pages already done are dropped every 64 MiB (files larger than RAM stay fast). Returns the
// XXH64 of the whole file.
template <typename Check, typename OnBytes>
uint64_t scan_in_chunks(const sys::MappedFile& bin, uint32_t dtype_bytes, uint64_t total_tokens, Check&& check,
                        OnBytes&& on_bytes) {
  const uint64_t chunk = (uint64_t{128} << 10) / dtype_bytes, release = uint64_t{64} << 20;
  bin.advise_sequential();
  Xxh64 h;
  uint64_t released = 0;
  for (uint64_t t = 0; t < total_tokens; t += chunk) {
    const uint64_t end = t + chunk < total_tokens ? t + chunk : total_tokens;
    check(t, end, hash_ids(h, bin.data(), dtype_bytes, t, end));
    if (end * dtype_bytes >= released + release || end == total_tokens) {
      bin.advise_done(released, end * dtype_bytes - released);
      on_bytes(end * dtype_bytes - released);
      released = end * dtype_bytes;
    }
  }
  return h.digest();
}

// The tokenizer fields every loom header has, checked on open: bos_id and eos_id in [-1,
// vocab_size), flags only bits 0 (bos) and 1 (eos), and a flag only with its id. `meta` names the file.
void check_tokenizer_fields(const std::string& meta, uint32_t vocab_size, int32_t bos_id, int32_t eos_id,
                            uint32_t flags);

// Checks the fields every loom header starts with (magic, version, header_size, dtype_bytes,
// vocab_size: the same offsets in ShardHeader and PackedHeader) and copies the header out of meta.
// `what` names the format in the bad-magic message.
void read_loom_header(const sys::MappedFile& meta, const char (&magic)[8], const char* what, uint32_t max_version,
                      void* header, size_t header_size);

// The fields ShardHeader and PackedHeader share by name: the common prefix and the tokenizer.
template <typename Header>
void fill_loom_header(Header& h, const char (&magic)[8], uint32_t version, uint32_t dtype_bytes,
                      const TokenizerInfo& info) {
  std::memcpy(h.magic, magic, 8);
  h.version = version;
  h.header_size = sizeof(Header);
  h.dtype_bytes = dtype_bytes;
  h.vocab_size = info.vocab_size;
  h.bos_id = info.bos_id;
  h.eos_id = info.eos_id;
  h.flags = info.flags;
  h.model_fingerprint = info.model_fingerprint;
}
template <typename Header>
TokenizerInfo tokenizer_of(const Header& h) {
  return TokenizerInfo{h.vocab_size, h.bos_id, h.eos_id, h.flags, h.model_fingerprint};
}

// The .bin side of a loom writer: ids stored as dtype_bytes each under a temporary name, hashed as
// they go. commit() writes the .meta from its parts (header, then index arrays) and renames both
// into place, the .meta last.
class TokenBinWriter {
 public:
  TokenBinWriter(const std::string& bin_path, uint32_t dtype_bytes);
  void write(const uint32_t* ids, size_t n);
  uint32_t dtype_bytes() const { return dtype_bytes_; }
  uint64_t digest() const { return hash_.digest(); }
  uint64_t bytes_written() const { return bin_.bytes_written(); }
  // Raw little-endian ids of this dtype, already known to be < vocab (a copy from a checked shard).
  // Large runs (loom-tokenize's blocks of documents) go to the file as they are, not through the
  // file's buffer: one copy of the bytes fewer on the writing thread.
  void write_raw(const uint8_t* bytes, size_t n_ids);
  // write_raw in two halves: copy_raw appends n_ids ids of a checked shard's .bin from byte
  // src_offset in the kernel (no hashing); hash_raw takes the same bytes, read through a mapping
  // of that file, in order (from another thread if the caller joins it before digest()).
  void copy_raw(const sys::File& src, uint64_t src_offset, size_t n_ids) {
    bin_.copy_from(src, src_offset, uint64_t{n_ids} * dtype_bytes_);
  }
  void hash_raw(const uint8_t* bytes, size_t n_ids) { hash_.update(bytes, n_ids * dtype_bytes_); }
  // write_raw in two halves on two threads: write_unhashed on one, hash_raw of the same bytes, in
  // the same order, on another (each half touches only its own members).
  void write_unhashed(const uint8_t* bytes, size_t n_ids) { bin_.write_unbuffered(bytes, n_ids * dtype_bytes_); }
  // Instead of hash_raw: the bytes written so far are exactly those h hashed (an input's whole .bin,
  // hashed by its check), so the output's checksum continues from h.
  void hash_as(const Xxh64& h) { hash_ = h; }
  using Parts = std::vector<std::pair<const void*, size_t>>;
  void commit(const Parts& meta_parts);
  // commit() in two steps: seal() writes the .meta and closes both files under their temporary
  // names; publish() renames them into place (a caller checks its inputs in between).
  void seal(const Parts& meta_parts);
  // A .meta written while the .bin grows, instead of seal(): open_meta() writes header_bytes of
  // zeros where the header goes, append_meta() the index behind them, seal_streamed() the header
  // in its place and then flushes, fsyncs and closes both as seal() does.
  void open_meta(size_t header_bytes);
  void append_meta(const void* data, size_t n);
  void seal_streamed(const void* header, size_t header_bytes);
  void publish();

 private:
  uint32_t dtype_bytes_;
  sys::AtomicFile bin_;
  std::unique_ptr<sys::AtomicFile> meta_;
  Xxh64 hash_;
  std::vector<uint16_t> narrow_;
};

// The message of a .bin whose XXH64 is not the one its .meta records.
[[noreturn]] void fail_bin_checksum(const std::string& bin_path, uint64_t got, uint64_t want);
// check_same_tokenizer with more differences the caller found in fields of its own format
// ("dtype_bytes 4 vs 2"), reported in the same message.
void check_same_tokenizer(const TokenizerInfo& a, const std::string& a_name, const TokenizerInfo& b,
                          const std::string& b_name, std::vector<std::string> differences);
}  // namespace detail

// Which format a shard's .meta holds, told apart by content (not by name); kMegatron: no
// NAME.bin.meta but a Megatron-LM NAME.idx beside NAME.bin (loom/megatron_format.h).
enum class ShardKind { kLoom, kPacked, kInternlm, kMegatron, kUnknown };
ShardKind detect_shard_kind(const std::string& bin_path);
const char* shard_kind_name(ShardKind kind);

// The shards a command's inputs name: a file is itself; a folder gives every *.bin under it that
// has a .meta (or a Megatron .idx) beside it, sorted; a Megatron dataset's prefix (PREFIX for
// PREFIX.bin + PREFIX.idx) its .bin. Throws when a path does not exist or a folder holds no shard.
std::vector<std::string> expand_shard_paths(const std::vector<std::string>& paths);

// Writes a loom shard under temporary names; commit() makes it visible, atomically. Ids >= vocab
// are refused. Destroyed without commit(), it leaves nothing behind.
class ShardWriter {
 public:
  // encoder: a kShardEncoder* value, recorded in the header; settings_xxh64 likewise (0: none).
  ShardWriter(const std::string& bin_path, const TokenizerInfo& info, uint32_t encoder = kShardEncoderUnrecorded,
              uint64_t settings_xxh64 = 0);
  // ids as uint32; stored as the shard's dtype.
  void add_doc(const uint32_t* ids, size_t n);
  void add_doc(const std::vector<uint32_t>& ids) { add_doc(ids.data(), ids.size()); }
  // Appends the bytes add_doc stores for one document to out: each id checked < vocab (the error
  // names the file, and the document when doc >= 0) and stored as the shard's dtype. Reads only
  // what the constructor set: safe from other threads while this writer writes.
  void format_doc(const uint32_t* ids, size_t n, std::string& out, int64_t doc = -1) const;
  // Documents made by format_doc, back to back in bytes, tokens[i] ids each.
  void add_docs_raw(const uint8_t* bytes, const uint64_t* tokens, size_t ndocs);
  uint64_t num_docs() const { return num_docs_; }
  uint64_t num_tokens() const { return num_tokens_; }
  // Writes the .meta and renames both files into place. Zero documents is an error.
  void commit();

 private:
  std::string bin_path_;
  TokenizerInfo info_;
  uint32_t encoder_;
  uint64_t settings_xxh64_;
  detail::TokenBinWriter bin_;
  // The .meta's offsets (0, then each document's end) go to the .meta as they come, kOffsetsChunk
  // at a time through one reused buffer (hashed on the way): not kept in memory (a std::vector
  // copied them on every doubling, about twice their size through fresh pages: 75 MB for 600 MB of
  // English text, on loom-tokenize's one writing thread), and not written all at once by commit().
  static constexpr size_t kOffsetsChunk = size_t{1} << 17;
  void push_offset(uint64_t offset);
  void flush_offsets();
  std::vector<uint64_t> offsets_;  // not yet in the .meta
  Xxh64 offsets_hash_;
  uint64_t num_docs_ = 0, num_tokens_ = 0;
  std::string doc_;  // add_doc's formatted document, reused
};

// A memory-mapped loom shard. The constructor checks everything that is O(num_docs) ("on open"
// above): the header's fields and counts (overflow-checked), the .meta's and the .bin's sizes,
// offsets monotonic and in range, the offsets checksum. Each failure throws loom::Error naming the
// file, the field or document index and the byte offset where it applies, and what was expected.
class ShardReader {
 public:
  explicit ShardReader(const std::string& bin_path);

  const ShardHeader& header() const { return header_; }
  const std::string& bin_path() const { return bin_.path(); }
  uint64_t num_docs() const { return header_.num_docs; }
  uint64_t num_tokens() const { return header_.num_tokens; }
  uint32_t dtype_bytes() const { return header_.dtype_bytes; }
  TokenizerInfo tokenizer() const;
  const uint64_t* offsets() const { return offsets_; }
  uint64_t doc_len(uint64_t i) const { return offsets_[i + 1] - offsets_[i]; }
  // Raw little-endian token bytes of the whole shard (dtype_bytes() each).
  const uint8_t* token_bytes() const { return bin_.data(); }
  uint32_t token(uint64_t index) const;
  // Appends document i's ids to out.
  void read_doc(uint64_t i, std::vector<uint32_t>& out) const;
  const sys::MappedFile& bin() const { return bin_; }

  // One sequential pass: the header's fields against each other and the data (check_header, then
  // check_tokens over the whole file) and the .bin checksum. Throws on the first failure.
  // on_bytes(n) is called as bytes are checked (for progress). id_limit > 0 also requires every
  // id < id_limit (verify --vocab-size).
  template <typename F>
  void verify_deep(F&& on_bytes, uint32_t id_limit = 0) const;
  void verify_deep() const {
    verify_deep([](uint64_t) {});
  }
  // What verify_deep checks of the header alone, beyond the constructor: reserved bytes zero.
  void check_header() const;
  // Tokens [begin, end) against the header: every id < vocab_size (and < id_limit when > 0), and
  // with the bos (eos) flag, every non-empty document starting (ending) in the range starts with
  // bos_id (ends with eos_id). Ranges are checked in any order; together they cover the file.
  void check_tokens(uint64_t begin_token, uint64_t end_token, uint32_t id_limit = 0) const;
  // check_tokens when the range's largest id is known (hash_ids found it): the id scan only on a failure.
  void check_tokens(uint64_t begin_token, uint64_t end_token, uint32_t id_limit, uint32_t max_id) const;

 private:
  sys::MappedFile meta_, bin_;
  ShardHeader header_{};
  const uint64_t* offsets_ = nullptr;
};

template <typename F>
void ShardReader::verify_deep(F&& on_bytes, uint32_t id_limit) const {
  check_header();
  const uint64_t got = detail::scan_in_chunks(
      bin_, dtype_bytes(), num_tokens(), [&](uint64_t b, uint64_t e, uint32_t mx) { check_tokens(b, e, id_limit, mx); },
      on_bytes);
  if (got != header_.bin_xxh64) detail::fail_bin_checksum(bin_path(), got, header_.bin_xxh64);
}

// verify_deep folded into a stage that reads a shard front to back anyway (merge, split, convert,
// pack): the stage reports how far it has read, the check hashes and checks those tokens while they
// are still in cache, and finish() compares the checksum. No second pass over the file; a stage
// renames its outputs into place only after finish() of every input they were made from.
class ShardStreamCheck {
 public:
  explicit ShardStreamCheck(const ShardReader& r);
  // Tokens [0, end_token) have been read; checks them a chunk at a time.
  void advance_to(uint64_t end_token) {
    if (end_token >= done_ + kChunkTokens) check_to(end_token);
  }
  // Checks the rest and the checksum; throws naming the file when the .bin is not what its .meta says.
  void finish();
  uint64_t done() const { return done_; }
  // The hash of tokens [0, done()).
  const Xxh64& hash() const { return hash_; }

 private:
  static constexpr uint64_t kChunkTokens = 1 << 16;
  void check_to(uint64_t end_token);
  const ShardReader* r_;
  uint64_t done_ = 0;
  Xxh64 hash_;
};

// check_same_tokenizer of two loom shards, and the same dtype_bytes (merge and pack put their token
// bytes side by side).
void check_same_tokenizer(const ShardReader& a, const ShardReader& b);

}  // namespace loom
