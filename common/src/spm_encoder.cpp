#include "loom/spm_encoder.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <atomic>

#include "loom/error.h"

namespace loom::spm {

namespace {

const std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space
constexpr float kUnkPenalty = 10.0f;             // an unknown character costs min score - this

// Bytes of the UTF-8 character a lead byte starts (SentencePiece's OneCharLen: continuation and
// invalid lead bytes count as 1).
size_t one_char_len(unsigned char lead) { return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[lead >> 4]; }

// Length of the valid UTF-8 character at the start of s, 0 if malformed (SentencePiece's
// IsValidDecodeUTF8: shortest form, no surrogates, at most U+10FFFF).
size_t valid_utf8_len(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return cont(1) ? 2 : 0;
  if (c < 0xF0) {
    if (!cont(1) || !cont(2)) return 0;
    const uint32_t cp = ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    return cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF) ? 3 : 0;
  }
  if (c < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const uint32_t cp = ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    return cp >= 0x10000 && cp <= 0x10FFFF ? 4 : 0;
  }
  return 0;
}

// A character's bytes (1-4) packed little-endian into 32 bits.
inline uint32_t char_bits(const char* p, size_t n) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(p[i])); };
  switch (n) {
    case 1: return b(0);
    case 2: return b(0) | b(1) << 8;
    case 3: return b(0) | b(1) << 8 | b(2) << 16;
    default: return b(0) | b(1) << 8 | b(2) << 16 | b(3) << 24;
  }
}

// The byte of a piece "<0xNN>" (two upper-case hex digits, as sentencepiece writes and reads
// them), -1 for any other text.
int byte_piece_value(std::string_view p) {
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>' || hex(p[3]) < 0 || hex(p[4]) < 0) return -1;
  return hex(p[3]) * 16 + hex(p[4]);
}

// A 64-bit hash of a short byte string (pieces and chunks are mostly under 16 bytes).
uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  uint64_t v;
  for (; n >= 8; p += 8, n -= 8) {
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

std::atomic<uint64_t> next_instance{1};

}  // namespace

// A byte trie over pieces: every piece that is a prefix of a text, shortest first.
struct alignas(64) SpmEncoder::Trie {
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;
    int id = -1;
  };
  std::vector<Node> nodes = std::vector<Node>(1);

  void insert(std::string_view s, int id) {
    int at = 0;
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      auto& next = nodes[at].next;
      auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == c; });
      if (it == next.end()) {
        next.emplace_back(c, static_cast<int>(nodes.size()));
        at = static_cast<int>(nodes.size());
        nodes.emplace_back();
      } else {
        at = it->second;
      }
    }
    nodes[at].id = id;
  }
  template <class F>
  void prefixes(std::string_view s, F&& f) const {
    int at = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      const auto& next = nodes[at].next;
      auto it = std::find_if(next.begin(), next.end(), [&](const auto& e) { return e.first == c; });
      if (it == next.end()) return;
      at = it->second;
      if (nodes[at].id >= 0) f(i + 1, nodes[at].id);
    }
  }
};

// Piece text -> id, open addressing with linear probing; the text itself stays in the model.
struct alignas(64) SpmEncoder::PieceTable {
  struct Slot {
    uint32_t tag = 0, len = 0;
    int32_t id = -1;  // -1: empty
  };
  const std::vector<std::string>& pieces;
  std::vector<Slot> slots;
  size_t mask = 0;

  PieceTable(const std::vector<std::string>& p, size_t n) : pieces(p) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots.resize(cap);
    mask = cap - 1;
  }
  // First wins, as a map's emplace; false when s was there already. h: hash_bytes(s).
  bool insert(std::string_view s, uint64_t h, int id) {
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& e = slots[i];
      if (e.id < 0) {
        e = {static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(s.size()), id};
        return true;
      }
      if (e.tag == static_cast<uint32_t>(h >> 32) && e.len == s.size() && pieces[e.id] == s) return false;
    }
  }
  // Loading a table of 10^5 pieces is bound by cache misses: the loops that insert ask for the slot
  // of a piece a few ahead (same inserts in the same order, so the same table).
  void prefetch(uint64_t h) const { __builtin_prefetch(&slots[h & mask], 1); }
  int find(std::string_view s) const {
    const uint64_t h = hash_bytes(s.data(), s.size());
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& e = slots[i];
      if (e.id < 0) return -1;
      if (e.tag == tag && e.len == s.size() && std::memcmp(pieces[e.id].data(), s.data(), s.size()) == 0) return e.id;
    }
  }
};

// The pairs of adjacent characters inside some piece (of pieces_), for the pairs with a non-ASCII
// character: two characters side by side in a text that are not such a pair cannot both lie in one
// piece, so no merge and no user-defined piece spans the boundary between them. A character is its
// UTF-8 bytes (1-4, as one_char_len splits) packed little-endian into 32 bits; a pair is the two in
// 64. A filter of one bit per hash (2^21 bits, 256 KiB, about 1% of them set by InternLM's 22,946
// pairs): it may say "maybe" for a pair that no piece holds, which only leaves a cut out (a chunk a
// little longer, the same ids), never "no" for one that a piece holds; and it stays in cache where
// an exact set of the pairs did not (encoding Chinese asks once a character).
struct alignas(64) SpmEncoder::PairSet {
  static constexpr int kBits = 21;
  std::vector<uint64_t> words = std::vector<uint64_t>(size_t{1} << (kBits - 6));

  static uint64_t key(uint32_t left, uint32_t right) { return static_cast<uint64_t>(left) << 32 | right; }
  static size_t bit(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> (64 - kBits)); }
  void insert(uint64_t k) { words[bit(k) >> 6] |= uint64_t{1} << (bit(k) & 63); }
  bool maybe_contains(uint64_t k) const { return (words[bit(k) >> 6] >> (bit(k) & 63)) & 1; }
};

// Chunk -> ids of the chunks any thread encoded, for the other threads' caches (with N threads a
// chunk is encoded about once, not N times: a thread's cache starts cold, and for English at 16
// threads the first occurrences were about 5% of each thread's work). Insert-only and lock-free: an
// entry is written in the arena first, then published by claiming an empty slot with a
// compare-exchange (release; lookups acquire). Once the slots are half used or the arena is spent
// it takes no more chunks; lookups go on. Read-only once warm, so threads share its cache lines.
struct alignas(64) SpmEncoder::SharedChunks {
  static constexpr size_t kSlots = size_t{1} << 17, kMaxEntries = kSlots / 2, kArenaBytes = size_t{8} << 20;
  struct Entry {
    uint64_t hash;
    uint32_t key_len, n_ids;  // then the key's bytes, then the ids (from a multiple of 4)
  };
  std::unique_ptr<std::atomic<uint64_t>[]> slots{new std::atomic<uint64_t>[kSlots]()};  // arena offset + 1; 0: empty
  std::unique_ptr<char[]> arena{new char[kArenaBytes]};
  alignas(64) std::atomic<size_t> top{0};      // arena bytes handed out
  std::atomic<size_t> entries{0};              // slots claimed (or about to be)

  static size_t key_bytes(size_t n) { return (n + 3) & ~size_t{3}; }
  const Entry* at(uint64_t slot) const { return reinterpret_cast<const Entry*>(arena.get() + (slot - 1)); }
  static const char* key(const Entry* e) { return reinterpret_cast<const char*>(e + 1); }
  static const uint32_t* ids(const Entry* e) {
    return reinterpret_cast<const uint32_t*>(key(e) + key_bytes(e->key_len));
  }
  static bool same(const Entry* e, uint64_t h, std::string_view chunk) {
    return e->hash == h && e->key_len == chunk.size() && std::memcmp(key(e), chunk.data(), chunk.size()) == 0;
  }
  const Entry* find(uint64_t h, std::string_view chunk) const {
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const uint64_t s = slots[i].load(std::memory_order_acquire);
      if (s == 0) return nullptr;
      if (same(at(s), h, chunk)) return at(s);
    }
  }
  void insert(uint64_t h, std::string_view chunk, const uint32_t* id, size_t n) {
    if (entries.load(std::memory_order_relaxed) >= kMaxEntries) return;
    const size_t bytes = (sizeof(Entry) + key_bytes(chunk.size()) + 4 * n + 7) & ~size_t{7};
    const size_t off = top.fetch_add(bytes, std::memory_order_relaxed);
    if (off + bytes > kArenaBytes || entries.fetch_add(1, std::memory_order_relaxed) >= kMaxEntries) {
      entries.store(kMaxEntries, std::memory_order_relaxed);
      return;
    }
    auto* e = reinterpret_cast<Entry*>(arena.get() + off);
    *e = Entry{h, static_cast<uint32_t>(chunk.size()), static_cast<uint32_t>(n)};
    std::memcpy(reinterpret_cast<char*>(e + 1), chunk.data(), chunk.size());
    std::memcpy(reinterpret_cast<char*>(e + 1) + key_bytes(chunk.size()), id, 4 * n);
    for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      uint64_t seen = 0;
      if (slots[i].compare_exchange_strong(seen, off + 1, std::memory_order_release, std::memory_order_acquire)) return;
      if (same(at(seen), h, chunk)) return;  // another thread put it there first
    }
  }
};

// Per-thread buffers, reused across calls so that encoding allocates nothing in the steady state.
struct SpmEncoder::Scratch {
  std::string normalized;
  // BPE
  struct Symbol {
    int prev, next;
    uint32_t begin, len;  // len 0: merged into its left neighbour
    int id;               // -1: a single character, looked up when emitted
    bool frozen;          // a user-defined piece: never merged
  };
  struct Pair {
    int left, right;
    float score;
    uint32_t size;
    int id;
  };
  std::vector<Symbol> sym;
  std::vector<Pair> agenda;
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unmerge;
  std::vector<uint32_t> chunk_ids;
  // UNIGRAM
  struct Best {
    int id;
    float score;
    int64_t starts_at;
  };
  std::vector<Best> best;
  std::vector<std::pair<size_t, int>> path;  // (start, id), last piece first
  // The chunk cache: chunk text -> ids, flat; dropped whole when full (rare: a chunk is a word).
  struct Entry {
    uint64_t hash;
    uint32_t key_off, key_len, val_off, val_len;  // val_len UINT32_MAX: empty
  };
  static constexpr size_t kSlots = 1 << 16, kMaxChunkBytes = 128;
  uint64_t cache_owner = 0;
  std::vector<Entry> slots;
  std::string keys;
  std::vector<uint32_t> vals;
  size_t used = 0;

  void reset_cache(uint64_t owner) {
    cache_owner = owner;
    slots.assign(kSlots, Entry{0, 0, 0, 0, UINT32_MAX});
    keys.clear();
    vals.clear();
    used = 0;
  }
};

namespace {
bool normal_kind(int t) { return t == kSpmNormal || t == kSpmUserDefined || t == kSpmUnused; }
}  // namespace

SpmEncoder::SpmEncoder(SpmModel model) : m_(std::move(model)) {
  LOOM_CHECK(m_.model_type == kSpmUnigram || m_.model_type == kSpmBpe, "SentencePiece model type ", m_.model_type,
             " (3 word, 4 char) is not supported by loom's encoder; only unigram (1) and bpe (2)");
  LOOM_CHECK(m_.scores.size() == m_.pieces.size() && m_.types.size() == m_.pieces.size(),
             "SentencePiece model: pieces, types and scores differ in number");
  instance_ = next_instance.fetch_add(1);
  pieces_ = std::make_unique<PieceTable>(m_.pieces, m_.pieces.size());
  reserved_ = std::make_unique<PieceTable>(
      m_.pieces, static_cast<size_t>(std::count_if(m_.types.begin(), m_.types.end(), [&](int t) { return !normal_kind(t); })));
  vocab_trie_ = std::make_unique<Trie>();
  pairs_ = std::make_unique<PairSet>();
  user_trie_ = std::make_unique<Trie>();
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;  // as sentencepiece: the smallest positive float, so scores < 0 leave it there
  std::fill(std::begin(cut_before_space_), std::end(cut_before_space_), true);
  std::fill(std::begin(cut_after_space_), std::end(cut_after_space_), true);
  const bool whole_chars = index_pieces();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(b));
    byte_ids_[b] = piece_to_id(name);
  }
  if (m_.model_type != kSpmBpe) why_no_cache_ = "a unigram lattice's float scores accumulate over the whole text";
  else if (has_unused_) why_no_cache_ = "the model has unused pieces (their split depends on the whole text)";
  else if (!whole_chars) why_no_cache_ = "a piece ends inside a UTF-8 character";
  chunk_cache_ = why_no_cache_.empty();
  if (chunk_cache_) shared_ = std::make_unique<SharedChunks>();
  load_charsmap();
}

bool SpmEncoder::add_pairs(std::string_view piece) {
  if (std::all_of(piece.begin(), piece.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; })) return true;
  const uint32_t space = char_bits(kSpace.data(), kSpace.size());
  uint32_t prev = 0;
  bool prev_ascii = true;
  for (size_t at = 0; at < piece.size();) {
    const auto lead = static_cast<unsigned char>(piece[at]);
    const size_t n = one_char_len(lead);
    if (n > piece.size() - at) return false;
    const uint32_t c = char_bits(piece.data() + at, n);
    if (at > 0 && !(prev_ascii && lead < 0x80)) {
      pairs_->insert(PairSet::key(prev, c));
      // Exactly, for the tables of spaced text: an ASCII character next to U+2581.
      if (prev_ascii && c == space) cut_before_space_[prev] = false;
      if (prev == space && lead < 0x80) cut_after_space_[c] = false;
    }
    prev = c;
    prev_ascii = lead < 0x80;
    at += n;
  }
  return true;
}

bool SpmEncoder::index_pieces() {
  // Where the chunk cache may cut (see PairSet); only where every piece splits into whole UTF-8
  // characters, as the text does.
  bool whole_chars = true;
  int unknown_pieces = 0;
  bool byte_found[256] = {};
  std::vector<uint64_t> hashes(m_.pieces.size());
  for (size_t i = 0; i < hashes.size(); ++i) hashes[i] = hash_bytes(m_.pieces[i].data(), m_.pieces[i].size());
  constexpr int kAhead = 16;
  for (int i = 0; i < m_.size(); ++i) {
    if (i + kAhead < m_.size()) pieces_->prefetch(hashes[i + kAhead]);
    const std::string_view p = m_.pieces[i];
    const int t = m_.types[i];
    // sentencepiece's ModelInterface::InitializePieces refuses these (and one in two maps is allowed).
    LOOM_CHECK(!p.empty(), "SentencePiece model: piece ", i, " is empty");
    if (normal_kind(t)) {
      LOOM_CHECK(pieces_->insert(p, hashes[i], i), "SentencePiece model: piece ", i, " '", p, "' is already defined");
      if (m_.model_type == kSpmUnigram) vocab_trie_->insert(p, i);
      if (!add_pairs(p)) whole_chars = false;
    } else {
      LOOM_CHECK(reserved_->insert(p, hashes[i], i), "SentencePiece model: piece ", i, " '", p, "' is already defined");
    }
    if (t == kSpmUnknown) ++unknown_pieces;
    if (t == kSpmByte) {
      LOOM_CHECK(m_.byte_fallback, "SentencePiece model: byte piece '", p, "' although byte_fallback is false");
      const int byte = byte_piece_value(p);
      LOOM_CHECK(byte >= 0, "SentencePiece model: byte piece '", p, "' is invalid");
      byte_found[byte] = true;
    }
    if (t == kSpmUserDefined) {
      user_trie_->insert(p, i);
      user_first_[static_cast<unsigned char>(p[0])] = true;
    }
    if (t == kSpmUnused) has_unused_ = true;
    if (t == kSpmNormal) {
      min_score_ = std::min(min_score_, m_.scores[i]);
      max_score_ = std::max(max_score_, m_.scores[i]);
    }
  }
  LOOM_CHECK(unknown_pieces == 1, "SentencePiece model: ", unknown_pieces, " unknown pieces (one is needed)");
  LOOM_CHECK(m_.unk_id >= 0 && m_.unk_id < m_.size() && m_.types[m_.unk_id] == kSpmUnknown,
             "SentencePiece model: unk_id ", m_.unk_id, " is not an unknown piece");
  LOOM_CHECK(!m_.byte_fallback || std::find(std::begin(byte_found), std::end(byte_found), false) == std::end(byte_found),
             "SentencePiece model: not 256 byte pieces although byte_fallback is true");
  return whole_chars;
}

void SpmEncoder::load_charsmap() {
  const std::string& blob = m_.normalizer.precompiled_charsmap;
  if (blob.empty()) return;
  LOOM_CHECK(blob.size() > 4, "precompiled charsmap of ", blob.size(), " bytes is too short");
  uint32_t trie_bytes = 0;
  for (int i = 0; i < 4; ++i) trie_bytes |= static_cast<uint32_t>(static_cast<uint8_t>(blob[i])) << (8 * i);
  LOOM_CHECK(trie_bytes < blob.size() - 4 && trie_bytes % 4 == 0 && trie_bytes > 0, "precompiled charsmap: trie of ",
             trie_bytes, " bytes does not fit the ", blob.size(), "-byte blob");
  charsmap_units_.resize(trie_bytes / 4);
  for (size_t u = 0; u < charsmap_units_.size(); ++u) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(blob[4 + 4 * u + i])) << (8 * i);
    charsmap_units_[u] = v;
  }
  charsmap_pool_ = blob.substr(4 + trie_bytes);
}

SpmEncoder::~SpmEncoder() = default;

size_t SpmEncoder::user_defined_prefix(std::string_view s) const {
  if (s.empty() || !user_first_[static_cast<unsigned char>(s[0])]) return 0;
  size_t longest = 0;
  user_trie_->prefixes(s, [&](size_t n, int) { longest = n; });
  return longest;
}

std::pair<std::string_view, size_t> SpmEncoder::normalize_prefix(std::string_view s) const {
  if (const size_t n = user_defined_prefix(s)) return {s.substr(0, n), n};
  // The longest charsmap rule: Darts-clone's common prefix search. A unit holds: label (bits 0-7,
  // and bit 31 so a leaf never matches a byte), has_leaf (bit 8), offset (bits 10-31, shifted left
  // by 8 when bit 9 is set); the value of a leaf unit is its low 31 bits.
  size_t longest = 0, value = 0;
  if (!charsmap_units_.empty()) {
    const auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
    const size_t n_units = charsmap_units_.size();
    size_t pos = offset(charsmap_units_[0]);
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      pos ^= c;
      if (pos >= n_units) break;
      const uint32_t unit = charsmap_units_[pos];
      if ((unit & ((1u << 31) | 0xFFu)) != c) break;
      pos ^= offset(unit);
      if (pos >= n_units) break;
      if ((unit >> 8) & 1) {
        longest = i + 1;
        value = charsmap_units_[pos] & ((1u << 31) - 1);
      }
    }
  }
  if (longest > 0) {
    LOOM_CHECK(value < charsmap_pool_.size(), "precompiled charsmap: rule points at byte ", value, " of a ",
               charsmap_pool_.size(), "-byte string pool");
    const char* r = charsmap_pool_.data() + value;
    return {std::string_view(r, ::strnlen(r, charsmap_pool_.size() - value)), longest};
  }
  const size_t n = valid_utf8_len(s);
  if (n == 0) return {"\xEF\xBF\xBD", 1};  // malformed: U+FFFD for one byte
  return {s.substr(0, n), n};
}

std::string SpmEncoder::normalize(std::string_view input) const {
  std::string out;
  normalize_into(input, out);
  return out;
}

void SpmEncoder::normalize_into(std::string_view input, std::string& out, bool dummy_prefix) const {
  const SpmNormalizerSpec& spec = m_.normalizer;
  dummy_prefix = dummy_prefix && spec.add_dummy_prefix;
  const bool remove_extra = spec.remove_extra_whitespaces;
  const std::string_view space = spec.escape_whitespaces ? kSpace : std::string_view(" ");
  // Without charsmap rules, an ASCII byte no user-defined piece starts with stands for itself.
  const bool plain_ascii = charsmap_units_.empty();
  out.clear();
  if (remove_extra) {
    while (!input.empty()) {
      const auto [r, n] = normalize_prefix(input);
      if (r != " ") break;
      input.remove_prefix(n);
    }
  }
  if (input.empty()) return;
  if (!m_.treat_whitespace_as_suffix && dummy_prefix) out += space;
  bool prev_space = remove_extra;
  while (!input.empty()) {
    const auto c = static_cast<unsigned char>(input[0]);
    if (plain_ascii && c < 0x80 && !user_first_[c]) {
      if (c != ' ') {
        out += static_cast<char>(c);
        prev_space = false;
      } else {
        if (!prev_space) out += space;
        prev_space = remove_extra;
      }
      input.remove_prefix(1);
      continue;
    }
    auto [r, n] = normalize_prefix(input);
    while (prev_space && !r.empty() && r.front() == ' ') r.remove_prefix(1);
    if (!r.empty()) {
      for (const char ch : r) {
        if (ch == ' ') out += space;
        else out += ch;
      }
      prev_space = r.back() == ' ';
    }
    input.remove_prefix(n);
    if (!remove_extra) prev_space = false;
  }
  if (remove_extra) {
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  }
  if (m_.treat_whitespace_as_suffix && dummy_prefix) out += space;
}

int SpmEncoder::piece_to_id(std::string_view piece) const {
  // Control, unknown and byte pieces first, as sentencepiece's reserved_id_map_.
  int id = reserved_->find(piece);
  if (id < 0) id = pieces_->find(piece);
  return id >= 0 ? id : m_.unk_id;
}

void SpmEncoder::emit(int id, std::string_view text, std::vector<uint32_t>& out, bool& prev_unk) const {
  const bool unk = m_.types[id] == kSpmUnknown;
  if (unk && m_.byte_fallback) {
    for (const char c : text) out.push_back(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(c)]));
  } else if (!(unk && prev_unk)) {  // a run of unknown pieces is one <unk>
    out.push_back(static_cast<uint32_t>(id));
  }
  prev_unk = unk;
}

void SpmEncoder::encode_unigram(std::string_view s, Scratch& scratch, std::vector<uint32_t>& out,
                                bool& prev_unk) const {
  // Best path ending at each byte. As sentencepiece: a piece's candidate is computed in double and
  // stored as float; ties keep the earlier (longer) piece; an unknown node only where no piece is
  // exactly the one character there.
  using Best = Scratch::Best;
  const size_t size = s.size();
  std::vector<Best>& best = scratch.best;
  best.assign(size + 1, Best{-1, 0.0f, -1});
  const float unk_score = min_score_ - kUnkPenalty;
  size_t at = 0;
  while (at < size) {
    const float here = best[at].score;
    const size_t mblen = std::min(one_char_len(static_cast<unsigned char>(s[at])), size - at);
    bool single = false;
    vocab_trie_->prefixes(s.substr(at), [&](size_t len, int id) {
      const int t = m_.types[id];
      if (t == kSpmUnused) return;
      const double score =
          t == kSpmUserDefined ? static_cast<double>(len) * max_score_ - 0.1 : static_cast<double>(m_.scores[id]);
      const double candidate = score + here;
      Best& b = best[at + len];
      if (b.starts_at == -1 || candidate > b.score) {
        b.score = static_cast<float>(candidate);
        b.starts_at = static_cast<int64_t>(at);
        b.id = id;
      }
      if (len == mblen) single = true;
    });
    if (!single) {
      const float candidate = unk_score + here;
      Best& b = best[at + mblen];
      if (b.starts_at == -1 || candidate > b.score) {
        b.score = candidate;
        b.starts_at = static_cast<int64_t>(at);
        b.id = m_.unk_id;
      }
    }
    at += mblen;
  }
  auto& path = scratch.path;
  path.clear();
  for (size_t end = size; end > 0;) {
    const Best& b = best[end];
    LOOM_ASSERT(b.starts_at >= 0, "unigram lattice has no path to byte ", end);
    path.emplace_back(static_cast<size_t>(b.starts_at), b.id);
    end = static_cast<size_t>(b.starts_at);
  }
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const size_t next = it + 1 == path.rend() ? size : (it + 1)->first;
    emit(it->second, s.substr(it->first, next - it->first), out, prev_unk);
  }
}

void SpmEncoder::encode_bpe(std::string_view s, Scratch& scratch, std::vector<uint32_t>& out, bool& prev_unk) const {
  using Symbol = Scratch::Symbol;
  using Pair = Scratch::Pair;
  // Highest score first; on equal scores the leftmost pair (sentencepiece's agenda order).
  const auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Symbol>& sym = scratch.sym;
  std::vector<Pair>& agenda = scratch.agenda;
  sym.clear();
  agenda.clear();
  // An unused piece that a merge produced is split back into the two it came from.
  auto& unmerge = scratch.unmerge;
  if (has_unused_) unmerge.clear();
  const auto text = [&](const Symbol& x) { return s.substr(x.begin, x.len); };
  const auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return;
    const std::string_view merged = s.substr(sym[l].begin, sym[l].len + sym[r].len);
    const int id = pieces_->find(merged);
    if (id < 0) return;
    agenda.push_back({l, r, m_.scores[id], static_cast<uint32_t>(merged.size()), id});
    std::push_heap(agenda.begin(), agenda.end(), lower);
    if (has_unused_ && m_.types[id] == kSpmUnused) unmerge[merged] = {text(sym[l]), text(sym[r])};
  };
  for (size_t at = 0; at < s.size();) {
    int id = -1;
    size_t n = 0;
    if (user_first_[static_cast<unsigned char>(s[at])])
      user_trie_->prefixes(s.substr(at), [&](size_t len, int pid) { n = len, id = pid; });
    const bool frozen = n > 0;
    if (!frozen) n = std::min(one_char_len(static_cast<unsigned char>(s[at])), s.size() - at);
    const int i = static_cast<int>(sym.size());
    sym.push_back({i - 1, at + n < s.size() ? i + 1 : -1, static_cast<uint32_t>(at), static_cast<uint32_t>(n), id,
                   frozen});
    at += n;
  }
  if (sym.empty()) return;
  for (size_t i = 1; i < sym.size(); ++i) try_pair(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    std::pop_heap(agenda.begin(), agenda.end(), lower);
    const Pair top = agenda.back();
    agenda.pop_back();
    Symbol& l = sym[top.left];
    Symbol& r = sym[top.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.size) continue;  // stale
    l.len += r.len;
    l.id = top.id;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = top.left;
    r.len = 0;
    try_pair(l.prev, top.left);
    try_pair(top.left, l.next);
  }
  const auto resplit = [&](const auto& self, std::string_view w, int id) -> void {
    auto it = m_.types[id] == kSpmUnused ? unmerge.find(w) : unmerge.end();
    if (it == unmerge.end()) return emit(id, w, out, prev_unk);
    self(self, it->second.first, piece_to_id(it->second.first));
    self(self, it->second.second, piece_to_id(it->second.second));
  };
  for (int i = 0; i != -1; i = sym[i].next) {
    const std::string_view w = text(sym[i]);
    const int id = sym[i].id >= 0 ? sym[i].id : piece_to_id(w);
    if (has_unused_) resplit(resplit, w, id);
    else emit(id, w, out, prev_unk);
  }
}

bool SpmEncoder::may_join(std::string_view s, size_t left, size_t right, size_t right_len) const {
  const auto a = static_cast<unsigned char>(s[left]), b = static_cast<unsigned char>(s[right]);
  // The common cases of spaced text, from tables: an ASCII character before or after U+2581.
  if (a < 0x80 && right_len == 3 && s.compare(right, 3, kSpace) == 0) return !cut_before_space_[a];
  if (b < 0x80 && right - left == 3 && s.compare(left, 3, kSpace) == 0) return !cut_after_space_[b];
  return pairs_->maybe_contains(
      PairSet::key(char_bits(s.data() + left, right - left), char_bits(s.data() + right, right_len)));
}

size_t SpmEncoder::chunk_end(std::string_view s, size_t at) const {
  const size_t n = s.size();
  size_t prev = at;  // the previous character starts here, the current one at i
  size_t i = at + std::min(one_char_len(static_cast<unsigned char>(s[at])), n - at);
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80 && static_cast<unsigned char>(s[prev]) < 0x80) {
      // ASCII after ASCII: every such pair is taken as joinable (they are not in the set).
      while (i + 1 < n && static_cast<unsigned char>(s[i + 1]) < 0x80) ++i;
      prev = i++;
      continue;
    }
    const size_t len = std::min(one_char_len(c), n - i);
    if (!may_join(s, prev, i, len)) return i;
    prev = i;
    i += len;
  }
  return n;
}

void SpmEncoder::encode_bpe_cached(std::string_view s, Scratch& c, std::vector<uint32_t>& out) const {
  if (c.cache_owner != instance_) c.reset_cache(instance_);
  bool prev_unk = false;
  for (size_t at = 0; at < s.size();) {
    // A chunk ends between two characters that no piece holds side by side.
    const size_t end = chunk_end(s, at);
    const std::string_view chunk = s.substr(at, end - at);
    at = end;
    if (chunk.size() > Scratch::kMaxChunkBytes) {
      encode_bpe(chunk, c, out, prev_unk);
      continue;
    }
    const uint64_t h = hash_bytes(chunk.data(), chunk.size());
    size_t i = h & (Scratch::kSlots - 1);
    for (;; i = (i + 1) & (Scratch::kSlots - 1)) {
      const Scratch::Entry& e = c.slots[i];
      if (e.val_len == UINT32_MAX) break;
      if (e.hash == h && e.key_len == chunk.size() && std::memcmp(c.keys.data() + e.key_off, chunk.data(), chunk.size()) == 0)
        break;
    }
    if (c.slots[i].val_len == UINT32_MAX) {
      if (c.used >= Scratch::kSlots / 2) {  // full: start over
        c.reset_cache(instance_);
        i = h & (Scratch::kSlots - 1);
      }
      c.chunk_ids.clear();
      if (const SharedChunks::Entry* se = shared_->find(h, chunk)) {
        const uint32_t* sid = SharedChunks::ids(se);
        c.chunk_ids.assign(sid, sid + se->n_ids);
      } else {
        bool chunk_unk = false;
        encode_bpe(chunk, c, c.chunk_ids, chunk_unk);
        shared_->insert(h, chunk, c.chunk_ids.data(), c.chunk_ids.size());
      }
      c.slots[i] = {h, static_cast<uint32_t>(c.keys.size()), static_cast<uint32_t>(chunk.size()),
                    static_cast<uint32_t>(c.vals.size()), static_cast<uint32_t>(c.chunk_ids.size())};
      c.keys.append(chunk);
      c.vals.insert(c.vals.end(), c.chunk_ids.begin(), c.chunk_ids.end());
      ++c.used;
    }
    const Scratch::Entry& e = c.slots[i];
    const uint32_t* ids = c.vals.data() + e.val_off;
    uint32_t n = e.val_len;
    // Each chunk was encoded on its own: a run of <unk> that spans chunks is still one <unk>.
    if (n > 0 && prev_unk && ids[0] == static_cast<uint32_t>(m_.unk_id) && !m_.byte_fallback) ++ids, --n;
    out.insert(out.end(), ids, ids + n);
    if (e.val_len > 0) prev_unk = c.vals[e.val_off + e.val_len - 1] == static_cast<uint32_t>(m_.unk_id);
  }
}

void SpmEncoder::encode(std::string_view text, std::vector<uint32_t>& out, bool dummy_prefix) const {
  thread_local Scratch scratch;
  normalize_into(text, scratch.normalized, dummy_prefix);
  const std::string_view s = scratch.normalized;
  bool prev_unk = false;
  if (m_.model_type == kSpmUnigram) encode_unigram(s, scratch, out, prev_unk);
  else if (chunk_cache_) encode_bpe_cached(s, scratch, out);
  else encode_bpe(s, scratch, out, prev_unk);
}

std::vector<int64_t> SpmEncoder::encode(std::string_view text) const {
  thread_local std::vector<uint32_t> ids;
  ids.clear();
  encode(text, ids);
  return std::vector<int64_t>(ids.begin(), ids.end());
}

}  // namespace loom::spm
