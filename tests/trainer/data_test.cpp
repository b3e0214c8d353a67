// Data folders, batch building and validation sets, on hand-made packed shards whose exact tensors
// are written out below.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "batch_builder.h"
#include "dataset.h"
#include "loader.h"
#include "loom/error.h"
#include "loom/sys.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

TokenizerInfo small_vocab(uint32_t vocab = 100) {
  TokenizerInfo t;
  t.vocab_size = vocab;
  t.bos_id = 1;
  t.eos_id = 2;  // pad_id = eos = 2
  t.flags = 3;
  t.model_fingerprint = 0xABCD;
  return t;
}

PackedSegment seg(uint64_t doc, uint32_t start, uint32_t len, uint32_t doc_pos = 0, uint32_t flags = kSegEndsDoc) {
  return {doc, start, len, doc_pos, flags};
}

// The three packs of the worked example (T = 8, pad 2):
//   pack 0: doc 0 = 10 11 12, doc 1 = 20 21 22 23, one padding token
//   pack 1: padding, padding, a continuation 30 31 32 33 (doc_pos 5, does not end), padding x2
//   pack 2: one document 40..47 filling the pack
void write_example(const std::string& bin) {
  PackedWriter w(bin, small_vocab(), 8, PackStrategy::kBestfit, 0);
  w.add_pack({10, 11, 12, 20, 21, 22, 23}, {seg(0, 0, 3), seg(1, 3, 4)});
  w.add_pack({0, 0, 30, 31, 32, 33}, {seg(2, 2, 4, 5, 0)});
  w.add_pack({40, 41, 42, 43, 44, 45, 46, 47}, {seg(3, 0, 8)});
  w.commit(4);
}

// n packs of T tokens, each pack one document of `fill` tokens then padding; ids = 3 + pack index.
void write_simple(const std::string& bin, uint32_t T, uint64_t n, uint32_t fill, const TokenizerInfo& info) {
  PackedWriter w(bin, info, T, PackStrategy::kConcat, 0);
  for (uint64_t p = 0; p < n; ++p) w.add_pack(std::vector<uint32_t>(fill, static_cast<uint32_t>(3 + p)), {seg(p, 0, fill)});
  w.commit(n);
}

torch::Tensor i64(std::vector<std::vector<int64_t>> rows) {
  std::vector<torch::Tensor> t;
  for (auto& r : rows) t.push_back(torch::tensor(r, torch::kInt64));
  return torch::stack(t);
}

DataOptions opts(const std::string& train, int64_t T) {
  DataOptions o;
  o.train_folder = train;
  o.seq_len = T;
  return o;
}

}  // namespace

TEST_CASE("batch builder: labels positions segments and cu_seqlens of the worked example") {
  test::TempDir dir("data_example");
  write_example(dir / "ex.bin");
  PackedReader r(dir / "ex.bin");
  BatchBuilder bb(8, r.header().pad_id);
  const int64_t I = kIgnoreIndex;

  const Batch b = bb.build({{&r, 0, 3}, {&r, 1, 5}});
  CHECK(torch::equal(b.tokens, i64({{10, 11, 12, 20, 21, 22, 23, 2}, {2, 2, 30, 31, 32, 33, 2, 2}})));
  CHECK(torch::equal(b.labels, i64({{11, 12, I, 21, 22, 23, I, I}, {I, I, 31, 32, 33, I, I, I}})));
  CHECK(torch::equal(b.positions, i64({{0, 1, 2, 0, 1, 2, 3, 0}, {0, 0, 0, 1, 2, 3, 0, 0}})));
  CHECK(torch::equal(b.segments, i64({{0, 0, 0, 1, 1, 1, 1, -1}, {-1, -1, 0, 0, 0, 0, -1, -1}}).to(torch::kInt32)));
  CHECK(torch::equal(b.cu_seqlens, torch::tensor({0, 3, 7, 8, 10, 14, 16}, torch::kInt32)));
  CHECK(b.max_seqlen == 4);
  CHECK(b.num_loss_tokens == 8);
  CHECK(torch::equal(b.dataset_ids, torch::tensor({3, 5}, torch::kInt64)));
  CHECK(b.tokens.dtype() == torch::kInt64);
  CHECK(b.labels.dtype() == torch::kInt64);

  // A full pack and an all-padding row (used to even out validation tails).
  const Batch c = bb.build({{&r, 2, 1}, {nullptr, 0, 1}});
  CHECK(torch::equal(c.tokens, i64({{40, 41, 42, 43, 44, 45, 46, 47}, {2, 2, 2, 2, 2, 2, 2, 2}})));
  CHECK(torch::equal(c.labels, i64({{41, 42, 43, 44, 45, 46, 47, I}, {I, I, I, I, I, I, I, I}})));
  CHECK(torch::equal(c.positions, i64({{0, 1, 2, 3, 4, 5, 6, 7}, {0, 0, 0, 0, 0, 0, 0, 0}})));
  CHECK(torch::equal(c.segments, i64({{0, 0, 0, 0, 0, 0, 0, 0}, {-1, -1, -1, -1, -1, -1, -1, -1}}).to(torch::kInt32)));
  CHECK(torch::equal(c.cu_seqlens, torch::tensor({0, 8, 16}, torch::kInt32)));
  CHECK(c.max_seqlen == 8);
  CHECK(c.num_loss_tokens == 7);
  CHECK(torch::equal(c.dataset_ids, torch::tensor({1, 1}, torch::kInt64)));
}

TEST_CASE("batch builder agrees with the Batch contract on random packs") {
  // Property test: for random segment layouts, every tensor satisfies the definitions of batch.h
  // restated independently (from the segments tensor, not the shard).
  test::TempDir dir("data_random");
  const uint32_t T = 37;
  std::mt19937_64 rng(11);
  PackedWriter w(dir / "r.bin", small_vocab(1000), T, PackStrategy::kBestfit, 0);
  uint64_t doc = 0;
  for (int p = 0; p < 20; ++p) {
    std::vector<uint32_t> tok(T);
    for (auto& t : tok) t = static_cast<uint32_t>(3 + rng() % 990);
    std::vector<PackedSegment> segs;
    uint32_t at = static_cast<uint32_t>(rng() % 3);
    while (at < T) {
      const uint32_t len = 1 + static_cast<uint32_t>(rng() % std::min<uint32_t>(12, T - at));
      segs.push_back(seg(doc++, at, len));
      at += len + static_cast<uint32_t>(rng() % 3);
    }
    w.add_pack(tok, segs);
  }
  w.commit(doc);
  PackedReader r(dir / "r.bin");
  BatchBuilder bb(T, 2);
  std::vector<PackRef> rows;
  for (uint64_t p = 0; p < 20; ++p) rows.push_back({&r, p, 0});
  const Batch b = bb.build(rows);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto lab = b.labels.accessor<int64_t, 2>();
  auto pos = b.positions.accessor<int64_t, 2>();
  auto sg = b.segments.accessor<int32_t, 2>();
  int64_t loss = 0;
  std::vector<int32_t> cu{0};
  for (int64_t i = 0; i < 20; ++i) {
    for (int64_t t = 0; t < T; ++t) {
      const bool same_next = t + 1 < T && sg[i][t] != -1 && sg[i][t + 1] == sg[i][t];
      REQUIRE(lab[i][t] == (same_next ? tok[i][t + 1] : kIgnoreIndex));
      loss += same_next;
      const bool starts = t == 0 || sg[i][t] != sg[i][t - 1];
      REQUIRE(pos[i][t] == (sg[i][t] == -1 ? 0 : (starts ? 0 : pos[i][t - 1] + 1)));
      if (sg[i][t] == -1) REQUIRE(tok[i][t] == 2);
      if (starts && t > 0) cu.push_back(static_cast<int32_t>(i * T + t));
      if (t == 0 && i > 0) cu.push_back(static_cast<int32_t>(i * T));
    }
  }
  cu.push_back(20 * T);
  CHECK(b.num_loss_tokens == loss);
  CHECK(torch::equal(b.cu_seqlens, torch::tensor(cu, torch::kInt32)));
  CHECK(b.max_seqlen == (b.cu_seqlens.slice(0, 1) - b.cu_seqlens.slice(0, 0, -1)).max().item<int32_t>());
  // Segment indices count up from 0 within each row, in the shard's order.
  for (int64_t i = 0; i < 20; ++i) {
    int32_t expect = 0;
    for (const PackedSegment* s = r.segments_begin(static_cast<uint64_t>(i)); s != r.segments_end(static_cast<uint64_t>(i)); ++s, ++expect)
      REQUIRE(sg[i][s->start] == expect);
  }
}

TEST_CASE("train folder: sub-folders are named datasets in sorted order with exact counts") {
  test::TempDir dir("data_folder");
  sys::make_dirs(dir / "zh");
  sys::make_dirs(dir / "en/more");
  write_simple(dir / "zh/a.bin", 8, 3, 5, small_vocab());        // 3 packs, 15 tokens, 9 padding
  write_simple(dir / "en/b.bin", 8, 2, 8, small_vocab());        // 2 packs, 16 tokens
  write_simple(dir / "en/more/c.bin", 8, 4, 6, small_vocab());   // 4 packs, 24 tokens, 8 padding
  test::write_all(dir / "en/README.txt", "other files are ignored");
  DataOptions o = opts(dir.path(), 8);
  o.dataset_weights = "zh:2.5";
  TrainData data(o);
  REQUIRE(data.dataset_names() == std::vector<std::string>{"en", "zh"});
  const PackedDataset& en = data.datasets()[0];
  CHECK(en.num_shards() == 2);
  CHECK(en.shard(0).bin_path() == dir / "en/b.bin");
  CHECK(en.shard(1).bin_path() == dir / "en/more/c.bin");
  CHECK(en.num_packs() == 6);
  CHECK(en.num_tokens() == 40);
  CHECK(en.num_padding() == 8);
  CHECK(en.num_source_docs() == 6);
  CHECK(en.weight() == 1.0);
  CHECK(en.locate(1).shard == &en.shard(0));
  CHECK(en.locate(2).shard == &en.shard(1));
  CHECK(en.locate(2).pack == 0);
  CHECK(en.locate(5).pack == 3);
  const PackedDataset& zh = data.datasets()[1];
  CHECK(zh.num_packs() == 3);
  CHECK(zh.num_tokens() == 15);
  CHECK(zh.num_padding() == 9);
  CHECK(zh.weight() == 2.5);
  CHECK(data.epoch_samples() == 6 + 8);  // 2*3 + round(0.5*3)
  CHECK(data.vocab_size() == 100);
  CHECK(data.pad_id() == 2);
  data.log_summary(4, 10);  // prints; must not throw

  // A folder holding shards directly is one dataset named after it.
  TrainData one(opts(dir / "zh", 8));
  REQUIRE(one.dataset_names() == std::vector<std::string>{"zh"});
  CHECK(one.datasets()[0].num_packs() == 3);
}

TEST_CASE("train folder errors name the file and what was expected") {
  test::TempDir dir("data_errors");
  sys::make_dirs(dir / "a");
  write_simple(dir / "a/x.bin", 8, 2, 8, small_vocab());

  CHECK_THROWS_WITH(TrainData(opts(dir / "nope", 8)),
                    Contains("data.train_folder = " + dir / "nope" + ": not a folder (expected a folder of packed shards)"));
  sys::make_dirs(dir / "empty");
  CHECK_THROWS_WITH(TrainData(opts(dir / "empty", 8)),
                    Contains("data.train_folder = " + dir / "empty" + ": no packed shards (NAME.bin with NAME.bin.meta) in it"));
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 16)),
                    Contains(dir / "a/x.bin" + ": packs of 8 tokens, but data.seq_len is 16 (repack the data or set data.seq_len=8)"));

  DataOptions w = opts(dir.path(), 8);
  w.dataset_weights = "b:2";
  CHECK_THROWS_WITH(TrainData(w), Contains("data.dataset_weights: no dataset 'b' in " + dir.path() + " (datasets: a)"));
  w.dataset_weights = "a:0";
  CHECK_THROWS_WITH(TrainData(w), Contains("data.dataset_weights: every dataset has weight 0"));
  CHECK_THROWS_WITH(parse_dataset_weights("a=2"), Contains("data.dataset_weights: 'a=2' in \"a=2\": expected name:weight"));
  CHECK_THROWS_WITH(parse_dataset_weights("a:x"), Contains("weight 'x' of dataset 'a' in \"a:x\": expected a number >= 0"));
  CHECK_THROWS_WITH(parse_dataset_weights("a:-1"), Contains("weight '-1' of dataset 'a'"));
  CHECK_THROWS_WITH(parse_dataset_weights("a:1,a:2"), Contains("dataset 'a' is given twice"));
  CHECK(parse_dataset_weights("en:2,zh:0.5") == std::vector<std::pair<std::string, double>>{{"en", 2.0}, {"zh", 0.5}});

  // A different tokenizer in another dataset.
  sys::make_dirs(dir / "b");
  write_simple(dir / "b/y.bin", 8, 2, 8, small_vocab(200));
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 8)),
                    Contains(dir / "b/y.bin" + ": tokenizer differs from " + dir / "a/x.bin" + ": vocab_size 200 vs 100"));
  sys::remove_file(dir / "b/y.bin");
  sys::remove_file(dir / "b/y.bin.meta");

  // Shards both directly and in sub-folders.
  write_simple(dir / "top.bin", 8, 1, 8, small_vocab());
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 8)),
                    Contains("holds shards both directly (" + dir / "top.bin" + ") and in sub-folders (" + dir / "a/x.bin" + ")"));
  sys::remove_file(dir / "top.bin");
  sys::remove_file(dir / "top.bin.meta");

  // A .bin without its .meta, and a .meta without its .bin.
  test::write_all(dir / "a/y.bin", "x");
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 8)),
                    Contains(dir / "a/y.bin" + ": no " + dir / "a/y.bin.meta" + " beside it"));
  sys::rename_file(dir / "a/y.bin", dir / "a/z.bin.meta");
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 8)),
                    Contains(dir / "a/z.bin.meta" + ": index without its data file " + dir / "a/z.bin"));
  sys::remove_file(dir / "a/z.bin.meta");

  // The packer's reader checks every shard at start: a truncated .bin is refused by name.
  std::string bytes = test::read_all(dir / "a/x.bin");
  test::write_all(dir / "a/x.bin", bytes.substr(0, bytes.size() - 2));
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 8)), Contains(dir / "a/x.bin" + ": truncated .bin: 30 bytes, expected 32"));
  // A modified .bin passes the header checks but not data.verify_checksums.
  bytes[0] = 9;
  test::write_all(dir / "a/x.bin", bytes);
  DataOptions v = opts(dir.path(), 8);
  v.verify_checksums = false;
  CHECK_NOTHROW(TrainData(v));
  CHECK_THROWS_WITH(TrainData(opts(dir.path(), 8)), Contains(dir / "a/x.bin" + ": checksum mismatch"));
}

TEST_CASE("data options are validated with the key name") {
  DataOptions o = opts("/x", 8);
  CHECK_NOTHROW(o.validate());
  o.micro_bsz = 0;
  CHECK_THROWS_WITH(o.validate(), Contains("data.micro_bsz must be > 0, got 0"));
  o = opts("", 8);
  CHECK_THROWS_WITH(o.validate(), Contains("data.train_folder is not set"));
  o = opts("/x", 0);
  CHECK_THROWS_WITH(o.validate(), Contains("data.seq_len must be > 0, got 0"));
  o = opts("/x", 8);
  o.micro_num = -1;
  CHECK_THROWS_WITH(o.validate(), Contains("data.micro_num must be > 0, got -1"));
  o = opts("/x", 8);
  o.dataset_weights = "oops";
  CHECK_THROWS_WITH(o.validate(), Contains("data.dataset_weights: 'oops'"));
}

TEST_CASE("validation sets cover every pack once across ranks in a fixed order") {
  test::TempDir dir("data_valid");
  sys::make_dirs(dir / "valid/a");
  sys::make_dirs(dir / "valid/b");
  write_simple(dir / "valid/a/p.bin", 4, 5, 3, small_vocab());  // ids 3..7
  write_simple(dir / "valid/b/q.bin", 4, 2, 4, small_vocab());  // ids 3..4
  DataOptions o = opts(dir / "valid", 4);
  o.valid_folder = dir / "valid";
  o.micro_bsz = 2;
  TrainData train(o);  // the same folder serves as train data here, for the tokenizer check
  const int64_t W = 2;
  std::vector<std::unique_ptr<ValidationSets>> ranks;
  for (int64_t r = 0; r < W; ++r) ranks.push_back(std::make_unique<ValidationSets>(o, r, W, &train));
  REQUIRE(ranks[0]->num_sets() == 2);
  CHECK(ranks[0]->name(0) == "a");
  CHECK(ranks[0]->name(1) == "b");
  CHECK(ranks[0]->num_micro_batches(0) == 2);  // ceil(5 / (2*2)), on every rank
  CHECK(ranks[1]->num_micro_batches(0) == 2);
  CHECK(ranks[0]->num_micro_batches(1) == 1);
  CHECK(ranks[1]->num_micro_batches(1) == 1);
  const int64_t I = kIgnoreIndex;
  // Set a: rank 0 gets packs 0,1 then 4,pad; rank 1 gets 2,3 then pad,pad.
  CHECK(torch::equal(ranks[0]->micro_batch(0, 0).tokens.select(1, 0), torch::tensor({3, 4}, torch::kInt64)));
  CHECK(torch::equal(ranks[1]->micro_batch(0, 0).tokens.select(1, 0), torch::tensor({5, 6}, torch::kInt64)));
  const Batch tail0 = ranks[0]->micro_batch(0, 1);
  CHECK(torch::equal(tail0.tokens, i64({{7, 7, 7, 2}, {2, 2, 2, 2}})));
  CHECK(torch::equal(tail0.labels, i64({{7, 7, I, I}, {I, I, I, I}})));
  CHECK(tail0.num_loss_tokens == 2);
  const Batch tail1 = ranks[1]->micro_batch(0, 1);
  CHECK(tail1.num_loss_tokens == 0);
  CHECK(torch::equal(tail1.labels, torch::full({2, 4}, I, torch::kInt64)));
  // Set b and its dataset ids; the same batch every time.
  const Batch b0 = ranks[0]->micro_batch(1, 0);
  CHECK(torch::equal(b0.tokens, i64({{3, 3, 3, 3}, {4, 4, 4, 4}})));
  CHECK(torch::equal(b0.dataset_ids, torch::tensor({1, 1}, torch::kInt64)));
  CHECK(torch::equal(ranks[0]->micro_batch(1, 0).tokens, b0.tokens));
  CHECK(ranks[1]->micro_batch(1, 0).num_loss_tokens == 0);

  // No valid folder: no sets.
  DataOptions none = o;
  none.valid_folder = "";
  CHECK(ValidationSets(none, 0, 1).num_sets() == 0);
  // Validation data from another tokenizer is refused.
  sys::make_dirs(dir / "other");
  write_simple(dir / "other/v.bin", 4, 1, 4, small_vocab(300));
  DataOptions other = o;
  other.valid_folder = dir / "other";
  CHECK_THROWS_WITH(ValidationSets(other, 0, 1, &train),
                    Contains(dir / "other/v.bin" + ": tokenizer differs from " + dir / "valid/a/p.bin" + ": vocab_size 300 vs 100"));
}
