// The distributed sampler and the train Loader on predictable data: every token of a pack holds
// the pack's global index (token = global position / T), so each row says which pack it came from.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>

#include "loader.h"
#include "loom/error.h"
#include "loom/sys.h"
#include "sampler.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kVocab = 1u << 20;  // uint32 shards: ids up to ~1M, enough for positions

// Writes dataset folders under root: dataset d gets shards of packs_per_shard[d][s] packs, each of
// T tokens with id = global position (global over all datasets, in sorted dataset order) and one
// segment covering the pack. Returns the global pack index of each dataset's first pack.
std::vector<uint64_t> write_predictable(const std::string& root, int64_t T,
                                        const std::vector<std::pair<std::string, std::vector<uint64_t>>>& datasets) {
  std::vector<uint64_t> first;
  uint64_t global = 0;
  TokenizerInfo info;
  info.vocab_size = kVocab;
  for (const auto& [name, shards] : datasets) {
    first.push_back(global);
    sys::make_dirs(root + "/" + name);
    for (size_t s = 0; s < shards.size(); ++s) {
      PackedWriter w(root + "/" + name + "/part" + std::to_string(s) + ".bin", info, static_cast<uint32_t>(T),
                     PackStrategy::kConcat, 0);
      for (uint64_t p = 0; p < shards[s]; ++p, ++global) {
        std::vector<uint32_t> tok(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) tok[static_cast<size_t>(t)] = static_cast<uint32_t>(global * T + t);
        PackedSegment seg{p, 0, static_cast<uint32_t>(T), 0, kSegEndsDoc};
        w.add_pack(tok, {seg});
      }
      w.commit(shards[s]);
    }
  }
  return first;
}

DataOptions options(const std::string& folder, int64_t T, int64_t B, int64_t M) {
  DataOptions o;
  o.train_folder = folder;
  o.seq_len = T;
  o.micro_bsz = B;
  o.micro_num = M;
  o.seed = 7;
  return o;
}

// The global pack indices of `steps` steps as seen by all W ranks together (rank-major, then
// micro-step, then row: the documented layout), checking each row is one whole pack.
std::vector<uint64_t> run_steps(const TrainData& data, const DataOptions& opt, int64_t world, int64_t steps,
                                const SamplerState* resume = nullptr, SamplerState* end = nullptr) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int64_t r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<Loader>(data, opt, r, world));
    if (resume) ranks.back()->restore(*resume);
  }
  std::vector<uint64_t> seen;
  const int64_t T = opt.seq_len;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t r = 0; r < world; ++r) {
      for (int64_t m = 0; m < opt.micro_num; ++m) {
        Batch b = ranks[static_cast<size_t>(r)]->next();
        REQUIRE(b.tokens.sizes() == torch::IntArrayRef({opt.micro_bsz, T}));
        for (int64_t i = 0; i < opt.micro_bsz; ++i) {
          const int64_t first = b.tokens[i][0].item<int64_t>();
          REQUIRE(first % T == 0);
          // The whole row is that pack's consecutive positions.
          REQUIRE(torch::equal(b.tokens[i], torch::arange(first, first + T, torch::kInt64)));
          seen.push_back(static_cast<uint64_t>(first / T));
        }
      }
    }
  }
  for (auto& l : ranks) REQUIRE(l->state().consumed_samples == ranks.front()->state().consumed_samples);
  if (end) *end = ranks.front()->state();
  return seen;
}

}  // namespace

TEST_CASE("permutation visits every index exactly once") {
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 7ull, 16ull, 17ull, 100ull, 255ull, 256ull, 257ull, 1000ull, 4099ull}) {
    for (uint64_t key : {0ull, 1ull, 0xDEADBEEFull}) {
      Permutation p(n, key);
      std::vector<uint8_t> hit(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t v = p.at(i);
        REQUIRE(v < n);
        REQUIRE(hit[v] == 0);
        hit[v] = 1;
      }
    }
  }
  // Different keys give different orders (a shuffle, not the identity).
  std::vector<uint64_t> a, b, id;
  for (uint64_t i = 0; i < 1000; ++i) {
    a.push_back(Permutation(1000, 1).at(i));
    b.push_back(Permutation(1000, 2).at(i));
    id.push_back(i);
  }
  CHECK(a != b);
  CHECK(a != id);
}

TEST_CASE("sampler order matches an independent Python implementation of the documented algorithm") {
  // Datasets of 5, 3 and 4 packs with weights 1, 2 and 0.5: N = 5 + 6 + 2 = 13.
  Sampler s({5, 3, 4}, {1.0, 2.0, 0.5}, 1234);
  REQUIRE(s.epoch_size() == 13);
  std::ostringstream got;
  for (uint64_t e = 0; e < 3; ++e)
    for (uint64_t i = 0; i < s.epoch_size(); ++i) {
      const SampleRef r = s.at(e, i);
      got << r.dataset << ":" << r.pack << " ";
    }
  // The reference follows the words of sampler.h, written in Python with its own integers.
  const std::string script = R"PY(
import math
M = (1 << 64) - 1
def mix(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def key(seed, tag, epoch, d):
    return mix(mix(mix(mix(seed) ^ tag) ^ epoch) ^ d)
def perm(n, k, i):
    bits = 2
    while bits < 64 and (1 << bits) < n: bits += 2
    h = bits // 2; mask = (1 << h) - 1
    def enc(x):
        l, r = x >> h, x & mask
        for rnd in range(6):
            f = mix(((k + rnd * 0x9E3779B97F4A7C15) & M) ^ r) & mask
            l, r = r, l ^ f
        return (l << h) | r
    y = enc(i)
    while y >= n: y = enc(y)
    return y
packs, weights, seed = [5, 3, 4], [1.0, 2.0, 0.5], 1234
counts = [int(math.floor(w)) * n + min(n, int(math.floor((w - math.floor(w)) * n + 0.5))) for n, w in zip(packs, weights)]
N = sum(counts); out = []
for e in range(3):
    for i in range(N):
        slot = perm(N, key(seed, 1, e, 0), i)
        d = 0
        while slot >= counts[d]: slot -= counts[d]; d += 1
        whole = int(math.floor(weights[d])) * packs[d]
        p = slot % packs[d] if slot < whole else perm(packs[d], key(seed, 2, e, d), slot - whole)
        out.append("%d:%d " % (d, p))
print("".join(out), end="")
)PY";
  test::TempDir dir("sampler_ref");
  test::write_all(dir / "ref.py", script);
  const test::RunResult r = test::run(test::python() + " " + test::quote(dir / "ref.py"));
  REQUIRE(r.exit_code == 0);
  CHECK(got.str() == r.output);
}

TEST_CASE("weights repeat packs, take seeded subsets, or drop a dataset") {
  CHECK(weighted_count(10, 1.0) == 10);
  CHECK(weighted_count(10, 2.0) == 20);
  CHECK(weighted_count(10, 0.0) == 0);
  CHECK(weighted_count(7, 0.5) == 4);   // 3.5 rounds half up
  CHECK(weighted_count(7, 1.25) == 9);  // 7 + round(1.75)
  CHECK_THROWS_WITH(weighted_count(7, -1.0), Contains("dataset weight -1 must be a finite number >= 0"));

  Sampler s({6, 4, 7, 3}, {1.0, 2.0, 0.5, 0.0}, 99);
  REQUIRE(s.epoch_size() == 6 + 8 + 4);
  std::set<std::vector<uint64_t>> subsets;
  for (uint64_t e = 0; e < 8; ++e) {
    std::map<std::pair<uint32_t, uint64_t>, int> count;
    for (uint64_t i = 0; i < s.epoch_size(); ++i) ++count[{s.at(e, i).dataset, s.at(e, i).pack}];
    std::vector<uint64_t> half;
    for (uint64_t p = 0; p < 6; ++p) CHECK(count[{0, p}] == 1);
    for (uint64_t p = 0; p < 4; ++p) CHECK(count[{1, p}] == 2);
    for (uint64_t p = 0; p < 7; ++p) {
      CHECK(count[{2, p}] <= 1);
      if (count[{2, p}]) half.push_back(p);
    }
    CHECK(half.size() == 4);
    for (uint64_t p = 0; p < 3; ++p) CHECK(count.count({3, p}) == 0);
    subsets.insert(half);
  }
  CHECK(subsets.size() > 1);  // the subset is drawn afresh per epoch
}

TEST_CASE("sampler epochs are permutations that change with the epoch and the seed") {
  Sampler a({10, 14}, {1.0, 1.0}, 5), b({10, 14}, {1.0, 1.0}, 6);
  std::vector<std::vector<uint64_t>> orders;
  for (const Sampler* s : {&a, &b})
    for (uint64_t e = 0; e < 2; ++e) {
      std::vector<uint64_t> order;
      std::set<uint64_t> seen;
      for (uint64_t i = 0; i < 24; ++i) {
        const SampleRef r = s->at(e, i);
        order.push_back(r.dataset * 100 + r.pack);
        seen.insert(order.back());
      }
      CHECK(seen.size() == 24);
      CHECK(s->at(e * 24 + 3) == s->at(e, 3));  // the stream is epochs back to back
      orders.push_back(order);
    }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[0] != orders[2]);
  CHECK(Sampler({10, 14}, {1.0, 1.0}, 5).at(1, 7) == a.at(1, 7));
  CHECK_THROWS_WITH(Sampler({3}, {0.0}, 1), Contains("the sampler has no samples"));
}

TEST_CASE("every pack is seen exactly once per epoch and the order is the same for W 1 2 3") {
  test::TempDir dir("sampler_w");
  const int64_t T = 4;
  // 24 packs over 2 datasets and 3 shards: one epoch is 6, 3 and 2 steps at W = 1, 2, 3 (G = 4, 8, 12).
  write_predictable(dir.path(), T, {{"a", {5, 9}}, {"b", {10}}});
  const DataOptions opt = options(dir.path(), T, 2, 2);
  TrainData data(opt);
  REQUIRE(data.epoch_samples() == 24);

  std::vector<uint64_t> reference;
  for (int64_t w = 1; w <= 3; ++w) {
    SamplerState end;
    const std::vector<uint64_t> seen = run_steps(data, opt, w, 12 / w, nullptr, &end);  // two epochs: 48 samples
    REQUIRE(seen.size() == 48);
    CHECK(end.consumed_samples == 48);
    CHECK(end.epoch == 2);
    CHECK(end.seed == 7);
    for (int e = 0; e < 2; ++e) {
      std::set<uint64_t> epoch(seen.begin() + e * 24, seen.begin() + (e + 1) * 24);
      CHECK(epoch.size() == 24);
      CHECK(*epoch.rbegin() == 23);
    }
    CHECK(std::vector<uint64_t>(seen.begin(), seen.begin() + 24) != std::vector<uint64_t>(seen.begin() + 24, seen.end()));
    if (w == 1) reference = seen;
    else CHECK(seen == reference);
  }
}

TEST_CASE("a global batch that straddles an epoch boundary takes the next epoch's start") {
  test::TempDir dir("sampler_straddle");
  const int64_t T = 2;
  write_predictable(dir.path(), T, {{"only", {10}}});
  const DataOptions opt = options(dir.path() + "/only", T, 2, 1);  // shards directly: one dataset
  TrainData data(opt);
  const std::vector<uint64_t> seen = run_steps(data, opt, 2, 5);  // G = 4: 20 samples = 2 epochs
  REQUIRE(seen.size() == 20);
  CHECK(std::set<uint64_t>(seen.begin(), seen.begin() + 10).size() == 10);
  CHECK(std::set<uint64_t>(seen.begin() + 10, seen.end()).size() == 10);
  Sampler s(data.packs_per_dataset(), data.weights(), 7);
  for (uint64_t i = 0; i < 20; ++i) CHECK(seen[i] == s.at(i).pack);
}

TEST_CASE("resume at W 2 then W 1 then W 3 continues the same sequence") {
  test::TempDir dir("sampler_resume");
  const int64_t T = 3;
  write_predictable(dir.path(), T, {{"x", {7}}, {"y", {6, 4}}});  // 17 packs: epochs do not align with steps
  DataOptions opt = options(dir.path(), T, 1, 2);
  TrainData data(opt);
  const std::vector<uint64_t> whole = run_steps(data, opt, 1, 30);  // 60 samples, 3.5 epochs

  SamplerState s1, s2;
  std::vector<uint64_t> pieces = run_steps(data, opt, 2, 7, nullptr, &s1);  // 28 samples
  CHECK(s1.consumed_samples == 28);
  CHECK(s1.epoch == 1);
  const std::vector<uint64_t> p2 = run_steps(data, opt, 1, 4, &s1, &s2);  // 8 samples
  CHECK(s2.consumed_samples == 36);
  pieces.insert(pieces.end(), p2.begin(), p2.end());
  const std::vector<uint64_t> p3 = run_steps(data, opt, 3, 4, &s2);  // 24 samples
  pieces.insert(pieces.end(), p3.begin(), p3.end());
  CHECK(pieces == whole);
}

TEST_CASE("restore takes the checkpoint's seed over data.seed") {
  test::TempDir dir("sampler_seed");
  const int64_t T = 2;
  write_predictable(dir.path(), T, {{"x", {9}}});
  DataOptions opt = options(dir.path(), T, 1, 1);
  TrainData data(opt);
  const std::vector<uint64_t> seven = run_steps(data, opt, 1, 9);
  opt.seed = 8;
  SamplerState from_seven{7, 0, 3};
  const std::vector<uint64_t> resumed = run_steps(data, opt, 1, 6, &from_seven);
  CHECK(resumed == std::vector<uint64_t>(seven.begin() + 3, seven.end()));
  const std::vector<uint64_t> eight = run_steps(data, opt, 1, 9);
  CHECK(eight != seven);
}

TEST_CASE("prefetching does not change the batches and restore drops what was prefetched") {
  test::TempDir dir("sampler_prefetch");
  const int64_t T = 5;
  write_predictable(dir.path(), T, {{"x", {8}}, {"y", {5}}});
  DataOptions opt = options(dir.path(), T, 3, 2);
  TrainData data(opt);
  opt.prefetch = 0;
  const std::vector<uint64_t> sync = run_steps(data, opt, 1, 6);
  opt.prefetch = 3;
  const std::vector<uint64_t> async = run_steps(data, opt, 1, 6);
  CHECK(sync == async);

  Loader l(data, opt, 0, 1);
  for (int i = 0; i < 4; ++i) l.next();  // two steps; the thread has built more by now
  const SamplerState at2 = l.state();
  CHECK(at2.consumed_samples == 12);
  l.restore({7, 0, 6});  // back to step 1
  const Batch b = l.next();
  CHECK(b.tokens[0][0].item<int64_t>() / T == static_cast<int64_t>(sync[6]));
  l.next();
  CHECK(l.state().consumed_samples == 12);
}

TEST_CASE("a corrupt token id is reported through the prefetch thread with file pack and offset") {
  test::TempDir dir("sampler_corrupt");
  const int64_t T = 4;
  write_predictable(dir.path(), T, {{"x", {3}}});
  // Pack 1, position 2 (byte offset (1*4+2)*4 = 24) := 0xFFFFFFFF, past the vocab.
  const std::string bin = dir.path() + "/x/part0.bin";
  std::string bytes = test::read_all(bin);
  bytes[24] = bytes[25] = bytes[26] = bytes[27] = '\xff';
  test::write_all(bin, bytes);
  DataOptions opt = options(dir.path(), T, 3, 1);
  opt.verify_checksums = false;
  TrainData data(opt);  // the header and index are intact; only the ids are checked per batch
  Loader l(data, opt, 0, 1);
  CHECK_THROWS_WITH(l.next(), Contains(bin + ": token id 4294967295 >= vocab size 1048576 in pack 1 at byte offset 24"));

  opt.verify_checksums = true;
  CHECK_THROWS_WITH(TrainData(opt), Contains(bin + ": token id 4294967295 >= vocab size 1048576 in pack 1"));
}

TEST_CASE("skip_batches follows InternLM's BatchSkipper") {
  BatchSkipper none("");
  for (int64_t s = 0; s < 5; ++s) CHECK_FALSE(none.should_skip(s));
  BatchSkipper k("1-3,5,9-9");
  const std::vector<bool> want{false, true, true, true, false, true, false, false, false, true, false};
  for (int64_t s = 0; s < static_cast<int64_t>(want.size()); ++s) CHECK(k.should_skip(s) == want[static_cast<size_t>(s)]);
  CHECK(k.ranges() == std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {5, 5}, {9, 9}});
  CHECK_THROWS_WITH(BatchSkipper("3-1"), Contains("data.skip_batches: range '3-1' in \"3-1\" ends before it starts"));
  CHECK_THROWS_WITH(BatchSkipper("5,2"), Contains("data.skip_batches: '2' in \"5,2\" overlaps or precedes the range before it"));
  CHECK_THROWS_WITH(BatchSkipper("1-4,4"), Contains("'4' in \"1-4,4\" overlaps or precedes"));
  CHECK_THROWS_WITH(BatchSkipper("a"), Contains("data.skip_batches: 'a' in \"a\": expected a step number >= 0"));
  CHECK_THROWS_WITH(BatchSkipper("2-"), Contains("data.skip_batches: '' in \"2-\": expected a step number >= 0"));
  CHECK_THROWS_WITH(BatchSkipper("-2"), Contains("data.skip_batches: '' in \"-2\": expected a step number >= 0"));
  CHECK_THROWS_WITH(BatchSkipper("1,,3"), Contains("data.skip_batches: '' in \"1,,3\""));

  // The loader consumes a skipped step's data like any other: should_skip is for the loop.
  test::TempDir dir("sampler_skip");
  write_predictable(dir.path(), 2, {{"x", {4}}});
  DataOptions opt = options(dir.path(), 2, 1, 1);
  opt.skip_batches = "1";
  TrainData data(opt);
  Loader l(data, opt, 0, 1);
  CHECK(l.should_skip(1));
  CHECK_FALSE(l.should_skip(0));
}
