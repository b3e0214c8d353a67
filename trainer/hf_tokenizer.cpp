#include "hf_tokenizer.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#include "loom/json_text.h"
#include "loom/error.h"
#include "loom/sys.h"

namespace loom::hf {

namespace {

// Protobuf wire format, the subset a .model uses.
class Wire {
 public:
  Wire(const std::string& data, size_t begin, size_t end, const std::string& path)
      : d_(data), at_(begin), end_(end), path_(path) {}
  bool done() const { return at_ >= end_; }
  size_t at() const { return at_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      LOOM_CHECK(at_ < end_, path_, ": truncated varint at byte ", at_, "; not a SentencePiece model");
      const auto b = static_cast<uint8_t>(d_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    LOOM_FAIL(path_, ": varint longer than 10 bytes at byte ", at_, "; not a SentencePiece model");
  }
  float fixed32_float() {
    LOOM_CHECK(4 <= end_ - at_, path_, ": truncated float at byte ", at_, "; not a SentencePiece model");
    uint32_t u = 0;
    for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(static_cast<uint8_t>(d_[at_ + i])) << (8 * i);
    at_ += 4;
    float f;
    static_assert(sizeof f == sizeof u, "float is 32 bits");
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  // The [begin, end) of a length-delimited field's payload; moves past it.
  std::pair<size_t, size_t> bytes() {
    const uint64_t n = varint();
    LOOM_CHECK(n <= end_ - at_, path_, ": field of ", n, " bytes at byte ", at_, " runs past its message (",
               end_ - at_, " bytes left); not a SentencePiece model");
    const size_t b = at_;
    at_ += n;
    return {b, at_};
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: advance(8); break;
      case 2: bytes(); break;
      case 5: advance(4); break;
      default: LOOM_FAIL(path_, ": unsupported protobuf wire type ", wire_type, " at byte ", at_,
                         "; not a SentencePiece model");
    }
  }

 private:
  void advance(size_t n) {
    LOOM_CHECK(n <= end_ - at_, path_, ": truncated field at byte ", at_, "; not a SentencePiece model");
    at_ += n;
  }
  const std::string& d_;
  size_t at_, end_;
  const std::string& path_;
};

std::string piece_or_null(const SpmModel& m, int id) {
  return id >= 0 && id < m.size() ? json_quote(m.pieces[id]) : std::string("null");
}

}  // namespace

SpmModel read_spm_model(const std::string& path) {
  const std::string data = sys::read_file(path);
  SpmModel m;
  Wire top(data, 0, data.size(), path);
  while (!top.done()) {
    const uint64_t key = top.varint();
    const uint32_t field = static_cast<uint32_t>(key >> 3), wt = static_cast<uint32_t>(key & 7);
    if (field == 1 && wt == 2) {
      const auto [b, e] = top.bytes();
      Wire p(data, b, e, path);
      std::string piece;
      int type = kSpmNormal;
      float score = 0;
      while (!p.done()) {
        const uint64_t k = p.varint();
        if (k == ((1 << 3) | 2)) {
          const auto [pb, pe] = p.bytes();
          piece = data.substr(pb, pe - pb);
        } else if (k == ((2 << 3) | 5)) {
          score = p.fixed32_float();
        } else if (k == ((3 << 3) | 0)) {
          type = static_cast<int>(p.varint());
        } else {
          p.skip(static_cast<uint32_t>(k & 7));
        }
      }
      m.pieces.push_back(piece);
      m.types.push_back(type);
      m.scores.push_back(score);
    } else if (field == 2 && wt == 2) {
      const auto [b, e] = top.bytes();
      Wire t(data, b, e, path);
      while (!t.done()) {
        const uint64_t k = t.varint();
        const uint32_t f = static_cast<uint32_t>(k >> 3);
        if ((k & 7) == 0 && f >= 40 && f <= 43) {
          const int v = static_cast<int32_t>(static_cast<uint32_t>(t.varint()));  // int32 as two's complement
          (f == 40 ? m.unk_id : f == 41 ? m.bos_id : f == 42 ? m.eos_id : m.pad_id) = v;
        } else if ((k & 7) == 0 && f == 3) {
          m.model_type = static_cast<int>(t.varint());
        } else if ((k & 7) == 0 && f == 24) {
          m.treat_whitespace_as_suffix = t.varint() != 0;
        } else if ((k & 7) == 0 && f == 35) {
          m.byte_fallback = t.varint() != 0;
        } else {
          t.skip(static_cast<uint32_t>(k & 7));
        }
      }
    } else if (field == 3 && wt == 2) {
      const auto [b, e] = top.bytes();
      Wire n(data, b, e, path);
      SpmNormalizerSpec& ns = m.normalizer;
      while (!n.done()) {
        const uint64_t k = n.varint();
        const uint32_t f = static_cast<uint32_t>(k >> 3);
        if ((k & 7) == 2 && (f == 1 || f == 2)) {
          const auto [sb, se] = n.bytes();
          (f == 1 ? ns.name : ns.precompiled_charsmap) = data.substr(sb, se - sb);
        } else if ((k & 7) == 0 && f >= 3 && f <= 5) {
          (f == 3 ? ns.add_dummy_prefix : f == 4 ? ns.remove_extra_whitespaces : ns.escape_whitespaces) =
              n.varint() != 0;
        } else {
          n.skip(static_cast<uint32_t>(k & 7));
        }
      }
    } else {
      top.skip(wt);
    }
  }
  LOOM_CHECK(!m.pieces.empty(), path, ": no pieces; not a SentencePiece model");
  for (int id : {m.unk_id, m.bos_id, m.eos_id, m.pad_id})
    LOOM_CHECK(id < m.size(), path, ": special id ", id, " is outside the ", m.size(), " pieces");
  return m;
}

std::string decode(const SpmModel& m, const std::vector<int64_t>& ids) {
  std::string text;
  for (int64_t id : ids) {
    LOOM_CHECK(id >= 0 && id < m.size(), "decode: token id ", id, " is outside the tokenizer's ", m.size(), " pieces");
    const int type = m.types[id];
    const std::string& piece = m.pieces[id];
    unsigned byte = 0;
    if (type == kSpmControl) continue;
    if (type == kSpmUnknown) text += " \xE2\x81\x87 ";
    else if (type == kSpmByte && std::sscanf(piece.c_str(), "<0x%2X>", &byte) == 1) text += static_cast<char>(byte);
    else text += piece;
  }
  std::string out;
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, space.size(), space) == 0) {
      out += ' ';
      i += space.size();
    } else {
      out += text[i++];
    }
  }
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);  // the dummy prefix the encoder added
  return out;
}

std::vector<std::pair<std::string, std::string>> tokenizer_files(const SpmModel& m, const std::string& model_path,
                                                                 int64_t max_positions) {
  const std::string bos = piece_or_null(m, m.bos_id), eos = piece_or_null(m, m.eos_id),
                    unk = piece_or_null(m, m.unk_id), pad = piece_or_null(m, m.pad_id);
  // Which transformers class encodes text to SentencePiece's ids (+ bos), as measured with transformers
  // 5.17 on every line of botchan.txt and wagahaiwa_nekodearu.txt (bench/hf/check_logits.py --corpus):
  // - transformers 5's LlamaTokenizer is a `tokenizers` BPE built from the .model's vocabulary with a
  //   Metaspace pre-tokenizer: no charsmap, no whitespace rules, BPE merges even for a unigram model
  //   (most texts differ for the demo's unigram model). For a BPE model without normalization rules
  //   (InternLM's) it is the best there is: add_prefix_space must follow the model's add_dummy_prefix
  //   (InternLM's is false; the default prepends a U+2581 SentencePiece does not), then 99.5% of the
  //   texts are equal (its rank-ordered merges differ on some punctuation runs such as ",--").
  //   SentencePieceBackend cannot take InternLM's model: sentencepiece 0.2 refuses to load a model
  //   with a "\0" piece. transformers 4's slow LlamaTokenizer with legacy: true calls sentencepiece
  //   itself and is exact with sentencepiece < 0.2.
  // - Any other model (unigram, NFKC rules, extra-whitespace removal): SentencePieceBackend, transformers
  //   5's wrapper of the sentencepiece library (legacy: true keeps the model's normalizer as it is), with
  //   special_tokens_pattern "bos" for the leading bos: every line equal for the demo's model and the
  //   NFKC unigram one. transformers 4 has no such class: load the folder there with
  //   LlamaTokenizer.from_pretrained(dir, legacy=True) (docs/HF.md).
  const SpmNormalizerSpec& ns = m.normalizer;
  const bool plain_bpe = m.model_type == kSpmBpe && ns.precompiled_charsmap.empty() && !ns.remove_extra_whitespaces &&
                         ns.escape_whitespaces && !m.treat_whitespace_as_suffix;
  std::ostringstream cfg;
  cfg << "{\n"
      << "  \"tokenizer_class\": \"" << (plain_bpe ? "LlamaTokenizer" : "SentencePieceBackend") << "\",\n";
  if (plain_bpe) cfg << "  \"add_prefix_space\": " << (ns.add_dummy_prefix ? "true" : "false") << ",\n";
  else cfg << "  \"special_tokens_pattern\": \"" << (m.bos_id >= 0 ? "bos" : "none") << "\",\n";
  cfg << "  \"bos_token\": " << bos << ",\n"
      << "  \"eos_token\": " << eos << ",\n"
      << "  \"unk_token\": " << unk << ",\n"
      << "  \"pad_token\": " << pad << ",\n"
      << "  \"add_bos_token\": " << (m.bos_id >= 0 ? "true" : "false") << ",\n"
      << "  \"add_eos_token\": false,\n"
      << "  \"legacy\": true,\n"
      << "  \"clean_up_tokenization_spaces\": false,\n"
      << "  \"model_max_length\": " << max_positions << ",\n"
      << "  \"sp_model_kwargs\": {}\n"
      << "}\n";
  std::ostringstream map;
  map << "{\n  \"bos_token\": " << bos << ",\n  \"eos_token\": " << eos << ",\n  \"unk_token\": " << unk;
  if (m.pad_id >= 0) map << ",\n  \"pad_token\": " << pad;
  map << "\n}\n";
  return {{"tokenizer.model", sys::read_file(model_path)},
          {"tokenizer_config.json", cfg.str()},
          {"special_tokens_map.json", map.str()}};
}

}  // namespace loom::hf
