#include <catch2/catch.hpp>
#include <algorithm>
#include <sstream>
#include <string>

#include "loom/hash.h"
#include "test_util.h"

using namespace loom;

// Golden values from an independent implementation: Debian's python3-xxhash,
// xxhash.xxh64(data).intdigest(), computed by the test itself over the same bytes.
TEST_CASE("xxh64 equals python3-xxhash on every length class and streaming split") {
  test::TempDir dir("hash");
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>((i * 131 + 7) % 251));
  test::write_all(dir / "data", data);
  const int lengths[] = {0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 100, 999, 1000};
  std::string script = "import xxhash,sys\nd=open(sys.argv[1],'rb').read()\n";
  script += "for n in [0,1,3,4,7,8,31,32,33,63,64,100,999,1000]: print(xxhash.xxh64(d[:n]).intdigest())\n";
  test::write_all(dir / "ref.py", script);
  auto r = test::run(test::python() + " " + test::quote(dir / "ref.py") + " " + test::quote(dir / "data"));
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.output);
  for (int n : lengths) {
    uint64_t want;
    lines >> want;
    CHECK(xxh64(data.data(), n) == want);
    // Streaming in uneven pieces gives the same digest.
    Xxh64 h;
    for (int at = 0; at < n;) {
      int step = std::min(n - at, 1 + at % 13);
      h.update(data.data() + at, step);
      at += step;
    }
    CHECK(h.digest() == want);
  }
}

TEST_CASE("hex64 prints 16 lowercase digits") {
  CHECK(hex64(0) == "0000000000000000");
  CHECK(hex64(0xdeadbeefULL) == "00000000deadbeef");
  CHECK(hex64(~0ULL) == "ffffffffffffffff");
}
