#include "loom/spm_model.h"

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string_view>

#include "loom/error.h"
#include "loom/sys.h"

namespace loom::spm {

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

// ModelProto.pieces (field 1): a SentencePiece (piece 1, score 2, type 3).
void read_piece(Wire& p, const std::string& data, SpmModel& m) {
  std::string_view piece;
  int type = kSpmNormal;
  float score = 0;
  while (!p.done()) {
    const uint64_t k = p.varint();
    if (k == ((1 << 3) | 2)) {
      const auto [pb, pe] = p.bytes();
      piece = std::string_view(data).substr(pb, pe - pb);
    } else if (k == ((2 << 3) | 5)) {
      score = p.fixed32_float();
    } else if (k == ((3 << 3) | 0)) {
      type = static_cast<int>(p.varint());
    } else {
      p.skip(static_cast<uint32_t>(k & 7));
    }
  }
  m.pieces.emplace_back(piece);
  m.types.push_back(type);
  m.scores.push_back(score);
}

// ModelProto.trainer_spec (field 2): model type, special ids and pieces, whitespace and byte rules.
void read_trainer_spec(Wire& t, const std::string& data, SpmModel& m) {
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
    } else if ((k & 7) == 2 && (f == 46 || f == 47)) {
      const auto [sb, se] = t.bytes();
      if (se > sb) (f == 46 ? m.bos_piece : m.eos_piece) = data.substr(sb, se - sb);
      else (f == 46 ? m.bos_piece : m.eos_piece) = f == 46 ? "<s>" : "</s>";
    } else {
      t.skip(static_cast<uint32_t>(k & 7));
    }
  }
}

// ModelProto.normalizer_spec (field 3): name, precompiled charsmap, the three whitespace switches.
void read_normalizer_spec(Wire& n, const std::string& data, SpmNormalizerSpec& ns) {
  while (!n.done()) {
    const uint64_t k = n.varint();
    const uint32_t f = static_cast<uint32_t>(k >> 3);
    if ((k & 7) == 2 && (f == 1 || f == 2)) {
      const auto [sb, se] = n.bytes();
      (f == 1 ? ns.name : ns.precompiled_charsmap) = data.substr(sb, se - sb);
    } else if ((k & 7) == 0 && f >= 3 && f <= 5) {
      (f == 3 ? ns.add_dummy_prefix : f == 4 ? ns.remove_extra_whitespaces : ns.escape_whitespaces) = n.varint() != 0;
    } else {
      n.skip(static_cast<uint32_t>(k & 7));
    }
  }
}

}  // namespace

SpmModel parse_spm_model(const std::string& data, const std::string& path) {
  SpmModel m;
  // About 16 bytes of the file a piece (InternLM's: 1.66 MB, 103168 pieces): one allocation, not ~17.
  m.types.reserve(data.size() / 16);
  m.pieces.reserve(data.size() / 16);
  m.scores.reserve(data.size() / 16);
  Wire top(data, 0, data.size(), path);
  while (!top.done()) {
    const uint64_t key = top.varint();
    const uint32_t field = static_cast<uint32_t>(key >> 3), wt = static_cast<uint32_t>(key & 7);
    if (wt == 2 && field >= 1 && field <= 3) {
      const auto [b, e] = top.bytes();
      Wire sub(data, b, e, path);
      if (field == 1) read_piece(sub, data, m);
      else if (field == 2) read_trainer_spec(sub, data, m);
      else read_normalizer_spec(sub, data, m.normalizer);
    } else {
      if (field == 4) m.has_self_test = true;
      top.skip(wt);
    }
  }
  LOOM_CHECK(!m.pieces.empty(), path, ": no pieces; not a SentencePiece model");
  for (int id : {m.unk_id, m.bos_id, m.eos_id, m.pad_id})
    LOOM_CHECK(id < m.size(), path, ": special id ", id, " is outside the ", m.size(), " pieces");
  return m;
}

std::string read_spm_model_bytes(const std::string& path) {
  LOOM_CHECK(sys::exists(path), path, ": no such SentencePiece model file; ", kSpmModelExpected);
  if (sys::is_directory(path)) {
    const std::string inside = path + (path.back() == '/' ? "" : "/") + "tokenizer.model";
    LOOM_FAIL(path, ": a folder, not a tokenizer model file; ", kSpmModelExpected,
              sys::exists(inside) ? str(": give ", inside) : std::string(" and this folder has none"));
  }
  const std::string data = sys::read_file(path);
  LOOM_CHECK(!data.empty(), path, ": an empty file, not a tokenizer model; ", kSpmModelExpected);
  // JSON: '{' or '[' after whitespace (a model's first byte, 0x0A, is '\n', and a piece's length
  // byte may be '{'), and no NUL byte, which JSON text never holds and a model's fields always do.
  const size_t bom = data.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  const size_t first = data.find_first_not_of(" \t\r\n", bom);
  const bool json = first != std::string::npos && (data[first] == '{' || data[first] == '[') &&
                    data.find('\0') == std::string::npos;
  LOOM_CHECK(!json, path,
             ": a JSON file (a Hugging Face tokenizer.json or tokenizer_config.json?), not a SentencePiece model; ",
             kSpmModelExpected);
  return data;
}

SpmModel read_spm_model(const std::string& path) {
  const std::string data = read_spm_model_bytes(path);
  try {
    return parse_spm_model(data, path);
  } catch (const Error& e) {
    LOOM_FAIL(e.what(), "; ", kSpmModelExpected);
  }
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

}  // namespace loom::spm
