#include <catch2/catch.hpp>

#include "loom/error.h"
#include "loom/tokenize/byte_source.h"
#include "tok_test_util.h"

using namespace loom::tokenize;
using loom::test::quote;
using loom::test::TempDir;

namespace {
// Reads a source to the end in odd-sized reads.
std::string drain(ByteSource& s) {
  std::string out;
  char buf[4099];
  for (size_t n; (n = s.read(buf, sizeof(buf))) > 0;) out.append(buf, n);
  return out;
}
std::string drain(const std::string& path) { return drain(*open_byte_source(path)); }
}  // namespace

TEST_CASE("compression is chosen by the last extension", "[tokenize][bytes]") {
  CHECK(compression_for("a/b.jsonl.gz") == Compression::kGzip);
  CHECK(compression_for("b.txt.zst") == Compression::kZstd);
  CHECK(compression_for("b.txt.zstd") == Compression::kZstd);
  CHECK(compression_for("b.gz.txt") == Compression::kNone);
  CHECK(strip_compression_ext("d/x.json.zst") == "d/x.json");
  CHECK(strip_compression_ext("d/x.json") == "d/x.json");
}

TEST_CASE("gzip and zstd sources give back the plain bytes, multi-member and multi-frame too", "[tokenize][bytes]") {
  TempDir dir("tok_bytes");
  const std::string plain = loom::test::corpus("wagahaiwa_nekodearu.txt");
  const std::string want = loom::test::read_all(plain);
  // Python's gzip (two members back to back) and the zstd tool (two frames back to back).
  auto r = loom::test::python_code(dir, "import gzip\n"
                                        "d = open(" + quote(plain) + ", 'rb').read()\n"
                                        "open(" + quote(dir / "one.txt.gz") + ", 'wb').write(gzip.compress(d))\n"
                                        "h = len(d) // 3\n"
                                        "open(" + quote(dir / "two.txt.gz") + ", 'wb').write(gzip.compress(d[:h]) + gzip.compress(d[h:]))\n");
  REQUIRE(r.exit_code == 0);
  REQUIRE(loom::test::run("zstd -q " + quote(plain) + " -o " + quote(dir / "one.txt.zst")).exit_code == 0);
  REQUIRE(loom::test::run("head -c 100000 " + quote(plain) + " | zstd -q > " + quote(dir / "two.txt.zst") + " && tail -c +100001 " +
                          quote(plain) + " | zstd -q >> " + quote(dir / "two.txt.zst")).exit_code == 0);
  CHECK(drain(plain) == want);
  CHECK(drain(dir / "one.txt.gz") == want);
  CHECK(drain(dir / "two.txt.gz") == want);
  CHECK(drain(dir / "one.txt.zst") == want);
  CHECK(drain(dir / "two.txt.zst") == want);
}

TEST_CASE("truncated and corrupt compressed inputs are refused with the file name", "[tokenize][bytes]") {
  TempDir dir("tok_bytes_bad");
  const std::string plain = loom::test::corpus("botchan.txt");
  REQUIRE(loom::test::run("gzip -c " + quote(plain) + " | head -c 20000 > " + quote(dir / "cut.txt.gz")).exit_code == 0);
  REQUIRE(loom::test::run("zstd -q -c " + quote(plain) + " | head -c 20000 > " + quote(dir / "cut.txt.zst")).exit_code == 0);
  // Flip bytes inside the deflate data.
  std::string gz = loom::test::run("gzip -c " + quote(plain)).output;
  for (size_t i = 1000; i < 1100; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  loom::test::write_all(dir / "bad.txt.gz", gz);

  CHECK_THROWS_WITH(drain(dir / "cut.txt.gz"),
                    Catch::StartsWith(dir / "cut.txt.gz" + ": truncated gzip stream: the file ends at byte 20000"));
  CHECK_THROWS_WITH(drain(dir / "cut.txt.zst"),
                    Catch::StartsWith(dir / "cut.txt.zst" + ": truncated zstd stream: the file ends at byte 20000"));
  CHECK_THROWS_WITH(drain(dir / "bad.txt.gz"), Catch::StartsWith(dir / "bad.txt.gz" + ": corrupt gzip stream near compressed byte"));
  CHECK_THROWS_AS(drain(dir / "missing.txt"), loom::Error);
}
