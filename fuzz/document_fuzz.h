// The document readers' fuzz driver: the input's first byte picks the reader options and how many
// bytes each read() returns (to put records across buffer edges), the rest is the file's content.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "loom/tokenize/byte_source.h"
#include "loom/tokenize/document_reader.h"
#include "loom/tokenize/line_reader.h"

namespace loom::fuzz {

class MemorySource : public tokenize::ByteSource {
 public:
  MemorySource(std::string_view data, size_t chunk) : data_(data), chunk_(chunk) {}
  size_t read(void* buf, size_t n) override {
    const size_t k = std::min({n, chunk_, data_.size() - pos_});
    std::memcpy(buf, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  uint64_t file_bytes_read() const override { return pos_; }
  const std::string& path() const override { return name_; }

 private:
  std::string_view data_;
  std::string name_ = "fuzz-input";
  size_t chunk_, pos_ = 0;
};

// Option byte: bits 0-1 the txt document mode (line, paragraph, file), bit 2 raw records, bit 3
// text_key "meta.body" instead of "text", bits 4-7 the chunk size (0: whole reads, else 2^k - 1).
template <typename MakeReader>
void drain_documents(const uint8_t* data, size_t size, MakeReader&& make) {
  if (size < 1) return;
  const uint8_t opt = data[0];
  tokenize::ReaderOptions o;
  o.txt_doc = static_cast<tokenize::TxtDoc>((opt & 3) % 3);
  o.raw_records = (opt & 4) != 0;
  o.text_key = (opt & 8) ? "meta.body" : "text";
  const unsigned k = opt >> 4;
  const size_t chunk = k == 0 ? size : (size_t{1} << k) - 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<tokenize::Document> docs;
  bool complete = false;  // next() read the whole input (else there is nothing to compare with)
  expect_only_loom_errors([&] {
    auto reader = make(std::make_unique<MemorySource>(body, chunk), o);
    tokenize::Document doc;
    uint64_t last_offset = 0;
    while (reader->next(doc)) {
      // Documents come in file order, inside the file, and each carries text or an error.
      LOOM_ASSERT(doc.offset <= body.size() && doc.offset >= last_offset, "document offset ", doc.offset,
                  " after ", last_offset, " in ", body.size(), " bytes");
      LOOM_ASSERT(doc.error.empty() || doc.text.empty(), "a bad record with text");
      last_offset = doc.offset;
      docs.push_back(doc);
    }
    complete = true;
  });
  if (!complete) return;
  // Line readers: the blocks the pipeline's encoder threads parse give the same documents, lines
  // and offsets as next() (blocks of at least 2^(k/2) bytes, so lines and paragraphs meet block
  // edges too).
  expect_only_loom_errors([&] {
    auto reader = make(std::make_unique<MemorySource>(body, chunk), o);
    auto parser = reader->make_line_parser();
    if (!parser) return;
    tokenize::LineBlock block;
    tokenize::Document doc;
    size_t i = 0;
    uint64_t lines_before = 0;  // lines of the blocks before this one: the parser numbers within a block
    while (reader->next_block(block, size_t{1} << (k / 2))) {
      uint64_t in_block = 0;
      const auto take = [&] {
        LOOM_ASSERT(i < docs.size(), "blocks give more documents than next(): ", docs.size());
        const tokenize::Document& want = docs[i++];
        LOOM_ASSERT(want.line == lines_before + doc.line && want.offset == doc.offset && want.text == doc.text &&
                        want.error == doc.error,
                    "document ", i - 1, ": next() line ", want.line, " offset ", want.offset, ", blocks line ",
                    lines_before + doc.line, " offset ", doc.offset);
      };
      // As the pipeline's encoder threads parse a block: each line, then the paragraph left open.
      tokenize::for_each_line(block.bytes, [&](std::string_view line, size_t at, bool had_newline) {
        ++in_block;
        if (parser->parse(line, had_newline, block.offset + at, in_block, doc)) take();
      });
      if (parser->finish(doc)) take();
      lines_before += in_block;
    }
    LOOM_ASSERT(i == docs.size(), "blocks give ", i, " documents, next() ", docs.size());
  });
}

}  // namespace loom::fuzz
