#include "loom/spm_encoder.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <queue>

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

}  // namespace

// A byte trie over pieces: every piece that is a prefix of a text, shortest first.
struct SpmEncoder::Trie {
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

SpmEncoder::SpmEncoder(SpmModel model) : m_(std::move(model)) {
  LOOM_CHECK(m_.model_type == kSpmUnigram || m_.model_type == kSpmBpe, "SentencePiece model type ", m_.model_type,
             " (3 word, 4 char) is not supported by loom's encoder; only unigram (1) and bpe (2)");
  LOOM_CHECK(m_.scores.size() == m_.pieces.size() && m_.types.size() == m_.pieces.size(),
             "SentencePiece model: pieces, types and scores differ in number");
  vocab_trie_ = std::make_unique<Trie>();
  user_trie_ = std::make_unique<Trie>();
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;  // as sentencepiece: the smallest positive float, so scores < 0 leave it there
  for (int i = 0; i < m_.size(); ++i) {
    const std::string_view p = m_.pieces[i];
    const int t = m_.types[i];
    if (t == kSpmNormal || t == kSpmUserDefined || t == kSpmUnused) {
      pieces_.emplace(p, i);  // first wins on duplicates, as sentencepiece refuses them anyway
      if (m_.model_type == kSpmUnigram && !p.empty()) vocab_trie_->insert(p, i);
    } else {
      reserved_.emplace(p, i);
    }
    if (t == kSpmUserDefined && !p.empty()) user_trie_->insert(p, i);
    if (t == kSpmNormal) {
      min_score_ = std::min(min_score_, m_.scores[i]);
      max_score_ = std::max(max_score_, m_.scores[i]);
    }
  }
  LOOM_CHECK(m_.unk_id >= 0 && m_.unk_id < m_.size() && m_.types[m_.unk_id] == kSpmUnknown,
             "SentencePiece model: unk_id ", m_.unk_id, " is not an unknown piece");

  const std::string& blob = m_.normalizer.precompiled_charsmap;
  if (!blob.empty()) {
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
}

SpmEncoder::~SpmEncoder() = default;

size_t SpmEncoder::user_defined_prefix(std::string_view s) const {
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
  const SpmNormalizerSpec& spec = m_.normalizer;
  const bool remove_extra = spec.remove_extra_whitespaces;
  std::string out;
  const auto add_space = [&] { out += spec.escape_whitespaces ? kSpace : std::string_view(" "); };
  if (remove_extra) {
    while (!input.empty()) {
      const auto [r, n] = normalize_prefix(input);
      if (r != " ") break;
      input.remove_prefix(n);
    }
  }
  if (input.empty()) return out;
  if (!m_.treat_whitespace_as_suffix && spec.add_dummy_prefix) add_space();
  bool prev_space = remove_extra;
  while (!input.empty()) {
    auto [r, n] = normalize_prefix(input);
    while (prev_space && !r.empty() && r.front() == ' ') r.remove_prefix(1);
    if (!r.empty()) {
      for (const char c : r) {
        if (spec.escape_whitespaces && c == ' ') out += kSpace;
        else out += c;
      }
      prev_space = r.back() == ' ';
    }
    input.remove_prefix(n);
    if (!remove_extra) prev_space = false;
  }
  if (remove_extra) {
    const std::string_view space = spec.escape_whitespaces ? kSpace : std::string_view(" ");
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  }
  if (m_.treat_whitespace_as_suffix && spec.add_dummy_prefix) add_space();
  return out;
}

int SpmEncoder::piece_to_id(std::string_view piece) const {
  if (auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
  if (auto it = pieces_.find(piece); it != pieces_.end()) return it->second;
  return m_.unk_id;
}

std::vector<SpmEncoder::Piece> SpmEncoder::encode_unigram(std::string_view s) const {
  // Best path ending at each byte. As sentencepiece: a piece's candidate is computed in double and
  // stored as float; ties keep the earlier (longer) piece; an unknown node only where no piece is
  // exactly the one character there.
  struct Best {
    int id = -1;
    float score = 0;
    int64_t starts_at = -1;
  };
  const size_t size = s.size();
  std::vector<Best> best(size + 1);
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
  std::vector<Piece> out;
  for (size_t end = size; end > 0;) {
    const Best& b = best[end];
    LOOM_ASSERT(b.starts_at >= 0, "unigram lattice has no path to byte ", end);
    out.push_back({s.substr(b.starts_at, end - b.starts_at), b.id});
    end = static_cast<size_t>(b.starts_at);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<SpmEncoder::Piece> SpmEncoder::encode_bpe(std::string_view s) const {
  struct Symbol {
    int prev, next;
    bool frozen;  // a user-defined piece: never merged
    std::string_view text;
  };
  struct Pair {
    int left, right;
    float score;
    size_t size;
  };
  // Highest score first; on equal scores the leftmost pair.
  const auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> agenda(lower);
  std::vector<Symbol> sym;
  // An unused piece that a merge produced is split back into the two it came from.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> unmerge;
  const auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return;
    const std::string_view merged(sym[l].text.data(), sym[l].text.size() + sym[r].text.size());
    auto it = pieces_.find(merged);
    if (it == pieces_.end()) return;
    agenda.push({l, r, m_.scores[it->second], merged.size()});
    if (m_.types[it->second] == kSpmUnused) unmerge[merged] = {sym[l].text, sym[r].text};
  };
  for (size_t at = 0; at < s.size();) {
    size_t n = user_defined_prefix(s.substr(at));
    const bool frozen = n > 0;
    if (!frozen) n = std::min(one_char_len(static_cast<unsigned char>(s[at])), s.size() - at);
    const int i = static_cast<int>(sym.size());
    sym.push_back({i - 1, at + n < s.size() ? i + 1 : -1, frozen, s.substr(at, n)});
    at += n;
  }
  if (sym.empty()) return {};
  for (size_t i = 1; i < sym.size(); ++i) try_pair(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& l = sym[top.left];
    Symbol& r = sym[top.right];
    if (l.text.empty() || r.text.empty() || l.text.size() + r.text.size() != top.size) continue;  // stale
    l.text = std::string_view(l.text.data(), l.text.size() + r.text.size());
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = top.left;
    r.text = {};
    try_pair(l.prev, top.left);
    try_pair(top.left, l.next);
  }
  std::vector<Piece> out;
  const auto emit = [&](const auto& self, std::string_view w) -> void {
    const int id = piece_to_id(w);
    auto it = unmerge.find(w);
    if (m_.types[id] != kSpmUnused || it == unmerge.end()) {
      out.push_back({w, id});
      return;
    }
    self(self, it->second.first);
    self(self, it->second.second);
  };
  for (int i = 0; i != -1; i = sym[i].next) emit(emit, sym[i].text);
  return out;
}

std::vector<int64_t> SpmEncoder::encode(std::string_view text) const {
  const std::string normalized = normalize(text);
  const std::vector<Piece> pieces =
      m_.model_type == kSpmUnigram ? encode_unigram(normalized) : encode_bpe(normalized);
  std::vector<int64_t> ids;
  ids.reserve(pieces.size());
  bool prev_unk = false;
  for (const Piece& p : pieces) {
    const bool unk = m_.types[p.id] == kSpmUnknown;
    if (unk && m_.byte_fallback) {
      for (const char c : p.text) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<unsigned char>(c)));
        ids.push_back(piece_to_id(name));
      }
    } else if (!(unk && prev_unk)) {  // a run of unknown pieces is one <unk>
      ids.push_back(p.id);
    }
    prev_unk = unk;
  }
  return ids;
}

}  // namespace loom::spm
