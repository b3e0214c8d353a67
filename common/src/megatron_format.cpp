#include "loom/megatron_format.h"

#include <cstring>
#include <limits>

#include "loom/error.h"

namespace loom {

const char* megatron_dtype_name(uint8_t code) {
  static const char* const kNames[] = {"uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? kNames[code - 1] : "unknown";
}

std::string megatron_idx_path(const std::string& bin_path) {
  const bool bin = bin_path.size() >= 4 && bin_path.compare(bin_path.size() - 4, 4, ".bin") == 0;
  return (bin ? bin_path.substr(0, bin_path.size() - 4) : bin_path) + ".idx";
}

bool is_megatron_dataset(const std::string& bin_path) {
  const std::string idx = megatron_idx_path(bin_path);
  if (!sys::exists(idx) || sys::is_directory(idx)) return false;
  sys::File f = sys::File::open_regular(idx);
  char magic[sizeof(kMegatronMagic)] = {0};
  if (f.size() < sizeof(magic)) return false;
  f.pread_exact(magic, sizeof(magic), 0);
  return std::memcmp(magic, kMegatronMagic, sizeof(magic)) == 0;
}

// ---- MegatronWriter ----

MegatronWriter::MegatronWriter(const std::string& bin_path, uint8_t dtype_code, uint64_t id_limit)
    : bin_path_(bin_path), dtype_(dtype_code), id_limit_(id_limit), bin_(bin_path) {
  LOOM_ASSERT(dtype_ == kMegatronUint16 || dtype_ == kMegatronInt32, "dtype code ", int{dtype_});
  const uint64_t dtype_max = dtype_ == kMegatronUint16 ? 65536 : uint64_t{1} << 31;
  LOOM_CHECK(id_limit_ <= dtype_max, bin_path_, ": vocab size ", id_limit_, " has ids that ", megatron_dtype_name(dtype_),
             " cannot hold (Megatron's token ids are uint16 or int32)");
}

void MegatronWriter::format_doc(const uint32_t* ids, size_t n, std::string& out) const {
  for (size_t i = 0; i < n; ++i)
    // No document number: encoder threads format documents while the writer's thread appends them.
    LOOM_CHECK(ids[i] < id_limit_, bin_path_, ": token id ", ids[i], " >= vocab size ", id_limit_, " (token ", i,
               " of a document)");
  if (dtype_ == kMegatronUint16) {
    const size_t at = out.size();
    out.resize(at + 2 * n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(&out[at + 2 * i], &v, 2);
    }
  } else {
    out.append(reinterpret_cast<const char*>(ids), 4 * n);  // < 2^31: the same bytes as int32
  }
}

void MegatronWriter::add_formatted(const char* bytes, const uint64_t* tokens, size_t ndocs) {
  // Every document is checked before any is recorded: a refused batch leaves the writer as it was.
  uint64_t total = 0;
  for (size_t i = 0; i < ndocs; ++i) {
    LOOM_CHECK(tokens[i] <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), bin_path_, ": document ",
               num_docs() + i, " has ", tokens[i], " tokens, more than Megatron's int32 sequence length holds");
    total += tokens[i];
  }
  for (size_t i = 0; i < ndocs; ++i) {
    if (tokens[i] > 0) sequence_lengths_.push_back(static_cast<int32_t>(tokens[i]));
    document_indices_.push_back(static_cast<int64_t>(sequence_lengths_.size()));
  }
  num_tokens_ += total;
  bin_.write(bytes, total * megatron_dtype_bytes(dtype_));
}

void MegatronWriter::add_doc(const uint32_t* ids, size_t n) {
  scratch_.clear();
  format_doc(ids, n, scratch_);
  const uint64_t tokens = n;
  add_formatted(scratch_.data(), &tokens, 1);
}

void MegatronWriter::commit() {
  LOOM_CHECK(num_docs() > 0, bin_path_, ": no documents to write (an empty dataset is not written)");
  sys::AtomicFile idx(megatron_idx_path(bin_path_));
  const uint64_t version = kMegatronVersion, s = sequence_lengths_.size(), d = document_indices_.size();
  idx.write(kMegatronMagic, sizeof(kMegatronMagic));
  idx.write(&version, 8);
  idx.write(&dtype_, 1);
  idx.write(&s, 8);
  idx.write(&d, 8);
  idx.write(sequence_lengths_.data(), s * sizeof(int32_t));
  std::vector<int64_t> pointers(s);
  int64_t at = 0;
  for (uint64_t i = 0; i < s; ++i) {
    pointers[i] = at;
    at += int64_t{sequence_lengths_[i]} * megatron_dtype_bytes(dtype_);
  }
  idx.write(pointers.data(), s * sizeof(int64_t));
  idx.write(document_indices_.data(), d * sizeof(int64_t));
  sys::commit_all({&bin_, &idx});
}

// ---- MegatronReader ----

namespace {
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

MegatronReader::MegatronReader(const std::string& bin_path) {
  idx_ = sys::MappedFile(megatron_idx_path(bin_path));
  const std::string& path = idx_.path();
  const uint8_t* p = idx_.data();
  LOOM_CHECK(idx_.size() >= sizeof(kMegatronMagic) && std::memcmp(p, kMegatronMagic, sizeof(kMegatronMagic)) == 0, path,
             ": bad magic: not a Megatron-LM index (expected \"MMIDIDX\\0\\0\" at byte 0)");
  LOOM_CHECK(idx_.size() >= kMegatronHeaderBytes, path, ": truncated .idx: ", idx_.size(),
             " bytes, expected at least the ", kMegatronHeaderBytes, "-byte header");
  const uint64_t version = load<uint64_t>(p + 9);
  LOOM_CHECK(version == kMegatronVersion, path, ": version ", version, " at byte 9; this build reads version ",
             kMegatronVersion);
  dtype_ = p[17];
  LOOM_CHECK(dtype_ == kMegatronUint16 || dtype_ == kMegatronInt32, path, ": dtype code ", int{dtype_}, " (",
             megatron_dtype_name(dtype_), ") at byte 17; token ids are uint16 (code 8) or int32 (code 4)");
  num_sequences_ = load<uint64_t>(p + 18);
  const uint64_t doc_count = load<uint64_t>(p + 26);
  const uint64_t s = num_sequences_, d = doc_count;
  // Each count's bytes overflow-checked before any size is trusted (a forged count whose size wraps
  // would otherwise "match" a small file); then bounded, so that no sum below can wrap.
  uint64_t seq_bytes = 0, doc_bytes = 0, want = 0;
  LOOM_CHECK(!__builtin_mul_overflow(s, uint64_t{12}, &seq_bytes), path, ": sequence count ", s,
             " at byte 18 does not fit 64 bits as 12-byte entries (a forged or corrupted header)");
  LOOM_CHECK(!__builtin_mul_overflow(d, uint64_t{8}, &doc_bytes), path, ": document count ", d,
             " at byte 26 does not fit 64 bits as 8-byte entries (a forged or corrupted header)");
  const uint64_t limit = uint64_t{1} << 56;
  const bool counts_fit = s < limit && d < limit && !__builtin_add_overflow(seq_bytes, doc_bytes, &want) &&
                          !__builtin_add_overflow(want, kMegatronHeaderBytes, &want);
  const bool has_modes = counts_fit && idx_.size() == want + s;
  LOOM_CHECK(counts_fit && idx_.size() == want, path, ": truncated .idx or wrong counts: ", idx_.size(), " bytes, expected ",
             counts_fit ? str(want) : std::string("an impossible size"), " for ", s, " sequences and ", d,
             " document indices", has_modes ? " (it has sequence modes: a multimodal dataset, which loom does not read)" : "");
  LOOM_CHECK(d >= 1, path, ": document count 0 at byte 26: document_indices holds at least its leading 0");
  num_docs_ = d - 1;
  const uint8_t* lengths = p + kMegatronHeaderBytes;
  pointers_at_ = kMegatronHeaderBytes + 4 * s;
  doc_indices_at_ = kMegatronHeaderBytes + 12 * s;
  const uint64_t isz = dtype_bytes();
  uint64_t tokens = 0;
  for (uint64_t i = 0; i < s; ++i) {
    const int32_t len = load<int32_t>(lengths + 4 * i);
    LOOM_CHECK(len >= 0, path, ": sequence ", i, " (byte offset ", kMegatronHeaderBytes + 4 * i, "): length ", len,
               " is negative");
    const int64_t ptr = load<int64_t>(p + pointers_at_ + 8 * i);
    LOOM_CHECK(ptr >= 0 && static_cast<uint64_t>(ptr) == tokens * isz, path, ": sequence ", i, " (byte offset ",
               pointers_at_ + 8 * i, "): pointer ", ptr, ", expected ", tokens * isz, " (the lengths before it times ",
               isz, " bytes)");
    tokens += static_cast<uint64_t>(len);
    // Bounded so that no sum or byte offset below can wrap (2^56 tokens: far beyond any real .bin).
    LOOM_CHECK(tokens < limit, path, ": the lengths up to sequence ", i, " add up to ", tokens,
               " tokens, more than any .bin holds");
  }
  num_tokens_ = tokens;
  int64_t prev = 0;
  for (uint64_t k = 0; k < d; ++k) {
    const int64_t v = load<int64_t>(p + doc_indices_at_ + 8 * k);
    const uint64_t at = doc_indices_at_ + 8 * k;
    if (k == 0)
      LOOM_CHECK(v == 0, path, ": document_indices[0] (byte offset ", at, ") is ", v, ", expected 0");
    LOOM_CHECK(v >= prev && static_cast<uint64_t>(v) <= s, path, ": document_indices[", k, "] (byte offset ", at,
               ") is ", v, ", expected between the previous one (", prev, ") and the sequence count ", s);
    prev = v;
  }
  LOOM_CHECK(static_cast<uint64_t>(prev) == s, path, ": the last document index is ", prev,
             ", expected the sequence count ", s, " (sequences after the last document)");
  bin_ = sys::MappedFile(bin_path);
  const uint64_t want_bin = num_tokens() * isz;
  LOOM_CHECK(bin_.size() == want_bin, bin_path, ": .bin has ", bin_.size(), " bytes, expected ", want_bin, " (",
             num_tokens(), " tokens of ", megatron_dtype_name(dtype_), " by ", path, ")");
}

uint64_t MegatronReader::sequence_token_begin(uint64_t s) const {
  LOOM_ASSERT(s <= num_sequences_, "sequence ", s, " of ", num_sequences_);
  return s == num_sequences_ ? num_tokens_
                             : static_cast<uint64_t>(load<int64_t>(idx_.data() + pointers_at_ + 8 * s)) / dtype_bytes();
}

int64_t MegatronReader::document_index(uint64_t d) const {
  LOOM_ASSERT(d <= num_docs_, "document index ", d, " of ", num_docs_);
  return load<int64_t>(idx_.data() + doc_indices_at_ + 8 * d);
}

void MegatronReader::read_doc(uint64_t i, std::vector<uint32_t>& out) const {
  LOOM_ASSERT(i < num_docs_, "document ", i, " of ", num_docs_);
  const uint64_t b = doc_token_begin(i), e = doc_token_begin(i + 1);
  const size_t at = out.size();
  out.resize(at + (e - b));
  if (dtype_ == kMegatronUint16) {
    for (uint64_t t = b; t < e; ++t) out[at + (t - b)] = load<uint16_t>(bin_.data() + 2 * t);
  } else {
    for (uint64_t t = b; t < e; ++t) {
      const int32_t v = load<int32_t>(bin_.data() + 4 * t);
      LOOM_CHECK(v >= 0, bin_path(), ": negative token id ", v, " in document ", i, " (token ", t - b, ")");
      out[at + (t - b)] = static_cast<uint32_t>(v);
    }
  }
}

uint32_t MegatronReader::check_ids(uint64_t begin, uint64_t end, uint32_t vocab_size) const {
  uint32_t mx = 0;
  for (uint64_t t = begin; t < end; ++t) {
    const int64_t v = dtype_ == kMegatronUint16 ? load<uint16_t>(bin_.data() + 2 * t) : load<int32_t>(bin_.data() + 4 * t);
    if (v < 0 || (vocab_size > 0 && static_cast<uint64_t>(v) >= vocab_size)) {
      // The document of token t: its sequence (the last that starts at or before t and has
      // tokens), then the first document that ends after that sequence.
      uint64_t lo = 0, hi = num_sequences_;
      while (lo + 1 < hi) {
        const uint64_t mid = (lo + hi) / 2;
        if (sequence_token_begin(mid) <= t) lo = mid;
        else hi = mid;
      }
      while (lo + 1 < num_sequences_ && sequence_token_begin(lo + 1) <= t) ++lo;  // past empty sequences
      const uint64_t seq = lo;
      lo = 0, hi = num_docs_;
      while (lo < hi) {
        const uint64_t mid = (lo + hi) / 2;
        if (static_cast<uint64_t>(document_index(mid + 1)) <= seq) lo = mid + 1;
        else hi = mid;
      }
      LOOM_FAIL(bin_path(), ": token id ", v, v < 0 ? " is negative" : str(" >= vocab size ", vocab_size),
                " in document ", lo, " (token ", t - doc_token_begin(lo), ", byte offset ", t * dtype_bytes(), ")");
    }
    mx = static_cast<uint32_t>(v) > mx ? static_cast<uint32_t>(v) : mx;
  }
  return mx;
}

}  // namespace loom
