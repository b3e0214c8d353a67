// MinHash, the band keys and the signature file against minhash_ref.py, an independent Python
// implementation of the specification (minhash.h), on real text; Jaccard helpers on handmade sets.
#include <catch2/catch.hpp>

#include "fixtures.h"
#include "loom/dedup/minhash.h"

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
