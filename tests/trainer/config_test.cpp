// loom-train's key declaration (train_options): the defaults are the structs' initializers, every
// key documents itself, and a bad value names its key.
#include <catch2/catch.hpp>
#include <set>

#include "config.h"
#include "loom/cli.h"
#include "loom/option_table.h"

using namespace loom;

namespace {
const std::string kTrain = "--data.train_folder=shards";  // the one required key
}

TEST_CASE("config: a parsed config that gives no key equals a default-constructed TrainConfig, key by key") {
  const std::optional<TrainConfig> parsed = parse_train_config({kTrain});
  REQUIRE(parsed);
  TrainConfig got = *parsed;
  TrainConfig want;
  want.data.train_folder = "shards";
  const OptionTable got_keys = train_options(got), want_keys = train_options(want);
  REQUIRE(got_keys.keys().size() == want_keys.keys().size());
  for (size_t i = 0; i < want_keys.keys().size(); ++i) {
    const OptionTable::Key& g = got_keys.keys()[i];
    const OptionTable::Key& w = want_keys.keys()[i];
    INFO(w.name);
    REQUIRE(g.name == w.name);
    CHECK(g.text() == w.text());
    CHECK(w.text() == w.default_text);
  }
  // The dumps come from the same declaration: every key once, only the given one changed.
  CHECK(parsed->changed_ini == "[data]\ntrain_folder = shards\n");
  size_t lines = 0;
  for (char ch : parsed->resolved_ini) lines += ch == '\n';
  const std::set<std::string> sections = [&] {
    std::set<std::string> s;
    for (const auto& k : want_keys.keys())
      if (k.name.find('.') != std::string::npos) s.insert(k.name.substr(0, k.name.find('.')));
    return s;
  }();
  CHECK(lines == want_keys.keys().size() + sections.size());
  CHECK(parsed->resolved_ini.find("[parallel]\nbackend = auto\nbucket_mb = 25\n") != std::string::npos);
  CHECK(parsed->resolved_ini.find("timeout_s = 600\n") != std::string::npos);
}

TEST_CASE("config: every key is declared once, with help") {
  TrainConfig c;
  const OptionTable keys = train_options(c);
  std::set<std::string> names;
  for (const auto& k : keys.keys()) {
    INFO(k.name);
    CHECK(names.insert(k.name).second);
    CHECK_FALSE(k.help.empty());
    CHECK(static_cast<bool>(k.text));
    CHECK(static_cast<bool>(k.read));
  }
  CHECK(names.count("job.peak_tflops") == 1);
  CHECK(names.count("data.train_folder") == 1);
  CHECK(keys.keys().size() > 80);
}

TEST_CASE("config: a value out of range or of the wrong kind names its key") {
  for (const std::string bad :
       {"--adam.adam_eps=0", "--monitor.spike_window=0", "--monitor.spike_ratio=0.5", "--monitor.diag_outlier_ratio=1",
        "--job.log_every=0", "--ckpt.keep=-1", "--ckpt.checkpoint_every=-1", "--data.valid_every=-1",
        "--data.total_steps=0", "--data.seed=-1", "--job.threads=x", "--job.tensorboard=maybe", "--model.dropout=inf",
        "--parallel.timeout_s=0", "--job.peak_tflops=-1", "--monitor.alert_timeout_s=0"}) {
    INFO(bad);
    const std::string key = bad.substr(2, bad.find('=') - 2);
    CHECK_THROWS_WITH(parse_train_config({kTrain, bad}), Catch::Contains(key));
  }
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--adam.adam_eps=0"}), "adam.adam_eps must be > 0, got 0");
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--monitor.spike_ratio=0.5"}),
                    "monitor.spike_ratio must be 0 (off) or > 1, got 0.5");
  CHECK_THROWS_AS(parse_train_config({kTrain, "--data.seed=-1"}), UsageError);
  // Every key given a text no number reads: refused naming the key, or (a text key) taken.
  TrainConfig c;
  const OptionTable table = train_options(c);
  for (const auto& k : table.keys()) {
    if (k.is_switch) continue;
    INFO(k.name);
    try {
      parse_train_config({kTrain, "--" + k.name + "=x1"});
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(k.name));
    }
  }
}

TEST_CASE("config: job.peak_tflops is auto (0) by default, a number > 0 sets it") {
  const auto def = parse_train_config({kTrain});
  REQUIRE(def);
  CHECK(def->job.peak_tflops == 0);
  CHECK(def->resolved_ini.find("peak_tflops = auto\n") != std::string::npos);
  const auto automatic = parse_train_config({kTrain, "--job.peak_tflops=auto"});
  REQUIRE(automatic);
  CHECK(automatic->job.peak_tflops == 0);
  CHECK(automatic->changed_ini.find("peak_tflops") == std::string::npos);
  const auto h100 = parse_train_config({kTrain, "--job.peak_tflops=989.5"});
  REQUIRE(h100);
  CHECK(h100->job.peak_tflops == 989.5);
  CHECK(h100->changed_ini.find("[job]\npeak_tflops = 989.5\n") != std::string::npos);
}

TEST_CASE("config: typed keys read and write their own text") {
  const auto c = parse_train_config({kTrain, "--model.checkpoint=auto", "--model.dtype=bf16", "--model.precision=fp8",
                                     "--profiling", "--resume=auto"});
  REQUIRE(c);
  CHECK(c->model.checkpoint_auto);
  CHECK(c->model.fp8);
  CHECK(c->flags.profiling);
  CHECK(c->changed_ini ==
        "profiling = true\nresume = auto\n[data]\ntrain_folder = shards\n"
        "[model]\ncheckpoint = auto\ndtype = bfloat16\nprecision = fp8\n");
  const auto half = parse_train_config({kTrain, "--model.checkpoint=.5"});
  REQUIRE(half);
  CHECK(half->model.checkpoint == 0.5);
  CHECK(half->changed_ini.find("[model]\ncheckpoint = 0.5\n") != std::string::npos);
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--model.checkpoint=most"}),
                    Catch::Contains("model.checkpoint='most': expected a fraction in [0, 1] or auto"));
}

TEST_CASE("config: Megatron-LM's scheduler switches are lr_scheduler.on_resume values") {
  const auto parse = [](const std::string& flag) {
    return loom::parse_train_config({"--data.train_folder=x", flag})->lr_scheduler.on_resume;
  };
  CHECK(parse("--override-opt_param-scheduler") == "apply");
  CHECK(parse("--use-checkpoint-opt_param-scheduler") == "keep");
  CHECK(parse("--lr_scheduler.on_resume=keep") == "keep");
  CHECK(loom::parse_train_config({"--data.train_folder=x"})->lr_scheduler.on_resume == "refuse");
  CHECK_THROWS_WITH(parse("--lr_scheduler.on_resume=maybe"), Catch::Contains("lr_scheduler.on_resume"));
}
