#include "loom/internlm_format.h"

#include <cctype>
#include <charconv>
#include <cstring>

#include "loom/error.h"

namespace loom {

std::string npy_int32_pairs(const std::vector<int32_t>& data) {
  LOOM_ASSERT(data.size() % 2 == 0, "pairs expected");
  std::string dict = str("{'descr': '<i4', 'fortran_order': False, 'shape': (", data.size() / 2, ", 2), }");
  // numpy: magic(6) + version(2) + header_len(2) + dict + spaces + '\n', total a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::string out(kNpyMagic, sizeof(kNpyMagic));
  out.push_back('\x01');
  out.push_back('\x00');
  const uint16_t hl = static_cast<uint16_t>(dict.size());
  out.push_back(static_cast<char>(hl & 0xff));
  out.push_back(static_cast<char>(hl >> 8));
  out += dict;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(int32_t));
  return out;
}

// ---- InternlmWriter ----

InternlmWriter::InternlmWriter(const std::string& bin_path) : bin_path_(bin_path), bin_(bin_path) {}

void InternlmWriter::format_doc(const uint32_t* ids, size_t n, std::string& out) {
  out.append("{\"tokens\": [");
  char buf[16];
  for (size_t i = 0; i < n; ++i) {
    if (i) out.append(", ");
    const auto r = std::to_chars(buf, buf + sizeof(buf), ids[i]);
    out.append(buf, static_cast<size_t>(r.ptr - buf));
  }
  out.append("]}\n");
}

void InternlmWriter::add_formatted(const char* bytes, const uint64_t* tokens, const uint64_t* lengths, size_t ndocs) {
  // Every document is checked before any is recorded: a refused batch leaves .meta and .bin as
  // they were.
  const uint64_t start = bin_.bytes_written();
  uint64_t offset = start;
  for (size_t i = 0; i < ndocs; ++i) {
    LOOM_CHECK(offset <= kInternlmMaxOffset && tokens[i] <= kInternlmMaxOffset, bin_path_, ": document ",
               num_docs() + i, " would start at byte ", offset, ", past InternLM's int32 offsets (2^31-1);",
               " write this input as several shards or use --format loom");
    offset += lengths[i];
  }
  offset = start;
  for (size_t i = 0; i < ndocs; ++i) {
    meta_.push_back(static_cast<int32_t>(offset));
    meta_.push_back(static_cast<int32_t>(tokens[i]));
    num_tokens_ += tokens[i];
    offset += lengths[i];
  }
  bin_.write(bytes, offset - start);
}

void InternlmWriter::add_doc(const uint32_t* ids, size_t n) {
  line_.clear();
  format_doc(ids, n, line_);
  const uint64_t len = line_.size(), tokens = n;
  add_formatted(line_.data(), &tokens, &len, 1);
}

void InternlmWriter::commit() {
  LOOM_CHECK(num_docs() > 0, bin_path_, ": no documents to write (an empty shard is not written)");
  sys::AtomicFile meta(bin_path_ + ".meta");
  meta.write(npy_int32_pairs(meta_));
  sys::commit_all({&bin_, &meta});
}

// ---- InternlmReader ----

namespace {
// The header dict of a .npy file, parsed as strictly as numpy.load (Python's literal_eval of a
// dict with exactly the keys descr, fortran_order and shape, then only whitespace): junk in the
// padding is refused the way numpy refuses it. Values are kept as their source text.
struct NpyDict {
  std::string descr, fortran_order, shape;
};

NpyDict parse_npy_dict(const std::string& path, const std::string& text) {
  size_t i = 0;
  auto fail = [&](const char* what) {
    LOOM_FAIL(path, ": .npy header is not the dict numpy reads (", what, " at header byte ", i, "): ", text);
  };
  auto ws = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r' ||
                               text[i] == '\f'))
      ++i;
  };
  auto quoted = [&] {
    const char q = i < text.size() ? text[i] : 0;
    if (q != '\'' && q != '"') fail("expected a quoted key");
    const size_t close = text.find(q, i + 1);
    if (close == std::string::npos || text.find('\\', i) < close) fail("bad string");
    std::string v = text.substr(i, close + 1 - i);
    i = close + 1;
    return v;
  };
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  if (i >= text.size() || text[i] != '{') fail("expected '{'");
  ++i;
  NpyDict d;
  bool seen[3] = {false, false, false};
  for (ws(); i < text.size() && text[i] != '}'; ws()) {
    const std::string key = quoted();
    const std::string name = key.substr(1, key.size() - 2);
    const int k = name == "descr" ? 0 : name == "fortran_order" ? 1 : name == "shape" ? 2 : -1;
    if (k < 0) fail("unexpected key");
    if (seen[k]) fail("repeated key");
    seen[k] = true;
    ws();
    if (i >= text.size() || text[i] != ':') fail("expected ':'");
    ++i;
    ws();
    std::string value;
    if (i < text.size() && (text[i] == '\'' || text[i] == '"')) {
      value = quoted();
    } else if (i < text.size() && text[i] == '(') {
      const size_t close = text.find(')', i);
      if (close == std::string::npos) fail("unclosed '('");
      value = text.substr(i, close + 1 - i);
      i = close + 1;
    } else {
      const size_t b = i;
      while (i < text.size() && std::isalnum(static_cast<unsigned char>(text[i]))) ++i;
      value = text.substr(b, i - b);
    }
    (k == 0 ? d.descr : k == 1 ? d.fortran_order : d.shape) = value;
    ws();
    if (i < text.size() && text[i] == ',') ++i;
    else if (i < text.size() && text[i] != '}') fail("expected ',' or '}'");
  }
  if (i >= text.size()) fail("expected '}'");
  ++i;
  ws();
  if (i != text.size()) fail("unexpected text after the dict");
  if (!(seen[0] && seen[1] && seen[2])) fail("missing one of 'descr', 'fortran_order', 'shape'");
  return d;
}

// Parses the .npy header; returns the offset of the data and the row count.
void parse_npy(const sys::MappedFile& m, uint64_t& data_offset, uint64_t& rows) {
  const std::string& path = m.path();
  const uint8_t* p = m.data();
  LOOM_CHECK(m.size() >= 10 && std::memcmp(p, kNpyMagic, 6) == 0, path,
             ": bad magic: not a NumPy .npy file (expected \"\\x93NUMPY\" at byte 0)");
  const uint8_t major = p[6], minor = p[7];
  // numpy reads exactly 1.0, 2.0 and 3.0.
  LOOM_CHECK((major >= 1 && major <= 3) && minor == 0, path, ": .npy format version ", int{major}, ".", int{minor},
             " is not one numpy reads (1.0, 2.0, 3.0)");
  uint64_t hl, start;
  if (major == 1) {
    hl = p[8] | (uint64_t{p[9]} << 8);
    start = 10;
  } else {
    LOOM_CHECK(m.size() >= 12, path, ": truncated .npy header");
    hl = p[8] | (uint64_t{p[9]} << 8) | (uint64_t{p[10]} << 16) | (uint64_t{p[11]} << 24);
    start = 12;
  }
  LOOM_CHECK(m.size() >= start + hl, path, ": truncated .npy header: ", m.size(), " bytes, header needs ", start + hl);
  const NpyDict dict = parse_npy_dict(path, std::string(reinterpret_cast<const char*>(p + start), hl));
  const std::string &descr = dict.descr, &order = dict.fortran_order, &shape = dict.shape;
  LOOM_CHECK(descr == "'<i4'" && order == "False", path, ": InternLM .meta must be int32 (N, 2) in C order, found descr ",
             descr, ", fortran_order ", order, ", shape ", shape);
  unsigned long long n = 0;
  int cols = 0;
  char close = 0;
  LOOM_CHECK(std::sscanf(shape.c_str(), "(%llu, %d%c", &n, &cols, &close) == 3 && cols == 2 && close == ')', path,
             ": InternLM .meta must be int32 (N, 2), found shape ", shape);
  data_offset = start + hl;
  rows = n;
  // Overflow-checked before it is trusted: a forged row count whose size wraps would "match".
  uint64_t want = 0;
  LOOM_CHECK(!__builtin_mul_overflow(rows, uint64_t{8}, &want) && !__builtin_add_overflow(want, data_offset, &want),
             path, ": shape ", shape, ": ", rows, " rows x 8 bytes does not fit 64 bits (a forged or corrupted header)");
  LOOM_CHECK(m.size() == want, path, ": truncated .meta: ", m.size(), " bytes, expected ", want, " for shape (", rows,
             ", 2)");
}

const char* skip_ws(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) ++p;
  return p;
}
}  // namespace

InternlmReader::InternlmReader(const std::string& bin_path) {
  const std::string meta_path = bin_path + ".meta";
  meta_ = sys::MappedFile(meta_path);
  uint64_t data_offset = 0;
  parse_npy(meta_, data_offset, num_docs_);
  LOOM_CHECK(num_docs_ > 0, meta_path, ": empty shard: it has no documents");
  rows_.resize(num_docs_ * 2);
  std::memcpy(rows_.data(), meta_.data() + data_offset, num_docs_ * 8);
  bin_ = sys::MappedFile(bin_path);
  for (uint64_t i = 0; i < num_docs_; ++i) {
    const int32_t off = rows_[2 * i], cnt = rows_[2 * i + 1];
    const uint64_t at = data_offset + i * 8;
    LOOM_CHECK(off >= 0 && cnt >= 0, meta_path, ": document ", i, " (byte offset ", at, "): negative offset ", off,
               " or count ", cnt);
    LOOM_CHECK(i == 0 ? off == 0 : off > rows_[2 * (i - 1)], meta_path, ": offsets out of order: document ", i,
               " (byte offset ", at, ") starts at ", off, i == 0 ? ", expected 0" : ", not after the previous line");
    LOOM_CHECK(static_cast<uint64_t>(off) < bin_.size(), meta_path, ": offset past the end: document ", i,
               " (byte offset ", at, ") starts at byte ", off, " but ", bin_path, " has ", bin_.size(), " bytes");
    num_tokens_ += static_cast<uint64_t>(cnt);
  }
  LOOM_CHECK(bin_.size() > 0 && bin_.data()[bin_.size() - 1] == '\n', bin_path,
             ": truncated .bin: the last line has no newline");
}

void InternlmReader::read_doc(uint64_t i, std::vector<uint32_t>& out) const {
  LOOM_ASSERT(i < num_docs_, "document ", i, " of ", num_docs_);
  const char* base = reinterpret_cast<const char*>(bin_.data());
  const char* p = base + doc_offset(i);
  const char* end = base + (i + 1 < num_docs_ ? doc_offset(i + 1) : bin_.size());
  auto fail = [&](const char* what) {
    LOOM_FAIL(bin_path(), ": document ", i, " at byte offset ", p - base, ": ", what,
              " (expected a line {\"tokens\": [ids...]})");
  };
  static const char kPrefix[] = "{\"tokens\":";
  if (static_cast<size_t>(end - p) < sizeof(kPrefix) - 1 || std::memcmp(p, kPrefix, sizeof(kPrefix) - 1) != 0)
    fail("line does not start with {\"tokens\":");
  p = skip_ws(p + sizeof(kPrefix) - 1, end);
  if (p >= end || *p != '[') fail("expected '['");
  p = skip_ws(p + 1, end);
  const size_t before = out.size();
  if (p < end && *p == ']') {
    ++p;
  } else {
    for (;;) {
      if (p >= end || *p < '0' || *p > '9') fail("expected a token id");
      uint64_t v = 0;
      while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + static_cast<uint64_t>(*p++ - '0');
        if (v > 0xffffffffull) fail("token id does not fit 32 bits");
      }
      out.push_back(static_cast<uint32_t>(v));
      p = skip_ws(p, end);
      if (p < end && *p == ',') {
        p = skip_ws(p + 1, end);
        continue;
      }
      if (p < end && *p == ']') {
        ++p;
        break;
      }
      fail("expected ',' or ']'");
    }
  }
  p = skip_ws(p, end);
  if (p >= end || *p != '}') fail("expected '}'");
  p = skip_ws(p + 1, end);
  if (p + 1 != end || *p != '\n') fail("expected the line to end after '}'");
  const uint64_t got = out.size() - before;
  if (got != doc_len(i))
    LOOM_FAIL(bin_path(), ": document ", i, " at byte offset ", doc_offset(i), ": the line holds ", got,
              " tokens, the .meta says ", doc_len(i));
}

uint32_t InternlmReader::verify_doc(uint64_t i, uint32_t vocab_size, std::vector<uint32_t>& scratch) const {
  scratch.clear();
  read_doc(i, scratch);
  uint32_t mx = 0;
  for (size_t k = 0; k < scratch.size(); ++k) {
    if (vocab_size > 0 && scratch[k] >= vocab_size)
      LOOM_FAIL(bin_path(), ": token id ", scratch[k], " >= vocab size ", vocab_size, " in document ", i,
                " at byte offset ", doc_offset(i), " (token ", k, " of the line)");
    mx = scratch[k] > mx ? scratch[k] : mx;
  }
  return mx;
}

}  // namespace loom
