// loom-train's key declaration (train_options): the defaults are the structs' initializers, every
// key documents itself, and a bad value names its key.
#include <catch2/catch.hpp>
#include <set>
#include <utility>

#include "config.h"
#include "loom/cli.h"
#include "loom/option_table.h"
#include "loom/sys.h"
#include "lr_schedule.h"
#include "size_limits.h"

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

TEST_CASE("config: Megatron-LM's flags that are loom keys under another name") {
  const auto c = parse_train_config(
      {kTrain, "--train-iters", "500", "--micro-batch-size=3", "--seq-length", "1024", "--lr", "3e-4", "--min-lr=3e-5",
       "--weight-decay", "0.1", "--clip-grad", "0.5", "--seed", "7", "--num-layers", "6", "--hidden-size", "256",
       "--num-attention-heads", "8", "--save", "ck", "--save-interval", "50", "--eval-interval", "25", "--eval-iters",
       "4", "--lr-warmup-iters", "20", "--global-batch-size", "12"});
  REQUIRE(c);
  CHECK(c->data.total_steps == 500);
  CHECK(c->data.micro_bsz == 3);
  CHECK(c->data.seq_len == 1024);
  CHECK(c->adam.lr == 3e-4);
  CHECK(c->lr_scheduler.eta_min == 3e-5);
  CHECK(c->adam.weight_decay == 0.1);
  CHECK(c->hybrid_zero_optimizer.clip_grad_norm == 0.5);
  CHECK(c->job.seed == 7);
  CHECK(c->model.num_layers == 6);
  CHECK(c->model.hidden_size == 256);
  CHECK(c->model.num_attention_heads == 8);
  CHECK(c->ckpt.folder == "ck");
  CHECK(c->ckpt.checkpoint_every == 50);
  CHECK(c->data.valid_every == 25);
  CHECK(c->data.valid_micro_num == 4);
  CHECK(c->lr_scheduler.warmup_steps == 20);
  CHECK(LrSchedule(c->lr_schedule_options()).warmup_end() == 20);
  CHECK(c->data.global_batch_size == 12);
  // config.ini records the loom keys.
  CHECK(c->changed_ini.find("[lr_scheduler]\neta_min = 3e-05\nwarmup_steps = 20\n") != std::string::npos);
}

TEST_CASE("config: Megatron-LM's --lr-decay-style") {
  CHECK(parse_train_config({kTrain, "--lr-decay-style", "constant"})->lr_scheduler.kind == "constant");
  CHECK(parse_train_config({kTrain, "--lr-decay-style=cosine"})->lr_scheduler.kind == "cosine");
  for (const char* style : {"linear", "inverse-square-root"})
    CHECK_THROWS_WITH(parse_train_config({kTrain, "--lr-decay-style", style}),
                      "--lr-decay-style " + std::string(style) +
                          ": no such loom schedule; loom offers cosine, constant and wsd (lr_scheduler.kind; "
                          "Megatron-LM's WSD with --lr-wsd-decay-style linear is wsd)");
  CHECK_THROWS_AS(parse_train_config({kTrain, "--lr-decay-style", "linear"}), UsageError);
}

TEST_CASE("config: Megatron-LM's WSD with a linear decay is wsd, its decay_ratio giving back the decay's updates") {
  const auto c = parse_train_config({kTrain, "--train-iters=1000", "--lr-warmup-iters=10", "--lr-decay-style=WSD",
                                     "--lr-wsd-decay-style=linear", "--lr-wsd-decay-iters=200"});
  REQUIRE(c);
  CHECK(c->lr_scheduler.kind == "wsd");
  CHECK(c->lr_scheduler.decay_ratio == 0.2);
  // Megatron-LM's WSD, num_steps = e + 1: warmup to W, max_lr while num_steps <= T - N, then
  // min + (1 - (num_steps - (T - N)) / N) * (max - min); min past T.
  const LrSchedule s(c->lr_schedule_options());
  const double max = c->adam.lr, min = c->lr_scheduler.eta_min;
  const auto megatron = [&](int64_t e) {
    const double n = static_cast<double>(e + 1);
    if (n <= 10) return max * n / 10;
    if (n > 1000) return min;
    if (n <= 800) return max;
    return min + (1 - (n - 800) / 200) * (max - min);
  };
  for (int64_t e = 0; e < 1010; ++e) {
    INFO(e);
    CHECK(s.lr(e) == Approx(megatron(e)).epsilon(1e-12));
  }
  // Every decay length over an awkward total gives back exactly its updates.
  for (int64_t n = 1; n <= 997; n += 37) {
    const auto d = parse_train_config({kTrain, "--train-iters=997", "--lr-warmup-iters=0", "--lr-decay-style=WSD",
                                       "--lr-wsd-decay-style=linear", "--lr-wsd-decay-iters=" + std::to_string(n)});
    INFO(n);
    CHECK(static_cast<int64_t>(997.0 * d->lr_scheduler.decay_ratio) == n);
  }
}

TEST_CASE("config: Megatron-LM's WSD refused where loom's wsd would differ") {
  const std::vector<std::string> wsd = {kTrain, "--train-iters=100", "--lr-decay-style=WSD"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = wsd;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  CHECK_THROWS_WITH(parse_train_config(with({"--lr-wsd-decay-iters=20"})),
                    "loom-train: --lr-decay-style WSD with --lr-wsd-decay-style exponential (Megatron-LM's default is "
                    "exponential): loom's wsd decays linearly to eta_min; pass --lr-wsd-decay-style linear");
  CHECK_THROWS_WITH(parse_train_config(with({"--lr-wsd-decay-style=cosine", "--lr-wsd-decay-iters=20"})),
                    Catch::Contains("--lr-wsd-decay-style cosine"));
  CHECK_THROWS_WITH(parse_train_config(with({"--lr-wsd-decay-style=linear"})),
                    "loom-train: --lr-decay-style WSD needs --lr-wsd-decay-iters (the updates of the final decay)");
  CHECK_THROWS_WITH(parse_train_config(with({"--lr-wsd-decay-style=linear", "--lr-wsd-decay-iters=101"})),
                    "loom-train: --lr-wsd-decay-iters must be in [1, data.total_steps = 100], got 101");
  CHECK_THROWS_WITH(parse_train_config(with({"--lr-wsd-decay-style=linear", "--lr-wsd-decay-iters=95",
                                             "--lr-warmup-iters=10"})),
                    "loom-train: --lr-wsd-decay-iters 95: the decay would start at update 5, inside the warmup "
                    "(ending at 10), where loom's wsd and Megatron-LM's WSD differ");
}

TEST_CASE("config: Megatron-LM's --load DIR is --resume auto over DIR") {
  const auto c = parse_train_config({kTrain, "--load", "ck"});
  REQUIRE(c);
  CHECK(c->flags.resume == "auto");
  CHECK(c->ckpt.folder == "ck");
  CHECK(c->changed_ini.find("resume = auto\n") == 0);
  const auto same = parse_train_config({kTrain, "--save=ck/", "--load=./ck"});
  REQUIRE(same);
  CHECK(same->flags.resume == "auto");
  CHECK(same->ckpt.folder == "ck/");
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--save=a", "--load=b"}),
                    "loom-train: --load b with ckpt.save_ckpt_folder (--save) a: loom resumes the newest checkpoint of "
                    "the folder it saves to (--resume auto), or one step_N folder (--resume b/step_N); give --save b "
                    "too, or --resume");
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--load=b", "--resume=auto"}),
                    "loom-train: --load b is --resume auto over b: give one of --load and --resume");
}

TEST_CASE("config: Megatron-LM's --data-path: one folder, or a blend of sub-folders of one parent") {
  CHECK(parse_train_config({"--data-path", "packed/all"})->data.train_folder == "packed/all");
  CHECK(parse_train_config({"--data-path", "packed/all"})->data.mixture == "scaled");
  const auto blend = parse_train_config({"--data-path", "0.3", "/nonexistent/p/en", "0.7", "/nonexistent/p/zh/"});
  REQUIRE(blend);
  CHECK(blend->data.train_folder == "/nonexistent/p");
  CHECK(blend->data.dataset_weights == "en:0.3,zh:0.7");
  CHECK(blend->data.mixture == "proportional");  // Megatron-LM's weights are shares of every batch
  const auto quoted = parse_train_config({"--data-path=2 d/a 1 d/b", "--train-iters=5"});
  REQUIRE(quoted);
  CHECK(quoted->data.train_folder == "d");
  CHECK(quoted->data.dataset_weights == "a:2,b:1");
  CHECK(quoted->data.mixture == "proportional");
  CHECK(quoted->data.total_steps == 5);
  const std::string layout = ": loom trains on data.train_folder, a folder of packed shards whose sub-folders are its "
                             "named datasets (data.dataset_weights \"name:weight\"); --data-path takes one such "
                             "folder, or \"W1 DIR1 W2 DIR2 ...\" with every DIR a sub-folder of one parent";
  CHECK_THROWS_WITH(parse_train_config({"--data-path", "1", "a/x", "1", "b/y"}),
                    "--data-path '1 a/x 1 b/y': b/y is not a sub-folder of a" + layout);
  CHECK_THROWS_WITH(parse_train_config({"--data-path", "1", "a/x", "1"}),
                    "--data-path '1 a/x 1': not weight-prefix pairs" + layout);
  CHECK_THROWS_WITH(parse_train_config({"--data-path", "a/x", "1", "a/y", "2"}),
                    "--data-path 'a/x 1 a/y 2': 'a/x' is not a weight >= 0" + layout);
  CHECK_THROWS_WITH(parse_train_config({"--data-path", "1", "a/x", "2", "a/x"}),
                    "--data-path '1 a/x 2 a/x': x is given twice");
  CHECK_THROWS_AS(parse_train_config({"--data-path"}), UsageError);
}

TEST_CASE("config: Megatron-LM's --data-path gives weight 0 to the parent's other sub-folders") {
  const std::string root = "config_test_data_path";
  sys::make_dirs(root + "/en");
  sys::make_dirs(root + "/zh");
  sys::make_dirs(root + "/code");
  const auto c = parse_train_config({"--data-path", "1", root + "/zh", "3", root + "/en"});
  CHECK(c->data.dataset_weights == "zh:1,en:3,code:0");
  for (const char* d : {"/en", "/zh", "/code", ""}) sys::remove_dir(root + d);
}

TEST_CASE("config: data.global_batch_size derives data.micro_num once the world size is known") {
  auto c = *parse_train_config({kTrain, "--micro-batch-size=2", "--global-batch-size=24"});
  CHECK(c.data.micro_num == 1);
  derive_micro_num(c, 3);
  CHECK(c.data.micro_num == 4);
  CHECK(c.resolved_ini.find("micro_bsz = 2\nmicro_num = 4\n") != std::string::npos);
  CHECK(ini_value(c.changed_ini, "data.micro_num") == "4");
  derive_micro_num(c, 3);  // again: the same
  CHECK(c.data.micro_num == 4);
  auto off = *parse_train_config({kTrain, "--data.micro_num=5"});
  derive_micro_num(off, 8);
  CHECK(off.data.micro_num == 5);
  auto odd = *parse_train_config({kTrain, "--micro-batch-size=2", "--global-batch-size=24"});
  CHECK_THROWS_WITH(derive_micro_num(odd, 5),
                    "data.global_batch_size 24 is not a multiple of data.micro_bsz 2 x world size 5 = 10 "
                    "(data.micro_num = global_batch_size / (micro_bsz * world size))");
  auto both = *parse_train_config({kTrain, "--micro-batch-size=2", "--global-batch-size=24", "--data.micro_num=3"});
  CHECK_THROWS_WITH(derive_micro_num(both, 3), "data.micro_num 3 and data.global_batch_size 24 disagree: micro_bsz 2 x "
                                               "micro_num 3 x world size 3 = 18; give one of them");
  auto agree = *parse_train_config({kTrain, "--micro-batch-size=2", "--global-batch-size=24", "--data.micro_num=4"});
  derive_micro_num(agree, 3);
  CHECK(agree.data.micro_num == 4);
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--global-batch-size=-1"}),
                    Catch::Contains("data.global_batch_size must be >= 0"));
}

TEST_CASE("config: a size key above its limit, at 0 or negative is a usage error naming the key and the limit") {
  const std::string max = "9223372036854775807", two62 = "4611686018427387904";
  const std::pair<std::string, std::string> cases[] = {
      {"--model.num_layers=" + max, str("model.num_layers must be in [1, ", kMaxNumLayers, "], got ", max)},
      {"--model.num_layers=4294967295", str("model.num_layers must be in [1, ", kMaxNumLayers, "], got 4294967295")},
      {"--model.vocab_size=" + max, str("model.vocab_size must be in [1, ", kMaxVocabSize, "], got ", max)},
      {"--model.vocab_size=" + two62, str("model.vocab_size must be in [1, ", kMaxVocabSize, "], got ", two62)},
      {"--model.hidden_size=" + two62, str("model.hidden_size must be in [1, ", kMaxHiddenSize, "], got ", two62)},
      {"--model.mlp_ratio=1e300", str("model.mlp_ratio must be in (0, ", kMaxMlpRatio, "], got 1e+300")},
      {"--data.seq_len=" + max, str("data.seq_len must be in [1, ", kMaxSeqLen, "], got ", max)},
      {"--data.micro_bsz=" + max, str("data.micro_bsz must be in [1, ", kMaxMicroBsz, "], got ", max)},
      {"--data.micro_num=" + max, str("data.micro_num must be in [1, ", kMaxMicroNum, "], got ", max)},
      {"--model.hidden_size=0", "model.hidden_size must be in [1, "},
      {"--model.hidden_size=-8", "model.hidden_size must be in [1, "},
      {"--model.num_layers=0", "model.num_layers must be in [1, "},
      {"--model.vocab_size=-1", "model.vocab_size must be in [1, "},
      {"--model.mlp_ratio=0", "model.mlp_ratio must be in (0, "},
      {"--model.mlp_ratio=-2", "model.mlp_ratio must be in (0, "},
      {"--data.seq_len=0", "data.seq_len must be > 0"},
      {"--data.micro_bsz=-1", "data.micro_bsz must be > 0"},
      {"--data.micro_num=0", "data.micro_num must be > 0"},
  };
  for (const auto& [arg, want] : cases) {
    INFO(arg);
    CHECK_THROWS_AS(parse_train_config({kTrain, arg}), UsageError);
    CHECK_THROWS_WITH(parse_train_config({kTrain, arg}), Catch::Contains(want));
  }
  // Each within its limit, together past 64 bits: the parameter count names the keys.
  CHECK_THROWS_AS(parse_train_config({kTrain, "--model.hidden_size=1048576", "--model.num_layers=65536",
                                      "--model.mlp_ratio=64"}),
                  UsageError);
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--model.hidden_size=1048576", "--model.num_layers=65536",
                                        "--model.mlp_ratio=64"}),
                    Catch::Contains("the parameter count of model.hidden_size=1048576 model.num_layers=65536 "
                                    "model.mlp_ratio=64 model.vocab_size=103168 does not fit in 64 bits"));
  // At their limits the keys are taken.
  CHECK(parse_train_config({kTrain, "--model.num_layers=65536", "--model.vocab_size=2147483647",
                            "--data.seq_len=16777216", "--data.micro_bsz=1048576", "--model.mlp_ratio=64"}));
}

TEST_CASE("config: a value out of its range is a usage error (exit 2) whichever check finds it") {
  for (const std::string bad : {"--loss.label_smoothing=1.5", "--adam.adam_beta1=1", "--adam.lr=-1",
                                "--hybrid_zero_optimizer.clip_grad_norm=-1", "--monitor.alert_timeout_s=0",
                                "--lr_scheduler.warmup_ratio=2", "--parallel.timeout_s=0", "--data.total_steps=0"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_train_config({kTrain, bad}), UsageError);
  }
}

TEST_CASE("config: the optimizer, the schedule and the communicator take their sections' defaults") {
  const TrainConfig c;
  // The schedule config assembles from the defaults is the schedule's default, but for
  // data.total_steps (the data section's default, which optim/ cannot see).
  LrScheduleOptions s;
  s.total_steps = DataOptions{}.total_steps;
  CHECK(s.differences(c.lr_schedule_options()).empty());
  const OptimizerOptions o, from = c.optimizer_options();
  CHECK(o.lr == from.lr);
  CHECK(o.beta1 == from.beta1);
  CHECK(o.beta2 == from.beta2);
  CHECK(o.eps == from.eps);
  CHECK(o.weight_decay == from.weight_decay);
  CHECK(o.decay_embeddings == from.decay_embeddings);
  CHECK(o.overlap_update == from.overlap_update);
  CHECK(o.clip_grad_norm == from.clip_grad_norm);
  const CommOptions comm;
  CHECK(comm.timeout.count() == static_cast<int64_t>(c.parallel.timeout_s * 1000));
  CHECK(comm.backend == c.parallel.backend);
  ParallelOptions p;
  p.timeout_s = 2.5;
  p.backend = "gloo";
  CHECK(CommOptions(p).timeout.count() == 2500);
  CHECK(CommOptions(p).backend == "gloo");
}

TEST_CASE("config: the adam and alert checks are their structs', the ones the optimizer and Alerts run") {
  AdamOptions a;
  a.beta1 = 1;
  CHECK_THROWS_WITH(a.validate(), "adam.adam_beta1 must be in [0, 1), got 1");
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--adam.adam_beta1=1"}), "adam.adam_beta1 must be in [0, 1), got 1");
  OptimizerOptions o;
  o.eps = 0;
  CHECK_THROWS_WITH(Optimizer({}, o), "adam.adam_eps must be > 0, got 0");
  o.eps = 1e-8;
  o.clip_grad_norm = -1;
  CHECK_THROWS_WITH(Optimizer({}, o), "hybrid_zero_optimizer.clip_grad_norm must be >= 0 (0 = off), got -1");
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--hybrid_zero_optimizer.clip_grad_norm=-1"}),
                    "hybrid_zero_optimizer.clip_grad_norm must be >= 0 (0 = off), got -1");
  AlertOptions al;
  al.timeout_s = 0;
  CHECK_THROWS_WITH(Alerts(al, 0, "h"), "monitor.alert_timeout_s must be > 0, got 0");
  CHECK_THROWS_WITH(parse_train_config({kTrain, "--monitor.alert_timeout_s=0"}),
                    "monitor.alert_timeout_s must be > 0, got 0");
}
