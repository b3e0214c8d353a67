#include <catch2/catch.hpp>
#include <cstring>

#include "loom/tokenize/line_reader.h"
#include "loom/tokenize/text.h"

using namespace loom::tokenize;

namespace {
// Hands out its bytes `chunk` at a time, to put every boundary case at a buffer edge.
class DribbleSource : public ByteSource {
 public:
  DribbleSource(std::string data, size_t chunk) : data_(std::move(data)), chunk_(chunk) {}
  size_t read(void* buf, size_t n) override {
    const size_t k = std::min({n, chunk_, data_.size() - pos_});
    std::memcpy(buf, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  uint64_t file_bytes_read() const override { return pos_; }
  const std::string& path() const override { return name_; }

 private:
  std::string data_, name_ = "dribble";
  size_t chunk_, pos_ = 0;
};

struct Got {
  std::vector<std::string> text;
  std::vector<uint64_t> number, offset;
  std::vector<bool> newline;
};

Got read_all_lines(const std::string& data, size_t chunk) {
  LineReader r(std::make_unique<DribbleSource>(data, chunk));
  Got g;
  Line line;
  while (r.next(line)) {
    g.text.emplace_back(line.text);
    g.number.push_back(line.number);
    g.offset.push_back(line.offset);
    g.newline.push_back(line.had_newline);
  }
  return g;
}
}  // namespace

TEST_CASE("LineReader splits on LF, CRLF and a lone CR like Python's universal newlines", "[tokenize][lines]") {
  for (size_t chunk : {1, 2, 3, 7, 1 << 20}) {
    const Got g = read_all_lines("a\r\nb\rc\n\nd", chunk);
    CHECK(g.text == std::vector<std::string>{"a", "b", "c", "", "d"});
    CHECK(g.number == std::vector<uint64_t>{1, 2, 3, 4, 5});
    CHECK(g.offset == std::vector<uint64_t>{0, 3, 5, 7, 8});
    CHECK(g.newline == std::vector<bool>{true, true, true, true, false});
  }
  CHECK(read_all_lines("", 3).text.empty());
  CHECK(read_all_lines("x\r", 1).text == std::vector<std::string>{"x"});
  CHECK(read_all_lines("\r\n\r\n", 1).text == std::vector<std::string>{"", ""});
}

TEST_CASE("LineReader keeps a line longer than its buffer whole", "[tokenize][lines]") {
  const std::string big(3 << 20, 'x');
  const Got g = read_all_lines("head\n" + big + "\r\ntail", 1 << 16);
  REQUIRE(g.text.size() == 3);
  CHECK(g.text[1] == big);
  CHECK(g.offset[2] == 5 + big.size() + 2);
  CHECK(g.text[2] == "tail");
}

TEST_CASE("LineReader::next_block cuts whole lines that for_each_line splits as next() does", "[tokenize][lines]") {
  // Every line ending at every block and buffer edge: LF, CRLF, lone CR, CR at the end, long lines.
  const std::string data = "a\r\nb\rc\n\nd\r\r\n\rxyz\r" + std::string(300, 'L') + "\n\r\n" + std::string(70, 'M') + "\r";
  for (const std::string& d : {data, data + "tail", std::string("\r"), std::string("\n"), std::string("")}) {
    const Got want = read_all_lines(d, 1 << 20);
    for (size_t chunk : {1, 2, 3, 7, 1 << 20}) {
      for (size_t min_bytes : {1, 2, 5, 64, 1 << 20}) {
        LineReader r(std::make_unique<DribbleSource>(d, chunk));
        Got g;
        std::string block;
        uint64_t offset = 0, expect_offset = 0;
        while (r.next_block(block, offset, min_bytes)) {
          CHECK(offset == expect_offset);
          CHECK(!block.empty());
          for_each_line(block, [&](std::string_view text, size_t at, bool newline) {
            g.text.emplace_back(text);
            g.number.push_back(g.number.size() + 1);
            g.offset.push_back(offset + at);
            g.newline.push_back(newline);
          });
          expect_offset += block.size();
        }
        CHECK(expect_offset == d.size());
        CHECK(g.text == want.text);
        CHECK(g.number == want.number);
        CHECK(g.offset == want.offset);
        CHECK(g.newline == want.newline);
      }
    }
  }
}

TEST_CASE("LineReader::next_block at blank lines cuts only after a blank line, never inside a paragraph",
          "[tokenize][lines]") {
  // Blank lines of every kind (empty, ASCII and Unicode whitespace, every line ending, a CR at a
  // buffer edge), lines that look blank and are not (an overlong U+0085, a lone continuation byte,
  // a truncated sequence), a paragraph and a line longer than a read.
  const std::string data = "\n \r\n\ta\r\n\r\rb\r\x0c\xe3\x80\x80\x1c\n\xc2\x85\rc\r\n\xe0\x82\x85\nd\n\x80\n\n\xe3\x80\re\r" +
                           std::string(70000, 'P') + "\nf\r\n" + std::string(100, 'Q') + "\n\xe2\x80\xa8\r\n\r\ng";
  for (const std::string& d : {data, data + "\r\n", data + "\n\n", std::string("\r"), std::string("\n\n"),
                               std::string("x"), std::string("")}) {
    const Got want = read_all_lines(d, 1 << 20);
    for (size_t chunk : {1, 2, 3, 7, 1 << 20}) {
      for (size_t min_bytes : {1, 2, 5, 64, 1 << 20}) {
        INFO("chunk " << chunk << " min_bytes " << min_bytes << " size " << d.size());
        LineReader r(std::make_unique<DribbleSource>(d, chunk));
        Got g;
        std::string block;
        uint64_t offset = 0, expect_offset = 0;
        while (r.next_block(block, offset, min_bytes, LineReader::CutAt::kBlankLine)) {
          CHECK(offset == expect_offset);
          CHECK(!block.empty());
          bool last_blank = false, last_newline = false;
          for_each_line(block, [&](std::string_view text, size_t at, bool newline) {
            g.text.emplace_back(text);
            g.number.push_back(g.number.size() + 1);
            g.offset.push_back(offset + at);
            g.newline.push_back(newline);
            last_blank = is_blank_line(text);
            last_newline = newline;
          });
          expect_offset += block.size();
          // Only the end of the input cuts elsewhere than after a blank line.
          if (expect_offset < d.size()) CHECK((last_blank && last_newline));
        }
        CHECK(expect_offset == d.size());
        CHECK(g.text == want.text);
        CHECK(g.number == want.number);
        CHECK(g.offset == want.offset);
        CHECK(g.newline == want.newline);
      }
    }
  }
}
