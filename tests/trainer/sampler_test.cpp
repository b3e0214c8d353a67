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

// sampler.h's mixing function and keyed permutation, in Python with its own integers: the prelude
// of the independent references below.
const char* const kSamplerPy = R"PY(
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
)PY";

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
  const std::string script = std::string(kSamplerPy) + R"PY(
import math
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

// ---- The proportional mixture (Megatron-LM's blend): weights are shares of every batch ----

TEST_CASE("proportional mixture: cycle, order and packs match an independent Python implementation") {
  // Shares 3:1:2 of datasets of 5, 3 and 4 packs: L = 6 (3 + 1 + 2), and each dataset's own epochs.
  Sampler s({5, 3, 4}, {1.5, 0.5, 1.0}, 1234, Mixture::kProportional);
  REQUIRE(s.epoch_size() == 6);
  std::ostringstream got;
  for (uint64_t i = 0; i < 60; ++i) got << s.at(i).dataset << ":" << s.at(i).pack << " ";
  // The reference follows the words of sampler.h, written in Python with its own integers.
  const std::string script = std::string(kSamplerPy) + R"PY(
packs, weights, seed = [5, 3, 4], [1.5, 0.5, 1.0], 1234
total = sum(weights)
L = next(l for l in range(1, 65537) if all(abs(w / total * l - round(w / total * l)) <= 1e-9 * max(1.0, w / total * l) for w in weights))
q = [round(w / total * L) for w in weights]
order, c = [], [0] * len(q)
for j in range(L):
    d = max(range(len(q)), key=lambda d: (q[d] * (j + 1) - L * c[d], -d))
    order.append((d, c[d])); c[d] += 1
out = []
for s in range(60):
    d, before = order[s % L]
    k = (s // L) * q[d] + before
    out.append("%d:%d " % (d, perm(packs[d], key(seed, 3, k // packs[d], d), k % packs[d])))
print("".join(out), end="")
)PY";
  test::TempDir dir("sampler_blend_ref");
  test::write_all(dir / "ref.py", script);
  const test::RunResult r = test::run(test::python() + " " + test::quote(dir / "ref.py"));
  REQUIRE(r.exit_code == 0);
  CHECK(got.str() == r.output);
}

TEST_CASE("proportional mixture: the cycle is the smallest exact one, else 2^16 by largest remainder") {
  const BlendCycle three_one({3.0, 1.0});
  CHECK(three_one.quota == std::vector<uint64_t>{3, 1});
  // Largest deficit first, ties to the lower dataset: a a b a.
  CHECK(three_one.dataset == std::vector<uint32_t>{0, 0, 1, 0});
  CHECK(three_one.before == std::vector<uint32_t>{0, 1, 0, 2});
  CHECK(BlendCycle({0.3, 0.7}).quota == std::vector<uint64_t>{3, 7});
  CHECK(BlendCycle({2.0, 0.0, 2.0}).quota == std::vector<uint64_t>{1, 0, 1});
  // Shares of 1/3 are whole at L = 3 (never 2^16, where they are not).
  CHECK(BlendCycle({1.0, 1.0, 1.0}).quota == std::vector<uint64_t>{1, 1, 1});
  const BlendCycle odd({0.1234567891, 1.0});
  REQUIRE(odd.length() == 65536);
  const double p = 0.1234567891 / 1.1234567891 * 65536;
  CHECK(odd.quota[0] + odd.quota[1] == 65536);
  CHECK(std::abs(static_cast<double>(odd.quota[0]) - p) < 1.0);
  CHECK_THROWS_WITH(BlendCycle({1.0, 1e-7}), Contains("is a share below 1/65536"));
  CHECK_THROWS_WITH(BlendCycle({0.0, 0.0}), Contains("every dataset has weight 0"));
  CHECK_THROWS_WITH(Sampler({4, 0}, {1.0, 1.0}, 1, Mixture::kProportional), Contains("dataset 1 has weight 1 but no packs"));
  CHECK(parse_mixture("proportional") == Mixture::kProportional);
  CHECK(parse_mixture("scaled") == Mixture::kScaled);
  CHECK_THROWS_WITH(parse_mixture("blend"), Contains("data.mixture 'blend': expected scaled"));
}

TEST_CASE("proportional 3:1: every global batch holds exactly 3/4 and 1/4 at W 1 2 4, and resumes at another W") {
  test::TempDir dir("sampler_blend");
  const int64_t T = 2;
  // "big" is 40 packs, "small" 3: sizes unlike the shares, so the shares come from the weights alone.
  const std::vector<uint64_t> first = write_predictable(dir.path(), T, {{"big", {25, 15}}, {"small", {3}}});
  DataOptions opt = options(dir.path(), T, 2, 2);
  opt.dataset_weights = "big:3,small:1";
  opt.mixture = "proportional";
  const TrainData data(opt);
  REQUIRE(data.mixture() == Mixture::kProportional);
  CHECK(data.shares() == std::vector<double>{0.75, 0.25});
  DataOptions tiny = opt;
  tiny.dataset_weights = "big:1,small:0.000001";
  CHECK_THROWS_WITH(TrainData(tiny), "data.dataset_weights \"big:1,small:0.000001\" with data.mixture=proportional: "
                                     "dataset weight 1e-06 of 1 is a share below 1/65536, the proportional mixture's "
                                     "resolution");
  const auto dataset_of = [&](uint64_t global) { return global >= first[1] ? 1 : 0; };

  std::vector<uint64_t> reference;
  for (int64_t w : {1, 2, 4}) {
    const int64_t steps = 24 / w;  // 96 samples
    const std::vector<uint64_t> seen = run_steps(data, opt, w, steps);
    REQUIRE(seen.size() == 96);
    const size_t g = static_cast<size_t>(4 * w);
    for (size_t step = 0; step < seen.size() / g; ++step) {
      size_t small = 0;
      for (size_t i = step * g; i < (step + 1) * g; ++i) small += static_cast<size_t>(dataset_of(seen[i]));
      INFO("W " << w << " step " << step);
      CHECK(small * 4 == g);  // exactly a quarter of every global batch
    }
    if (w == 1) reference = seen;
    else CHECK(seen == reference);
  }
  // Each dataset is read in epochs of its own: "small" (3 packs) every pack once per 3 of its samples,
  // "big" (40 packs) once per 40; 96 samples read small 8 times over and big 1.8 times.
  std::vector<uint64_t> small, big;
  for (uint64_t g : reference) (dataset_of(g) ? small : big).push_back(g);
  REQUIRE(small.size() == 24);
  for (size_t e = 0; e < 8; ++e)
    CHECK(std::set<uint64_t>(small.begin() + e * 3, small.begin() + (e + 1) * 3) == std::set<uint64_t>{40, 41, 42});
  CHECK(std::set<uint64_t>(big.begin(), big.begin() + 40).size() == 40);

  // Resume: W 2 for 5 steps, then W 4 for 2, then W 1 for 6: the same 96 samples as one run.
  SamplerState s1, s2;
  std::vector<uint64_t> pieces = run_steps(data, opt, 2, 5, nullptr, &s1);
  CHECK(s1.consumed_samples == 40);
  CHECK(s1.epoch == 10);  // cycles of L = 4
  const std::vector<uint64_t> p2 = run_steps(data, opt, 4, 2, &s1, &s2);
  pieces.insert(pieces.end(), p2.begin(), p2.end());
  const std::vector<uint64_t> p3 = run_steps(data, opt, 1, 6, &s2);
  pieces.insert(pieces.end(), p3.begin(), p3.end());
  CHECK(pieces == reference);
}

TEST_CASE("proportional 0.3:0.7 with batches unlike the cycle: every window within rounding of its share") {
  // L = 10. Global batches of 7 (B 7, M 1, W 1) and 6 (B 1, M 3, W 2) cut the cycle anywhere.
  const Sampler s({11, 50}, {0.3, 0.7}, 3, Mixture::kProportional);
  REQUIRE(s.epoch_size() == 10);
  for (uint64_t g : {6ull, 7ull, 10ull, 20ull}) {
    for (uint64_t start = 0; start < 200; start += g) {
      const std::vector<uint64_t> c = s.count_datasets(start, start + g);
      INFO("window [" << start << ", " << start + g << ")");
      CHECK(c[0] + c[1] == g);
      // Independently: the share of a window is 0.3 * g, to within the 2 the header promises for
      // two datasets; windows of whole cycles hold it exactly.
      CHECK(std::abs(static_cast<double>(c[0]) - 0.3 * static_cast<double>(g)) < 2.0);
      if (g % 10 == 0) CHECK(c[0] * 10 == 3 * g);
    }
  }
  // No prefix of the stream is a whole sample ahead of its share, nor (two datasets) behind.
  uint64_t a = 0;
  for (uint64_t n = 1; n <= 100; ++n) {
    a += s.at(n - 1).dataset == 0;
    CHECK(std::abs(static_cast<double>(a) - 0.3 * static_cast<double>(n)) < 1.0);
  }
}

TEST_CASE("mixture_line: each dataset's share of the window, one short greppable line") {
  CHECK(mixture_line(11, 20, {"web", "code"}, {60, 20}) == "data mix steps 11-20: web 75.0% code 25.0%");
  CHECK(mixture_line(3, 3, {"a", "b", "c"}, {1, 1, 1}) == "data mix step 3: a 33.3% b 33.3% c 33.3%");
}
