// MinHash, the band keys and the signature file against minhash_ref.py, an independent Python
// implementation of the specification (minhash.h), on real text; Jaccard helpers on handmade sets.
#include <catch2/catch.hpp>

#include <random>

#include "fixtures.h"
#include "loom/dedup/minhash.h"
#include "loom/hash.h"

using namespace loom;
using namespace loom::test;

namespace {
void check_against_python(const std::string& params, const std::string& ref_args) {
  TempDir dir("dedup_minhash");
  Docs docs(botchan_docs().begin(), botchan_docs().begin() + 40);
  docs.push_back({1, 500, 2});  // shorter than n: one shingle of the whole document
  docs.push_back({});           // no shingle: all P, in the exact band only
  docs.push_back(docs[3]);
  write_shard(dir / "in/a.bin", docs);
  const RunResult r = loom_dedup("--stage signatures --work-dir " + quote(dir / "work") + " --output-dir " +
                                 quote(dir / "out") + " " + params + " " + quote(dir / "in/a.bin"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const RunResult py = run(python() + " " + quote(source_dir() + "/tests/dedup/minhash_ref.py") + " " +
                           quote(dir / "in/a.bin") + " " + quote(dir / "work") + " " + ref_args);
  INFO(py.output);
  CHECK(py.exit_code == 0);
  CHECK(py.output.rfind("ok 43 documents", 0) == 0);
}
}  // namespace

TEST_CASE("signatures and band keys equal the Python reference (FineWeb's defaults)", "[dedup][minhash]") {
  check_against_python("", "5 14 8 1");
}

TEST_CASE("signatures and band keys equal the Python reference (other n, bands, rows, seed)", "[dedup][minhash]") {
  check_against_python("--ngram 3 --bands 4 --rows 3 --seed 7", "3 4 3 7");
}

namespace {
__extension__ typedef unsigned __int128 u128;
constexpr uint64_t kP = dedup::kMersenne61;

// The definition in 128-bit arithmetic, one hash and shingle at a time.
std::vector<uint64_t> reference_minima(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b,
                                       const std::vector<uint64_t>& x) {
  std::vector<uint64_t> sig(a.size(), kP);
  for (size_t i = 0; i < a.size(); ++i)
    for (const uint64_t v : x)
      sig[i] = std::min(sig[i], static_cast<uint64_t>((static_cast<u128>(a[i]) * (v % kP) + b[i]) % kP));
  return sig;
}
}  // namespace

// shingles() takes a constant-length inline XXH64 for ngram < 8 and the generic one beyond: both
// against the definition, XXH64 (seed 0) of each window's 4 * ngram bytes, and of a short document.
TEST_CASE("shingles of every ngram equal the XXH64 of each window", "[dedup][minhash]") {
  std::mt19937_64 rng(99);
  std::vector<uint64_t> got;
  for (uint32_t ngram = 1; ngram <= 10; ++ngram) {
    for (size_t n = 0; n < 40; ++n) {
      std::vector<uint32_t> ids(n);
      for (auto& t : ids) t = static_cast<uint32_t>(rng());
      std::vector<uint64_t> want;
      if (n > 0 && n < ngram) want.push_back(xxh64(ids.data(), n * 4));
      for (size_t j = 0; j + ngram <= n; ++j) want.push_back(xxh64(ids.data() + j, ngram * 4));
      got.assign(3, 42);  // what a reused scratch held before: replaced
      dedup::shingles(ids.data(), n, ngram, got);
      INFO("ngram " << ngram << ", " << n << " ids");
      CHECK(got == want);
    }
  }
}

TEST_CASE("every compiled MinHash kernel equals 128-bit arithmetic, edge values and partial lane groups included",
          "[dedup][minhash]") {
  const auto& kernels = dedup::detail::min_kernels();
  REQUIRE(!kernels.empty());
  CHECK(std::string(kernels.back().name) == "baseline");
  CHECK(kernels.back().supported);
  CHECK(dedup::detail::best_min_kernel().supported);
  std::mt19937_64 rng(12345);
  // Shingles at the edges of x mod P and of the 32-bit limbs, then random ones.
  const uint64_t max = ~uint64_t{0}, two32 = uint64_t{1} << 32;
  std::vector<uint64_t> x{0, 1, kP - 1, kP, kP + 1, 2 * kP - 1, 2 * kP, 2 * kP + 1, max, max - 1, uint64_t{1} << 61,
                          (uint64_t{1} << 63) - 1, two32 - 1, two32, kP - two32, kP - 7, 7 * kP + 6};
  while (x.size() < 300) x.push_back(rng());
  for (const uint32_t h : {1u, 7u, 8u, 15u, 16u, 17u, 112u, 113u}) {
    // a_i in [1, P), b_i in [0, P): the extremes first, then random as MinHasher draws them.
    std::vector<uint64_t> a{kP - 1, 1, two32 - 1, two32, kP - two32, (uint64_t{1} << 60) + 12345};
    std::vector<uint64_t> b{kP - 1, 0, kP - 1, 1, 0, kP - 2};
    a.resize(h), b.resize(h);
    for (uint32_t i = std::min<uint32_t>(h, 6); i < h; ++i) a[i] = 1 + rng() % (kP - 1), b[i] = rng() % kP;
    for (const size_t n : {size_t{0}, size_t{1}, size_t{17}, x.size()}) {
      const std::vector<uint64_t> xs(x.begin(), x.begin() + n);
      const std::vector<uint64_t> want = reference_minima(a, b, xs);
      for (const auto& k : kernels) {
        if (!k.supported) {
          WARN("this CPU cannot run the " << k.name << " MinHash kernel: not tested");
          continue;
        }
        INFO("kernel " << k.name << ", " << h << " hashes, " << n << " shingles");
        std::vector<uint64_t> got(h + 1, 42);  // one past the end: must stay untouched
        k.run(a.data(), b.data(), h, xs.data(), n, got.data());
        CHECK(got[h] == 42);
        got.resize(h);
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("exact Jaccard of shingle sets and the estimate from signatures", "[dedup][minhash]") {
  std::vector<uint64_t> a{1, 2, 3, 4, 4}, b{3, 4, 5, 6};
  CHECK(dedup::exact_jaccard(a, b) == Approx(2.0 / 6.0).epsilon(0));  // {3,4} of {1..6}
  std::vector<uint64_t> c{7}, d{7};
  CHECK(dedup::exact_jaccard(c, d) == 1.0);
  const uint64_t s1[4] = {1, 2, 3, 4}, s2[4] = {1, 9, 3, 9};
  CHECK(dedup::estimated_jaccard(s1, s2, 4) == 0.5);
}

TEST_CASE("a near copy's estimated Jaccard is close to its exact one", "[dedup][minhash]") {
  const auto& doc = botchan_docs()[7];
  REQUIRE(doc.size() > 150);
  const auto copy = perturb(doc, 45);
  const double exact = jaccard5(doc, copy);
  dedup::MinHasher h(dedup::MinHashParams{});
  std::vector<uint64_t> sa(112), sb(112), scratch;
  h.signature(doc.data(), doc.size(), sa.data(), scratch);
  h.signature(copy.data(), copy.size(), sb.data(), scratch);
  // 112 hashes: the estimate's standard deviation is sqrt(J(1-J)/112), about 0.04 near 0.8.
  CHECK(std::abs(dedup::estimated_jaccard(sa.data(), sb.data(), 112) - exact) < 0.15);
}
