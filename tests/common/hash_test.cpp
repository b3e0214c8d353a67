#include <catch2/catch.hpp>
#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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

// The inline short path against the generic digest (itself checked against python3-xxhash above):
// every length it serves, random bytes at every alignment, seeds 0, 1 and random.
TEST_CASE("xxh64_short equals xxh64 on every length below 32") {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(64);
  for (size_t n = 0; n < 32; ++n) {
    for (int trial = 0; trial < 200; ++trial) {
      for (auto& b : data) b = static_cast<uint8_t>(rng());
      const size_t at = trial % 8;
      for (const uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{rng()}}) {
        INFO("length " << n << ", offset " << at << ", seed " << seed);
        REQUIRE(xxh64_short(data.data() + at, n, seed) == xxh64(data.data() + at, n, seed));
      }
    }
  }
}

TEST_CASE("hex64 prints 16 lowercase digits") {
  CHECK(hex64(0) == "0000000000000000");
  CHECK(hex64(0xdeadbeefULL) == "00000000deadbeef");
  CHECK(hex64(~0ULL) == "ffffffffffffffff");
}
