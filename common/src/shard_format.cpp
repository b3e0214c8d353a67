#include "loom/shard_format.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "loom/error.h"
#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/packed_format.h"
#include "loom/strings.h"
#include "loom/sys.h"
#include "token_scan.h"

namespace loom {

ShardKind detect_shard_kind(const std::string& bin_path) {
  const std::string meta = meta_path_for(bin_path);
  // A Megatron dataset has PREFIX.idx instead (its reader reports a bad magic there). lexists: an
  // .idx that is a dangling or looping symlink is still the dataset's index, and its reader names
  // what is wrong with it.
  if (!sys::lexists(meta) && sys::lexists(megatron_idx_path(bin_path))) return ShardKind::kMegatron;
  sys::File f = sys::File::open_regular(meta);
  char magic[8] = {0};
  uint64_t n = f.size();
  if (n >= sizeof(magic)) f.pread_exact(magic, sizeof(magic), 0);
  if (std::memcmp(magic, kShardMagic, 8) == 0) return ShardKind::kLoom;
  if (std::memcmp(magic, kPackedMagic, 8) == 0) return ShardKind::kPacked;
  if (std::memcmp(magic, kNpyMagic, sizeof(kNpyMagic)) == 0) return ShardKind::kInternlm;
  return ShardKind::kUnknown;
}

std::vector<std::string> expand_shard_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    if (!sys::is_directory(p)) {
      // Megatron names a dataset by its prefix (--data-path PREFIX): PREFIX.bin beside PREFIX.idx.
      if (!sys::exists(p) && sys::exists(p + ".bin") && sys::lexists(megatron_idx_path(p))) {
        out.push_back(p + ".bin");
        continue;
      }
      LOOM_CHECK(sys::exists(p), p, ": no such file or folder");
      out.push_back(p);
      continue;
    }
    size_t found = 0;
    for (const std::string& f : sys::list_files(p)) {
      // lexists: an index that is a broken symlink still marks a shard, whose reader says what is wrong.
      if (ends_with(f, ".bin") && (sys::lexists(meta_path_for(f)) || sys::lexists(megatron_idx_path(f)))) {
        out.push_back(f);
        ++found;
      }
    }
    LOOM_CHECK(found > 0, p, ": folder holds no shard (no *.bin with a .meta, or a Megatron .idx, beside it)");
  }
  return out;
}

const char* shard_kind_name(ShardKind kind) {
  switch (kind) {
    case ShardKind::kLoom: return "loom";
    case ShardKind::kPacked: return "packed";
    case ShardKind::kInternlm: return "internlm";
    case ShardKind::kMegatron: return "megatron";
    case ShardKind::kUnknown: return "unknown";
  }
  return "unknown";
}

namespace detail {
uint32_t hash_ids(Xxh64& h, const uint8_t* bytes, uint32_t dtype_bytes, uint64_t begin, uint64_t end) {
  h.update(bytes + begin * dtype_bytes, (end - begin) * dtype_bytes);
  return dtype_bytes == 2 ? max_id(reinterpret_cast<const uint16_t*>(bytes) + begin, end - begin)
                          : max_id(reinterpret_cast<const uint32_t*>(bytes) + begin, end - begin);
}

void read_loom_header(const sys::MappedFile& meta, const char (&magic)[8], const char* what, uint32_t max_version,
                      void* header, size_t header_size) {
  const std::string& path = meta.path();
  const std::string magic_text(magic, strnlen(magic, 8));
  LOOM_CHECK(meta.size() >= 8 && std::memcmp(meta.data(), magic, 8) == 0, path, ": bad magic: not a ", what,
             " (expected \"", magic_text, "\" at byte 0)");
  LOOM_CHECK(meta.size() >= header_size, path, ": truncated .meta: ", meta.size(), " bytes, expected at least the ",
             header_size, "-byte header");
  std::memcpy(header, meta.data(), header_size);
  // The common prefix, at the same offsets in every loom header (static_asserts in the headers).
  uint32_t version, hsize, dtype_bytes, vocab_size;
  std::memcpy(&version, meta.data() + 8, 4);
  std::memcpy(&hsize, meta.data() + 12, 4);
  std::memcpy(&dtype_bytes, meta.data() + 16, 4);
  std::memcpy(&vocab_size, meta.data() + 20, 4);
  LOOM_CHECK(version <= max_version, path, ": format version ", version,
             " is newer than this build of loom reads (up to ", max_version, "); upgrade loom");
  LOOM_CHECK(version >= 1, path, ": bad format version 0");
  LOOM_CHECK(hsize == header_size, path, ": header_size ", hsize, ", expected ", header_size);
  LOOM_CHECK(dtype_bytes == 2 || dtype_bytes == 4, path, ": dtype_bytes ", dtype_bytes,
             ", expected 2 (uint16) or 4 (uint32)");
  LOOM_CHECK(vocab_size > 0 && (dtype_bytes == 4 || vocab_size <= 65536), path, ": vocab size ", vocab_size,
             " does not fit dtype uint", dtype_bytes * 8);
}

void check_tokenizer_fields(const std::string& meta, uint32_t vocab_size, int32_t bos_id, int32_t eos_id,
                            uint32_t flags) {
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos_id", bos_id}, {"eos_id", eos_id}})
    LOOM_CHECK(id == -1 || (id >= 0 && static_cast<uint32_t>(id) < vocab_size), meta, ": ", name, " ", id,
               " is neither -1 (none) nor < vocab size ", vocab_size);
  LOOM_CHECK((flags & ~(kShardFlagBos | kShardFlagEos)) == 0, meta, ": flags ", flags,
             " has bits other than 0 (bos) and 1 (eos)");
  LOOM_CHECK(!(flags & kShardFlagBos) || bos_id >= 0, meta, ": flags say documents start with bos, but bos_id is -1");
  LOOM_CHECK(!(flags & kShardFlagEos) || eos_id >= 0, meta, ": flags say documents end with eos, but eos_id is -1");
}
}  // namespace detail

namespace {
std::string flags_text(uint32_t flags) {
  const char* names[] = {"none", "bos", "eos", "bos+eos"};
  return flags <= 3 ? str(flags, " (", names[flags], ")") : str(flags);
}
}  // namespace

namespace detail {
void check_same_tokenizer(const TokenizerInfo& a, const std::string& a_name, const TokenizerInfo& b,
                          const std::string& b_name, std::vector<std::string> differences) {
  std::vector<std::string> all;
  auto field = [&](const char* name, const auto& vb, const auto& va) {
    if (vb != va) all.push_back(str(name, " ", vb, " vs ", va));
  };
  field("vocab_size", b.vocab_size, a.vocab_size);
  field("bos_id", b.bos_id, a.bos_id);
  field("eos_id", b.eos_id, a.eos_id);
  field("flags", flags_text(b.flags), flags_text(a.flags));
  field("model_fingerprint", hex64(b.model_fingerprint), hex64(a.model_fingerprint));
  all.insert(all.end(), differences.begin(), differences.end());
  if (all.empty()) return;
  std::string list;
  for (const std::string& d : all) list += (list.empty() ? "" : ", ") + d;
  LOOM_FAIL(b_name, ": tokenizer differs from ", a_name, ": ", list, "; only shards of one tokenizer go together");
}
}  // namespace detail

void check_same_tokenizer(const TokenizerInfo& a, const std::string& a_name, const TokenizerInfo& b,
                          const std::string& b_name) {
  detail::check_same_tokenizer(a, a_name, b, b_name, {});
}

void check_same_tokenizer(const ShardReader& a, const ShardReader& b) {
  std::vector<std::string> differences;
  if (a.dtype_bytes() != b.dtype_bytes())
    differences.push_back(str("dtype_bytes ", b.dtype_bytes(), " vs ", a.dtype_bytes()));
  detail::check_same_tokenizer(a.tokenizer(), a.bin_path(), b.tokenizer(), b.bin_path(), std::move(differences));
}

// ---- TokenBinWriter ----

namespace detail {
TokenBinWriter::TokenBinWriter(const std::string& bin_path, uint32_t dtype_bytes)
    : dtype_bytes_(dtype_bytes), bin_(bin_path) {}

void TokenBinWriter::write(const uint32_t* ids, size_t n) {
  const void* bytes = ids;
  if (dtype_bytes_ == 2) {
    narrow_.assign(ids, ids + n);
    bytes = narrow_.data();
  }
  bin_.write(bytes, n * dtype_bytes_);
  hash_.update(bytes, n * dtype_bytes_);
}

void TokenBinWriter::write_raw(const uint8_t* bytes, size_t n_ids) {
  const size_t n = n_ids * dtype_bytes_;
  if (n >= (size_t{32} << 10)) bin_.write_unbuffered(bytes, n);
  else bin_.write(bytes, n);
  hash_.update(bytes, n);
}

void TokenBinWriter::seal(const Parts& meta_parts) {
  LOOM_ASSERT(!meta_, "sealed twice: ", bin_.path());
  meta_ = std::make_unique<sys::AtomicFile>(meta_path_for(bin_.path()));
  for (const auto& [data, n] : meta_parts) meta_->write(data, n);
  bin_.seal();
  meta_->seal();
}

void TokenBinWriter::open_meta(size_t header_bytes) {
  LOOM_ASSERT(!meta_, "the .meta of ", bin_.path(), " opened twice");
  meta_ = std::make_unique<sys::AtomicFile>(meta_path_for(bin_.path()));
  const std::vector<uint8_t> zeros(header_bytes);
  meta_->write(zeros.data(), zeros.size());
}

void TokenBinWriter::append_meta(const void* data, size_t n) {
  LOOM_ASSERT(meta_, "append_meta before open_meta: ", bin_.path());
  meta_->write(data, n);
}

void TokenBinWriter::seal_streamed(const void* header, size_t header_bytes) {
  LOOM_ASSERT(meta_, "seal_streamed before open_meta: ", bin_.path());
  meta_->write_at(0, header, header_bytes);
  bin_.seal();
  meta_->seal();
}

void TokenBinWriter::publish() {
  LOOM_ASSERT(meta_, "publish before seal: ", bin_.path());
  sys::commit_all({&bin_, meta_.get()});
}

void TokenBinWriter::commit(const Parts& meta_parts) {
  seal(meta_parts);
  publish();
}

void fail_bin_checksum(const std::string& bin_path, uint64_t got, uint64_t want) {
  LOOM_FAIL(bin_path, ": checksum mismatch: xxh64 of the .bin is ", hex64(got), ", the .meta says ", hex64(want),
            " (the .bin was modified or corrupted)");
}
}  // namespace detail

// ---- ShardWriter ----

ShardWriter::ShardWriter(const std::string& bin_path, const TokenizerInfo& info, uint32_t encoder,
                         uint64_t settings_xxh64)
    : bin_path_(bin_path), info_(info), encoder_(encoder), settings_xxh64_(settings_xxh64),
      bin_(bin_path, dtype_bytes_for_vocab(info.vocab_size)) {
  LOOM_CHECK(info.vocab_size > 0, bin_path, ": vocab size must be positive");
  bin_.open_meta(sizeof(ShardHeader));
  offsets_.reserve(kOffsetsChunk);
  push_offset(0);
}

void ShardWriter::push_offset(uint64_t offset) {
  if (offsets_.size() == kOffsetsChunk) flush_offsets();
  offsets_.push_back(offset);
}

void ShardWriter::flush_offsets() {
  offsets_hash_.update(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  bin_.append_meta(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  offsets_.clear();
}

void ShardWriter::format_doc(const uint32_t* ids, size_t n, std::string& out, int64_t doc) const {
  const uint32_t dtype = dtype_bytes_for_vocab(info_.vocab_size);
  const size_t at = out.size();
  out.resize(at + n * dtype);
  char* p = out.data() + at;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= info_.vocab_size) {
      out.resize(at);
      if (doc >= 0)
        LOOM_FAIL(bin_path_, ": document ", doc, ": token id ", ids[i], " >= vocab size ", info_.vocab_size);
      LOOM_FAIL(bin_path_, ": token id ", ids[i], " >= vocab size ", info_.vocab_size);
    }
    if (dtype == 2) {
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(p + 2 * i, &v, 2);
    } else {
      std::memcpy(p + 4 * i, &ids[i], 4);
    }
  }
}

void ShardWriter::add_doc(const uint32_t* ids, size_t n) {
  doc_.clear();
  format_doc(ids, n, doc_, static_cast<int64_t>(num_docs()));
  const uint64_t tokens = n;
  add_docs_raw(reinterpret_cast<const uint8_t*>(doc_.data()), &tokens, 1);
}

void ShardWriter::add_docs_raw(const uint8_t* bytes, const uint64_t* tokens, size_t ndocs) {
  uint64_t total = 0;
  for (size_t i = 0; i < ndocs; ++i) {
    total += tokens[i];
    push_offset(num_tokens_ + total);
  }
  num_docs_ += ndocs;
  num_tokens_ += total;
  bin_.write_raw(bytes, total);
}

void ShardWriter::commit() {
  LOOM_CHECK(num_docs() > 0, bin_path_, ": no documents to write (an empty shard is not written)");
  ShardHeader h{};
  detail::fill_loom_header(h, kShardMagic, kShardVersion, bin_.dtype_bytes(), info_);
  h.num_docs = num_docs();
  h.num_tokens = num_tokens();
  h.encoder = encoder_;
  h.settings_xxh64 = settings_xxh64_;
  h.bin_xxh64 = bin_.digest();
  flush_offsets();
  h.offsets_xxh64 = offsets_hash_.digest();
  bin_.seal_streamed(&h, sizeof(h));
  bin_.publish();
}

// ---- ShardReader ----

ShardReader::ShardReader(const std::string& bin_path) {
  const std::string meta_path = meta_path_for(bin_path);
  meta_ = sys::MappedFile(meta_path);
  detail::read_loom_header(meta_, kShardMagic, "loom shard index", kShardVersion, &header_, sizeof(header_));
  const ShardHeader& h = header_;
  LOOM_CHECK(h.num_docs > 0, meta_path, ": empty shard: it has no documents");
  // Every size from the header's counts is overflow-checked before it is trusted: a forged count
  // whose byte size wraps would otherwise "match" a small file.
  uint64_t want_meta = 0;
  LOOM_CHECK(!__builtin_add_overflow(h.num_docs, 1, &want_meta) &&
                 !__builtin_mul_overflow(want_meta, sizeof(uint64_t), &want_meta) &&
                 !__builtin_add_overflow(want_meta, sizeof(ShardHeader), &want_meta),
             meta_path, ": num_docs ", h.num_docs,
             ": (num_docs + 1) x 8 bytes of offsets does not fit 64 bits (a forged or corrupted header)");
  LOOM_CHECK(meta_.size() == want_meta, meta_path, ": truncated .meta: ", meta_.size(), " bytes, expected ", want_meta,
             " for ", h.num_docs, " documents");
  uint64_t want_bin = 0;
  LOOM_CHECK(!__builtin_mul_overflow(h.num_tokens, uint64_t{h.dtype_bytes}, &want_bin), meta_path, ": num_tokens ",
             h.num_tokens, " x dtype_bytes ", h.dtype_bytes, " does not fit 64 bits (a forged or corrupted header)");
  detail::check_tokenizer_fields(meta_path, h.vocab_size, h.bos_id, h.eos_id, h.flags);
  LOOM_CHECK(h.encoder <= kShardEncoderLoom, meta_path, ": encoder ", h.encoder, " is not 0, 1 or 2");
  offsets_ = reinterpret_cast<const uint64_t*>(meta_.data() + sizeof(ShardHeader));

  bin_ = sys::MappedFile(bin_path);
  LOOM_CHECK(bin_.size() == want_bin, bin_path, ": truncated .bin: ", bin_.size(), " bytes, expected ", want_bin,
             " (", h.num_tokens, " tokens of uint", h.dtype_bytes * 8, ")");

  LOOM_CHECK(offsets_[0] == 0, meta_path, ": document 0 at byte offset ", sizeof(ShardHeader), ": offset ",
             offsets_[0], ", expected 0");
  for (uint64_t i = 1; i <= h.num_docs; ++i) {
    const uint64_t at = sizeof(ShardHeader) + i * sizeof(uint64_t);
    LOOM_CHECK(offsets_[i] >= offsets_[i - 1], meta_path, ": offsets out of order: document ", i - 1,
               " ends at token ", offsets_[i], " (byte offset ", at, "), before it starts at token ", offsets_[i - 1]);
    LOOM_CHECK(offsets_[i] <= h.num_tokens, meta_path, ": offset past the end: document ", i - 1,
               " ends at token ", offsets_[i], " (byte offset ", at, "), but ", bin_path, " has ", h.num_tokens,
               " tokens");
  }
  LOOM_CHECK(offsets_[h.num_docs] == h.num_tokens, meta_path, ": the last offset is ", offsets_[h.num_docs],
             ", expected num_tokens ", h.num_tokens);
  const uint64_t got = xxh64(offsets_, (h.num_docs + 1) * sizeof(uint64_t));
  LOOM_CHECK(got == h.offsets_xxh64, meta_path, ": offsets checksum mismatch: xxh64 ", hex64(got), ", header says ",
             hex64(h.offsets_xxh64));
}

TokenizerInfo ShardReader::tokenizer() const { return detail::tokenizer_of(header_); }

uint32_t ShardReader::token(uint64_t index) const {
  LOOM_DASSERT(index < num_tokens(), "token ", index, " of ", num_tokens());
  return detail::load_id(bin_.data(), header_.dtype_bytes, index);
}

void ShardReader::read_doc(uint64_t i, std::vector<uint32_t>& out) const {
  LOOM_ASSERT(i < num_docs(), "document ", i, " of ", num_docs());
  const uint64_t b = offsets_[i], e = offsets_[i + 1];
  out.reserve(out.size() + (e - b));
  if (header_.dtype_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(bin_.data());
    out.insert(out.end(), p + b, p + e);
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(bin_.data());
    out.insert(out.end(), p + b, p + e);
  }
}

void ShardReader::check_header() const {
  const ShardHeader& h = header_;
  const std::string meta = meta_path_for(bin_path());
  LOOM_CHECK(h.reserved0 == 0 && h.reserved1 == 0, meta, ": reserved fields at byte 36 and 84 are ", h.reserved0,
             " and ", h.reserved1, ", expected 0");
  for (size_t i = 0; i < sizeof(h.reserved); ++i)
    LOOM_CHECK(h.reserved[i] == 0, meta, ": reserved byte ", offsetof(ShardHeader, reserved) + i, " is ",
               int{h.reserved[i]}, ", expected 0 (written by a newer loom, or corrupted)");
}

void ShardReader::check_tokens(uint64_t begin, uint64_t end, uint32_t id_limit) const {
  check_tokens(begin, end, id_limit, std::numeric_limits<uint32_t>::max());
}

void ShardReader::check_tokens(uint64_t begin, uint64_t end, uint32_t id_limit, uint32_t max_id) const {
  const ShardHeader& h = header_;
  const uint32_t limit = id_limit && id_limit < h.vocab_size ? id_limit : h.vocab_size;
  const uint64_t t =
      max_id < limit ? end : detail::first_id_at_or_above(bin_.data(), h.dtype_bytes, begin, end, limit);
  auto doc_of = [&](uint64_t token) {
    return static_cast<uint64_t>(std::upper_bound(offsets_, offsets_ + num_docs() + 1, token) - offsets_) - 1;
  };
  if (t != end)
    LOOM_FAIL(bin_path(), ": token id ", token(t), " >= ", limit == h.vocab_size ? "vocab size " : "--vocab-size ",
              limit, " in document ", doc_of(t), " at byte offset ", t * h.dtype_bytes, " (token ", t, ")");
  if (!(h.flags & (kShardFlagBos | kShardFlagEos)) || begin >= end) return;
  // Documents that start or end inside [begin, end): the one holding `begin`, then on.
  for (uint64_t d = doc_of(begin); d < num_docs() && offsets_[d] < end; ++d) {
    const uint64_t b = offsets_[d], e = offsets_[d + 1];
    if (b == e) continue;
    LOOM_CHECK(!(h.flags & kShardFlagBos) || b < begin || token(b) == static_cast<uint32_t>(h.bos_id), bin_path(),
               ": document ", d, " at byte offset ", b * h.dtype_bytes, " starts with ", token(b),
               ", but the .meta's flags say every document starts with bos_id ", h.bos_id);
    LOOM_CHECK(!(h.flags & kShardFlagEos) || e > end || token(e - 1) == static_cast<uint32_t>(h.eos_id), bin_path(),
               ": document ", d, " at byte offset ", (e - 1) * h.dtype_bytes, " ends with ", token(e - 1),
               ", but the .meta's flags say every document ends with eos_id ", h.eos_id);
  }
}

// ---- ShardStreamCheck ----

ShardStreamCheck::ShardStreamCheck(const ShardReader& r) : r_(&r) { r.check_header(); }

void ShardStreamCheck::check_to(uint64_t end) {
  LOOM_ASSERT(end <= r_->num_tokens(), "check past the end of ", r_->bin_path());
  if (end <= done_) return;
  r_->check_tokens(done_, end, 0, detail::hash_ids(hash_, r_->token_bytes(), r_->dtype_bytes(), done_, end));
  done_ = end;
}

void ShardStreamCheck::finish() {
  check_to(r_->num_tokens());
  const uint64_t got = hash_.digest();
  if (got != r_->header().bin_xxh64) detail::fail_bin_checksum(r_->bin_path(), got, r_->header().bin_xxh64);
}

}  // namespace loom
