#include <catch2/catch.hpp>

#include <algorithm>
#include <tuple>

#include "loom/error.h"
#include "loom/megatron_format.h"
#include "loom/packed_format.h"
#include "loom/shard_format.h"
#include "test_util.h"

using namespace loom;

TEST_CASE("loom shard round trip, uint16 and uint32, read back by numpy as documented") {
  for (uint32_t vocab : {1000u, 103168u}) {
    test::TempDir dir("shard");
    const std::string bin = dir / "a.bin";
    TokenizerInfo info{vocab, 1, 2, kShardFlagBos | kShardFlagEos, 0x1234};
    ShardWriter w(bin, info);
    w.add_doc({1, 5, 2});
    w.add_doc({1, 999, 7, 2});
    w.add_doc(std::vector<uint32_t>{});
    w.commit();
    ShardReader r(bin);
    CHECK(r.num_docs() == 3);
    CHECK(r.num_tokens() == 7);
    CHECK(r.dtype_bytes() == (vocab <= 65536 ? 2u : 4u));
    std::vector<uint32_t> d;
    r.read_doc(1, d);
    CHECK(d == std::vector<uint32_t>{1, 999, 7, 2});
    CHECK(r.doc_len(2) == 0);
    r.verify_deep();
    // The numpy reader of docs/FORMAT.md, independently.
    std::string script =
        "import numpy as np,sys,xxhash\n"
        "h=np.fromfile(sys.argv[1]+'.meta',dtype=np.uint8,count=128)\n"
        "assert bytes(h[:8])==b'LOOMTOK\\0'\n"
        "f=h[8:40].view('<u4'); c=h[40:80].view('<u8')\n"
        "dt={2:'<u2',4:'<u4'}[int(f[2])]\n"
        "off=np.fromfile(sys.argv[1]+'.meta',dtype='<u8',offset=128)\n"
        "tok=np.fromfile(sys.argv[1],dtype=dt)\n"
        "assert xxhash.xxh64(open(sys.argv[1],'rb').read()).intdigest()==int(c[2])\n"
        "print(int(c[0]),int(c[1]),[tok[off[i]:off[i+1]].tolist() for i in range(int(c[0]))])\n";
    test::write_all(dir / "read.py", script);
    auto res = test::run(test::python() + " " + test::quote(dir / "read.py") + " " + test::quote(bin));
    REQUIRE(res.exit_code == 0);
    CHECK(res.output == "3 7 [[1, 5, 2], [1, 999, 7, 2], []]\n");
  }
}

TEST_CASE("the shard writer refuses ids >= vocab and empty shards, leaving nothing") {
  test::TempDir dir("shard");
  {
    ShardWriter w(dir / "a.bin", TokenizerInfo{100, -1, -1, 0, 0});
    CHECK_THROWS_WITH(w.add_doc({5, 100}), Catch::StartsWith(dir / "a.bin: document 0: token id 100 >= vocab size 100"));
    CHECK_THROWS_WITH(w.commit(), Catch::Contains("no documents"));
  }
  CHECK(sys::list_files(dir.path()).empty());
}

TEST_CASE("packed shard round trip keeps tokens, padding and segments") {
  test::TempDir dir("packed");
  const std::string bin = dir / "p.bin";
  TokenizerInfo info{50, 1, 2, kShardFlagBos | kShardFlagEos, 7};
  PackedWriter w(bin, info, 4, PackStrategy::kBestfit, 9);
  w.add_pack({10, 11, 12}, {PackedSegment{0, 0, 2, 0, kSegEndsDoc}, PackedSegment{1, 2, 1, 3, 0}});
  w.add_pack({13, 14, 15, 16}, {PackedSegment{1, 0, 4, 4, kSegEndsDoc}});
  w.commit(2);
  PackedReader r(bin);
  CHECK(r.num_packs() == 2);
  CHECK(r.header().num_tokens == 7);
  CHECK(r.padding_tokens() == 1);
  std::vector<uint32_t> p;
  r.read_pack(0, p);
  CHECK(p == std::vector<uint32_t>{10, 11, 12, 2});  // padded with eos
  REQUIRE(r.num_segments(0) == 2);
  CHECK(r.segments_begin(0)[1].doc_pos == 3);
  r.verify_deep();
}

TEST_CASE("PackedWriter: the index written as the packs come gives the bytes of one written at seal") {
  test::TempDir dir("packed_streams");
  const TokenizerInfo info{50, 1, 2, kShardFlagBos | kShardFlagEos, 7};
  // Three packs of 4 (uint16), in two batches; pack 1 has two segments.
  const std::vector<uint16_t> ids = {10, 11, 2, 2, 12, 13, 14, 2, 15, 16, 17, 18};
  const auto* bytes = reinterpret_cast<const uint8_t*>(ids.data());
  const std::vector<PackedSegment> segs = {{0, 0, 2, 0, kSegEndsDoc}, {1, 0, 1, 0, kSegEndsDoc},
                                           {2, 1, 2, 0, kSegEndsDoc}, {3, 0, 4, 0, kSegEndsDoc}};
  const size_t ends_a[] = {1, 3}, ends_b[] = {1};  // batch a: packs 0-1, batch b: pack 2
  auto write = [&](const std::string& name, bool open) {
    PackedWriter w(dir / name, info, 4, PackStrategy::kBestfit, 9);
    if (open) w.open_index({0, 1, 3, 4});
    for (const auto& [at, n, ends, seg0] : {std::tuple<size_t, size_t, const size_t*, size_t>{0, 2, ends_a, 0},
                                            {8, 1, ends_b, 3}}) {
      if (!open) {
        w.add_packs_raw(bytes + 2 * at, n, segs.data() + seg0, ends);
      } else {
        w.add_index(n, segs.data() + seg0, ends);
        w.hash_raw(bytes + 2 * at, n * 4);
        w.write_unhashed(bytes + 2 * at, n * 4);
      }
    }
    w.commit(4);
    return dir / name;
  };
  const std::string a = write("a.bin", false), b = write("b.bin", true);
  CHECK(test::read_all(b) == test::read_all(a));
  CHECK(test::read_all(meta_path_for(b)) == test::read_all(meta_path_for(a)));
  PackedReader(b).verify_deep();
  // open_index's offsets must be the packs' own.
  PackedWriter w(dir / "d.bin", info, 4, PackStrategy::kBestfit, 9);
  w.open_index({0, 2, 3, 4});
  w.add_index(2, segs.data(), ends_a);
  w.add_index(1, segs.data() + 3, ends_b);
  w.write_raw(bytes, 12);
  CHECK_THROWS_AS(w.commit(4), InternalError);
}

TEST_CASE("check_same_tokenizer names both sides and every differing field") {
  const TokenizerInfo a{1000, 1, 2, kShardFlagBos | kShardFlagEos, 0xab};
  check_same_tokenizer(a, "a.bin", a, "b.bin");  // equal: no throw
  struct Case {
    TokenizerInfo b;
    std::string fields;
  };
  const Case cases[] = {
      {{2000, 1, 2, 3, 0xab}, "vocab_size 2000 vs 1000"},
      {{1000, -1, 2, 3, 0xab}, "bos_id -1 vs 1"},
      {{1000, 1, 0, 3, 0xab}, "eos_id 0 vs 2"},
      {{1000, 1, 2, kShardFlagEos, 0xab}, "flags 2 (eos) vs 3 (bos+eos)"},
      {{1000, 1, 2, 3, 0xac}, "model_fingerprint 00000000000000ac vs 00000000000000ab"},
      {{7, 3, 4, 0, 0}, "vocab_size 7 vs 1000, bos_id 3 vs 1, eos_id 4 vs 2, flags 0 (none) vs 3 (bos+eos), "
                        "model_fingerprint 0000000000000000 vs 00000000000000ab"},
  };
  for (const Case& c : cases) {
    INFO(c.fields);
    CHECK_THROWS_AS(check_same_tokenizer(a, "a.bin", c.b, "b.bin"), Error);
    CHECK_THROWS_WITH(check_same_tokenizer(a, "a.bin", c.b, "b.bin"),
                      Catch::Equals("b.bin: tokenizer differs from a.bin: " + c.fields +
                                        "; only shards of one tokenizer go together"));
  }
}

TEST_CASE("check_same_tokenizer of readers adds dtype_bytes (token shards) and pad_id (packed shards)") {
  test::TempDir dir("same_tok");
  ShardWriter w16(dir / "a.bin", TokenizerInfo{1000, 1, 2, 0, 5});
  w16.add_doc({1, 2});
  w16.commit();
  // A uint32 shard of the same tokenizer: the header allows any vocab in uint32.
  ShardWriter w32(dir / "b.bin", TokenizerInfo{70000, 1, 2, 0, 5});
  w32.add_doc({1, 2});
  w32.commit();
  check_same_tokenizer(ShardReader(dir / "a.bin"), ShardReader(dir / "a.bin"));
  CHECK_THROWS_WITH(check_same_tokenizer(ShardReader(dir / "a.bin"), ShardReader(dir / "b.bin")),
                    Catch::StartsWith(dir / "b.bin: tokenizer differs from " + dir / "a.bin" +
                                      ": vocab_size 70000 vs 1000, dtype_bytes 4 vs 2;"));

  // pad_id is eos_id, or 0 without one: two shards that differ only there.
  auto packed = [&](const std::string& name, int32_t eos) {
    PackedWriter w(dir / name, TokenizerInfo{100, -1, eos, 0, 5}, 4, PackStrategy::kConcat, 0);
    w.add_pack({1, 2, 3}, {PackedSegment{0, 0, 3, 0, kSegEndsDoc}});
    w.commit(1);
    return dir / name;
  };
  const std::string p = packed("p.bin", 2), q = packed("q.bin", -1);
  check_same_tokenizer(PackedReader(p), PackedReader(p));
  CHECK_THROWS_WITH(check_same_tokenizer(PackedReader(p), PackedReader(q)),
                    Catch::StartsWith(q + ": tokenizer differs from " + p + ": eos_id -1 vs 2, pad_id 0 vs 2;"));
}

TEST_CASE("the Megatron writer: documents as sequences, dtype by Megatron's rule, refusals leave nothing") {
  test::TempDir dir("megatron");
  CHECK(megatron_idx_path(dir / "c_text_document.bin") == dir / "c_text_document.idx");
  CHECK(megatron_idx_path("a.b/v1.2_text_document") == "a.b/v1.2_text_document.idx");
  CHECK(megatron_dtype_for_vocab(65499) == kMegatronUint16);
  CHECK(megatron_dtype_for_vocab(65500) == kMegatronInt32);
  {
    MegatronWriter w(dir / "a.bin", kMegatronInt32, 70000);
    w.add_doc({69999, 3});
    w.add_doc({});
    w.add_doc({1});
    CHECK_THROWS_WITH(w.add_doc({5, 70000}), Catch::StartsWith(dir / "a.bin: token id 70000 >= vocab size 70000"));
    w.commit();
  }
  MegatronReader r(dir / "a.bin");
  CHECK(r.dtype_code() == kMegatronInt32);
  CHECK(r.num_docs() == 3);
  CHECK(r.num_sequences() == 2);  // the empty document has none
  CHECK(r.num_tokens() == 3);
  std::vector<uint32_t> ids;
  r.read_doc(0, ids);
  r.read_doc(1, ids);
  r.read_doc(2, ids);
  CHECK(ids == std::vector<uint32_t>{69999, 3, 1});
  CHECK(r.verify_deep(70000) == 69999);
  {
    // The numpy reader docs/FORMAT.md gives, run as it is written there.
    const std::string doc = test::read_all(test::source_dir() + "/docs/FORMAT.md");
    const size_t section = doc.find("## Megatron-LM indexed dataset");
    const size_t begin = doc.find("```python\n", section), end = doc.find("```\n", begin + 10);
    REQUIRE((section != std::string::npos && begin != std::string::npos && end != std::string::npos));
    test::write_all(dir / "read.py", "prefix = " + test::quote(dir / "a") + "\n" + doc.substr(begin + 10, end - begin - 10) +
                                         "print([d.tolist() for d in docs])\n");
    const auto res = test::run(test::python() + " " + test::quote(dir / "read.py"));
    INFO(res.output);
    CHECK(res.output == "[[69999, 3], [], [1]]\n");
  }
  CHECK_THROWS_WITH(r.verify_deep(1000), Catch::StartsWith(dir / "a.bin: token id 69999 >= vocab size 1000 in document 0 "
                                                                  "(token 0, byte offset 0)"));
  {
    MegatronWriter w(dir / "b.bin", kMegatronUint16, 100);
    CHECK_THROWS_WITH(w.commit(), Catch::Contains("no documents"));
  }
  CHECK_THROWS_WITH(MegatronWriter(dir / "c.bin", kMegatronInt32, uint64_t{1} << 32),
                    Catch::StartsWith(dir / "c.bin: vocab size 4294967296 has ids that int32 cannot hold"));
  std::vector<std::string> files = sys::list_files(dir.path());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{dir / "a.bin", dir / "a.idx", dir / "read.py"});
}
