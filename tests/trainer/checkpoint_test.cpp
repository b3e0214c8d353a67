#include <catch2/catch.hpp>

#include <unistd.h>

#include <sstream>

#include "checkpoint.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "safetensors.h"
#include "test_util.h"

using namespace loom;

namespace {

CheckpointContents contents(float v) {
  CheckpointContents c;
  c.model = {{"w", torch::full({2, 3}, v)}, {"b", torch::arange(4, torch::kInt64)}};
  c.optimizer = {{"step", torch::full({}, 1.0, torch::kFloat64)}};
  c.state_json = "{\"version\": 1}\n";
  c.config_ini = "[job]\nrun_dir = x\n";
  return c;
}

// Rewrites the 8-byte length + header of a safetensors file.
std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

TEST_CASE("safetensors round trip and an independent numpy reader") {
  test::TempDir dir("st");
  torch::manual_seed(3);
  torch::Tensor a = torch::randn({3, 5});
  torch::Tensor b = torch::randn({7}, torch::kFloat64);
  torch::Tensor c = torch::arange(6, torch::kInt32).reshape({2, 3});
  torch::Tensor h = torch::randn({4}).to(torch::kBFloat16);
  auto r = safetensors::write(dir / "t.safetensors", {{"a.weight", a}, {"b", b}, {"c", c}, {"h", h}}, {{"k", "v\"q"}});
  CHECK(r.bytes == sys::file_size(dir / "t.safetensors"));
  CHECK(r.xxh64 == xxh64_file(dir / "t.safetensors"));
  safetensors::Reader rd(dir / "t.safetensors");
  CHECK(rd.names() == std::vector<std::string>{"a.weight", "b", "c", "h"});
  CHECK(torch::equal(rd.get("a.weight"), a));
  CHECK(torch::equal(rd.get("b"), b));
  CHECK(torch::equal(rd.get("c"), c));
  CHECK(torch::equal(rd.get("h"), h));
  CHECK(rd.metadata().at("k") == "v\"q");
  // Python with numpy only: the few lines docs/TRAIN.md shows.
  const std::string py = R"(
import json, struct, sys, numpy as np
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
assert n % 8 == 0
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
assert hdr['__metadata__'] == {'k': 'v"q'}
dt = {'F32': '<f4', 'F64': '<f8', 'I32': '<i4'}
for name in ['a.weight', 'b', 'c']:
    e = hdr[name]; b0, b1 = e['data_offsets']
    x = np.frombuffer(data[b0:b1], dtype=dt[e['dtype']]).reshape(e['shape'])
    print(name, e['dtype'], e['shape'], repr(float(x.astype(np.float64).sum())))
)";
  test::write_all(dir / "read.py", py);
  auto out = test::run(test::python() + " " + dir / "read.py " + dir / "t.safetensors");
  REQUIRE(out.exit_code == 0);
  auto sum = [](const torch::Tensor& t) {
    std::ostringstream os;
    os.precision(17);
    os << t.to(torch::kFloat64).sum().item<double>();
    return os.str();
  };
  CHECK(out.output.find("a.weight F32 [3, 5] ") != std::string::npos);
  CHECK(out.output.find("c I32 [2, 3] 15.0") != std::string::npos);
  // Same float64 sums to the last digit (Python's repr and %.17g may differ in form, so parse).
  std::istringstream lines(out.output);
  std::string name, dtype, shape1, shape2;
  double got = 0;
  lines >> name >> dtype >> shape1 >> shape2 >> got;
  CHECK(got == std::stod(sum(a)));
}

TEST_CASE("safetensors reader refuses a header that lies") {
  test::TempDir dir("st_bad");
  const std::string data(24, '\0');  // 6 floats
  auto check = [&](const std::string& file, const std::string& expected) {
    test::write_all(dir / "x.safetensors", file);
    CHECK_THROWS_WITH(safetensors::Reader(dir / "x.safetensors"), Catch::Contains(expected));
  };
  check("abc", "not a safetensors file: 3 bytes, expected at least the 8-byte header length");
  check(with_header("{\"a\":{}}", "") .substr(0, 8) + "{", "safetensors header length 8 at byte 0 does not fit in the 9-byte file");
  check(with_header("{\"a\": [1,", data), "is not valid JSON");
  check(with_header(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", data),
        "tensor 'a' is F32 of 6 elements = 24 bytes, but data_offsets [0, 20) hold 20");
  check(with_header(R"({"a":{"dtype":"Q8","shape":[6],"data_offsets":[0,24]}})", data), "tensor 'a' has unknown dtype 'Q8'");
  check(with_header(R"({"a":{"dtype":"F64","shape":[6],"data_offsets":[0,48]}})", data),
        "tensor 'a' ends at data byte 48 beyond the 24 data bytes");
  check(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", data),
        "tensor 'a' starts at data byte 8, expected 0");
  check(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
        "tensors cover 8 data bytes but the file holds 24");
  check(with_header(R"({"a":{"dtype":"F32","data_offsets":[0,24]}})", data), "tensor 'a' has no shape array");
  // Shapes whose element count (2^32 * 2^32) or byte size (2^62 * 4) wraps to 0 in 64 bits, with an
  // empty byte range that the wrapped size would match (LibTorch then threw c10::Error in get()).
  check(with_header(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
        "tensor 'a' has a shape of 2^63 bytes or more");
  check(with_header(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""),
        "tensor 'a' has a shape of 2^63 bytes or more");
}

TEST_CASE("checkpoint save, validate, latest pointer and keep-last-K") {
  log::set_level(log::Level::kError);
  test::TempDir dir("ckpt");
  Checkpointer ck({dir / "ck", 2});
  for (int64_t s : {2, 4, 6}) ck.save(s, contents(static_cast<float>(s)));
  CHECK(ck.steps() == std::vector<int64_t>{4, 6});
  CHECK(test::read_all(dir / "ck/latest") == "step_6\n");
  CHECK(validate_checkpoint(dir / "ck/step_6") == 6);
  CHECK_FALSE(sys::exists(dir / "ck/step_6.tmp"));
  CHECK(ck.find_latest_valid() == dir / "ck/step_6");
  safetensors::Reader m(dir / "ck/step_6/model.safetensors");
  CHECK(m.get("w")[1][2].item<float>() == 6.0f);
  // A rerun of the same step replaces it; a stale .tmp of a killed save is cleaned up.
  sys::make_dirs(dir / "ck/step_8.tmp");
  test::write_all(dir / "ck/step_8.tmp/model.safetensors", "partial");
  ck.save(8, contents(8));
  CHECK(ck.steps() == std::vector<int64_t>{6, 8});
  CHECK_FALSE(sys::exists(dir / "ck/step_8.tmp"));
}

TEST_CASE("each checkpoint corruption is refused with its reason and resume walks back") {
  log::set_level(log::Level::kError);
  test::TempDir dir("ckpt_bad");
  Checkpointer ck({dir / "ck", 0});
  ck.save(1, contents(1));
  ck.save(2, contents(2));
  const std::string d = dir / "ck/step_2";
  const std::string model = test::read_all(d + "/model.safetensors");

  SECTION("a flipped byte") {
    std::string m = model;
    m[m.size() - 1] ^= 1;
    test::write_all(d + "/model.safetensors", m);
    CHECK_THROWS_WITH(validate_checkpoint(d), Catch::Contains("model.safetensors: XXH64 ") &&
                                                  Catch::Contains("(the file is corrupt)"));
  }
  SECTION("a truncated file") {
    test::write_all(d + "/model.safetensors", model.substr(0, 10));
    CHECK_THROWS_WITH(validate_checkpoint(d),
                      Catch::Contains("model.safetensors: 10 bytes, the manifest says " + std::to_string(model.size())));
  }
  SECTION("a missing file") {
    sys::remove_file(d + "/optimizer.safetensors");
    CHECK_THROWS_WITH(validate_checkpoint(d), Catch::Contains("optimizer.safetensors: listed in the manifest but missing"));
  }
  SECTION("no manifest: a save that never finished") {
    sys::remove_file(d + "/manifest.json");
    CHECK_THROWS_WITH(validate_checkpoint(d), Catch::Contains("no manifest.json (an incomplete checkpoint)"));
  }
  SECTION("a future version") {
    std::string man = test::read_all(d + "/manifest.json");
    man.replace(man.find("\"version\": 1"), 12, "\"version\": 2");
    test::write_all(d + "/manifest.json", man);
    CHECK_THROWS_WITH(validate_checkpoint(d), Catch::Contains("checkpoint version 2, this build reads version 1"));
  }
  SECTION("a manifest naming a file outside the folder") {
    // The listed bytes and checksum are those of a real file one level up: still refused.
    test::write_all(dir / "ck/outside.ini", test::read_all(d + "/config.ini"));
    std::string man = test::read_all(d + "/manifest.json");
    man.replace(man.find("\"config.ini\""), 12, "\"../outside.ini\"");
    test::write_all(d + "/manifest.json", man);
    CHECK_THROWS_WITH(validate_checkpoint(d),
                      Catch::Contains("file name '../outside.ini' is not a plain name inside the checkpoint folder"));
  }
  SECTION("a manifest that is not JSON") {
    test::write_all(d + "/manifest.json", "{\"format\": ");
    CHECK_THROWS_WITH(validate_checkpoint(d), Catch::Contains("manifest.json: not valid JSON"));
  }
  // Whatever the damage, the newest valid checkpoint is step_1.
  CHECK(ck.find_latest_valid() == dir / "ck/step_1");
}

TEST_CASE("a stale checkpoint folder is removed without following a link, and a link in its place is refused") {
  log::set_level(log::Level::kError);
  test::TempDir dir("ckpt_links");
  Checkpointer ck({dir / "ck", 2});
  ck.save(2, contents(2));
  sys::make_dirs(dir / "victim/sub");
  test::write_all(dir / "victim/keep.txt", "a user's file");
  test::write_all(dir / "victim/sub/deep.txt", "another");
  // A killed save's .tmp holding a link to another folder: the link goes, the folder stays.
  sys::make_dirs(dir / "ck/step_4.tmp");
  REQUIRE(::symlink((dir / "victim").c_str(), (dir / "ck/step_4.tmp/linked").c_str()) == 0);
  ck.save(4, contents(4));
  CHECK(ck.steps() == std::vector<int64_t>{2, 4});
  CHECK(test::read_all(dir / "victim/keep.txt") == "a user's file");
  CHECK(test::read_all(dir / "victim/sub/deep.txt") == "another");
  // The .tmp itself a link: refused, naming it, and nothing under the target removed.
  REQUIRE(::symlink((dir / "victim").c_str(), (dir / "ck/step_6.tmp").c_str()) == 0);
  CHECK_THROWS_WITH(ck.save(6, contents(6)),
                    Catch::Contains("step_6.tmp: a symbolic link where loom keeps a checkpoint folder"));
  CHECK(test::read_all(dir / "victim/keep.txt") == "a user's file");
  CHECK(test::read_all(dir / "victim/sub/deep.txt") == "another");
  CHECK(ck.steps() == std::vector<int64_t>{2, 4});
}
