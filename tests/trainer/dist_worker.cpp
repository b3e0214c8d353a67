// Test driver for the distributed pieces: one rank of a data-parallel job on a tiny language model
// with exactly predictable data, launched W times by tests/trainer/dist_train_test.cpp (torchrun's
// environment variables). It trains `steps` steps of a fixed GLOBAL batch with one or more
// configurations (micro_num, ZeRO-1 or not) in one process group and writes, per configuration:
//   OUT/CFG.losses      rank 0: "step loss" per line (global token-weighted loss, %.9g)
//   OUT/CFG.rR.weights  every rank: the final parameters (safetensors)
//   OUT/CFG.rR.samples  every rank: the global sample ids it consumed, one per line
// Checkpoints (--save-at/--resume-from, ZeRO only): rank 0 writes model.safetensors (parameters and
// consumed samples), each shard rank its ZeRO-1 shard. Faults (--fault=die|throw|stall) test that
// the other ranks go down with a report; a stalled rank blocks until a line can be read from
// --stall-until (a FIFO the test writes once the other ranks are gone), so no timing is assumed.
//
// Exit codes: 0 done, 1 loom::Error (the report), 2 anything else.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <csignal>
#include <cstdio>
#include <thread>

#include <torch/torch.h>

#include "communicator.h"
#include "grad_sync.h"
#include "launch.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/options.h"
#include "loom/sys.h"
#include "safetensors.h"
#include "sampler.h"
#include "zero.h"

namespace {

using namespace loom;

// Model and sequence sizes: tiny for the tests, larger for bench/dist_bench.sh.
int64_t g_vocab = 29;
int64_t g_hidden = 12;
int64_t g_seq_len = 8;

struct TinyLMImpl : torch::nn::Module {
  TinyLMImpl() {
    emb = register_module("emb", torch::nn::Embedding(g_vocab, g_hidden));
    fc = register_module("fc", torch::nn::Linear(g_hidden, g_hidden));
    head = register_module("head", torch::nn::Linear(g_hidden, g_vocab));
  }
  torch::Tensor forward(const torch::Tensor& tokens) { return head(torch::tanh(fc(emb(tokens)))); }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr}, head{nullptr};
};
TORCH_MODULE(TinyLM);

// Global sample s: a deterministic sequence; its last s % 4 labels carry no loss, so ranks hold
// different token counts and token weighting matters.
void sample(uint64_t s, torch::Tensor tokens, torch::Tensor labels) {
  auto tk = tokens.accessor<int64_t, 1>();
  auto lb = labels.accessor<int64_t, 1>();
  for (int64_t t = 0; t <= g_seq_len; ++t) {
    int64_t v = static_cast<int64_t>((s * 5 + t * 3 + s * t * 7) % g_vocab);
    if (t < g_seq_len) tk[t] = v;
    if (t > 0) lb[t - 1] = v;
  }
  for (int64_t t = g_seq_len - static_cast<int64_t>(s % 4); t < g_seq_len; ++t) lb[t] = -100;
}

struct Config {
  std::string name;
  int64_t micro_num = 1;
  bool zero = false;
};

Config parse_config(const std::string& s) {
  // "m2" or "m2z": micro_num 2, z = ZeRO-1 over all ranks.
  LOOM_CHECK(s.size() >= 2 && s[0] == 'm', "--configs: '", s, "' is not mN or mNz");
  Config c;
  c.name = s;
  c.zero = s.back() == 'z';
  c.micro_num = std::stoll(s.substr(1, s.size() - 1 - (c.zero ? 1 : 0)));
  return c;
}

void write_text(const std::string& path, const std::string& text) {
  sys::AtomicFile f(path);
  f.write(text);
  f.commit();
}

struct Args {
  std::string out, fault, stall_until, save_dir, resume_dir;
  std::vector<std::string> configs;
  int64_t steps = 4, global_batch = 12, save_at = -1, fault_rank = -1, fault_step = -1, bucket_bytes = 256;
  double timeout_s = 60, lr = 0.02;
};

void run_config(Communicator& comm, const Args& a, const Config& cfg) {
  const int W = comm.world(), R = comm.rank();
  LOOM_CHECK(a.global_batch % (cfg.micro_num * W) == 0, "global batch ", a.global_batch, " is not divisible by micro_num ",
             cfg.micro_num, " x world ", W);
  BatchLayout layout{a.global_batch / (cfg.micro_num * W), cfg.micro_num, W};

  torch::manual_seed(1234 + R);  // different on purpose: the broadcast must make them equal
  TinyLM model;
  std::vector<torch::Tensor> params = model->parameters();
  broadcast_parameters(comm, params);
  std::vector<bool> decay;
  std::vector<torch::Tensor> decay_params, plain_params;
  for (const auto& kv : model->named_parameters()) {
    bool d = kv.key().find("weight") != std::string::npos && kv.key().rfind("emb", 0) != 0;
    decay.push_back(d);
    (d ? decay_params : plain_params).push_back(kv.value());
  }
  OptimizerOptions ao;
  ao.clip_grad_norm = 0.5;
  ao.weight_decay = 0.1;

  std::unique_ptr<ZeroOptimizer> zero;
  std::unique_ptr<GradSync> sync;
  std::unique_ptr<torch::optim::AdamW> adamw;
  if (cfg.zero) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& kv : model->named_parameters()) named.emplace_back(kv.key(), kv.value());
    zero = std::make_unique<ZeroOptimizer>(comm, named, decay, ao, -1);
  } else {
    sync = std::make_unique<GradSync>(comm, params, GradSyncOptions{a.bucket_bytes});
    auto mk = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(a.lr).betas({ao.beta1, ao.beta2}).eps(ao.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay_params, mk(ao.weight_decay));
    groups.emplace_back(plain_params, mk(0.0));
    adamw = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(a.lr));
  }

  uint64_t consumed = 0;
  int64_t first_step = 0;
  if (!a.resume_dir.empty()) {
    LOOM_CHECK(cfg.zero, "--resume-from needs a ZeRO configuration (its state re-partitions)");
    safetensors::Reader r(a.resume_dir + "/model.safetensors");
    torch::NoGradGuard ng;
    for (const auto& kv : model->named_parameters()) kv.value().copy_(r.get(kv.key()));
    consumed = std::stoull(r.metadata().at("consumed_samples"));
    first_step = std::stoll(r.metadata().at("step"));
    std::vector<std::string> shards;
    for (const std::string& f : sys::list_files(a.resume_dir))
      if (sys::basename(f).rfind("zero1_", 0) == 0) shards.push_back(f);
    zero->load_shards(shards);
  }

  std::string losses, samples;
  const int64_t B = layout.micro_bsz;
  double tokens_trained = 0;
  auto t_start = std::chrono::steady_clock::now();
  for (int64_t step = first_step; step < a.steps; ++step) {
    comm.set_step(step);
    if (step == a.fault_step && R == a.fault_rank) {
      if (a.fault == "die") std::raise(SIGKILL);
      if (a.fault == "throw") LOOM_FAIL("injected fault at step ", step);
      if (a.fault == "stall") {
        LOOM_CHECK(!a.stall_until.empty(), "--fault=stall needs --stall-until FIFO");
        std::ifstream release(a.stall_until);  // opening a FIFO blocks until a writer opens it
        std::string line;
        std::getline(release, line);
      }
    }
    std::vector<torch::Tensor> toks, labs;
    double local_tokens = 0;
    for (int64_t m = 0; m < cfg.micro_num; ++m) {
      torch::Tensor tk = torch::empty({B, g_seq_len}, torch::kInt64), lb = torch::empty({B, g_seq_len}, torch::kInt64);
      for (int64_t row = 0; row < B; ++row) {
        uint64_t s = layout.stream_index(consumed, R, m, row);
        sample(s, tk[row], lb[row]);
        samples += std::to_string(s) + "\n";
      }
      local_tokens += static_cast<double>((lb != -100).sum().item<int64_t>());
      toks.push_back(tk);
      labs.push_back(lb);
    }
    // The loss is summed over tokens and divided by the step's GLOBAL token count.
    const double global_tokens = comm.all_reduce_scalar(local_tokens);
    double loss_sum = 0;
    for (int64_t m = 0; m < cfg.micro_num; ++m) {
      if (sync) sync->prepare(m + 1 == cfg.micro_num);
      torch::Tensor logits = model->forward(toks[m]);
      torch::Tensor l = torch::nn::functional::cross_entropy(
          logits.view({-1, g_vocab}), labs[m].view({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(-100));
      loss_sum += l.item<double>();
      (l / global_tokens).backward();
    }
    if (zero) {
      zero->step(a.lr);
      zero->zero_grad();
    } else {
      sync->finish();
      torch::nn::utils::clip_grad_norm_(params, ao.clip_grad_norm);
      adamw->step();
      adamw->zero_grad();
    }
    double loss = comm.all_reduce_scalar(loss_sum) / global_tokens;
    tokens_trained += global_tokens;
    char line[64];
    std::snprintf(line, sizeof(line), "%lld %.9g\n", static_cast<long long>(step), loss);
    losses += line;
    consumed += layout.global_batch();

    if (step + 1 == a.save_at) {
      LOOM_CHECK(zero, "--save-at needs a ZeRO configuration");
      sys::make_dirs(a.save_dir);
      if (R == 0) {
        safetensors::NamedTensors ts;
        for (const auto& kv : model->named_parameters()) ts.emplace_back(kv.key(), kv.value().detach());
        safetensors::write(a.save_dir + "/model.safetensors", ts,
                           {{"consumed_samples", std::to_string(consumed)}, {"step", std::to_string(step + 1)}});
      }
      if (zero->writes_shard()) zero->save_shard(a.save_dir + "/zero1_" + std::to_string(R) + ".safetensors");
      comm.barrier();
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  // tokens/s: loss tokens of all ranks per second of the training loop (start-up excluded).
  log::info(cfg.name, ": ", static_cast<int64_t>(tokens_trained), " tokens in ", seconds, " s = ",
            static_cast<int64_t>(tokens_trained / seconds), " tokens/s over ", W, " ranks");
  const std::string base = a.out + "/" + cfg.name;
  if (R == 0) write_text(base + ".losses", losses);
  write_text(base + ".r" + std::to_string(R) + ".samples", samples);
  safetensors::NamedTensors ts;
  for (const auto& kv : model->named_parameters()) ts.emplace_back(kv.key(), kv.value().detach());
  safetensors::write(base + ".r" + std::to_string(R) + ".weights", ts);
  if (sync) log::info(cfg.name, ": ", sync->num_buckets(), " buckets, ", sync->launched_during_backward(),
                      " launched during backward");
}

int worker_main(int argc, char** argv) {
  OptionParser op("dist_worker", "dist_worker --out DIR [options]  (rank from the launch environment)");
  Args a;
  op.options().add_options()
      ("out", po::value(&a.out)->required(), "output folder")
      ("configs", po::value(&a.configs)->multitoken()->required(), "mN or mNz (ZeRO-1), several")
      ("steps", po::value(&a.steps)->default_value(4), "steps")
      ("global-batch", po::value(&a.global_batch)->default_value(12), "samples per step over all ranks")
      ("lr", po::value(&a.lr)->default_value(0.02), "learning rate")
      ("bucket-bytes", po::value(&a.bucket_bytes)->default_value(256), "gradient bucket size")
      ("timeout-s", po::value(&a.timeout_s)->default_value(60), "collective timeout")
      ("save-at", po::value(&a.save_at)->default_value(-1), "save a checkpoint after this many steps")
      ("save-dir", po::value(&a.save_dir)->default_value(""), "checkpoint folder")
      ("resume-from", po::value(&a.resume_dir)->default_value(""), "checkpoint folder to resume from")
      ("fault", po::value(&a.fault)->default_value(""), "die | throw | stall")
      ("stall-until", po::value(&a.stall_until)->default_value(""), "FIFO whose line ends a stall")
      ("fault-rank", po::value(&a.fault_rank)->default_value(-1), "rank that faults")
      ("fault-step", po::value(&a.fault_step)->default_value(-1), "step at which it faults")
      ("vocab", po::value(&g_vocab)->default_value(29), "vocabulary size")
      ("hidden", po::value(&g_hidden)->default_value(12), "hidden size")
      ("seq-len", po::value(&g_seq_len)->default_value(8), "tokens per sample");
  if (!op.parse(argc, argv)) return 0;

  LaunchInfo li = read_launch(process_environment());
  log::set_rank(li.rank);
  torch::set_num_threads(1);  // several ranks share two cores
  CommOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000));
  std::unique_ptr<Communicator> comm;
  try {
    comm = std::make_unique<Communicator>(li, co, torch::Device(torch::kCPU));
    RankRow mine{li.rank, li.local_rank, li.host, "cpu"};
    std::vector<RankRow> table = gather_rank_table(*comm, mine);
    if (li.rank == 0) log::info(format_rank_table(table));
    log::info("launch ", li.launcher, ": run folder ", run_dir_name(shared_launch_time(*comm)));
    for (const std::string& c : a.configs) run_config(*comm, a, parse_config(c));
    comm->barrier();
    return 0;
  } catch (const std::exception& e) {
    log::error(e.what());
    if (comm) comm->report_failure(e.what());
    return dynamic_cast<const loom::Error*>(&e) ? 1 : 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return worker_main(argc, argv);
  } catch (const std::exception& e) {
    loom::log::error(e.what());
    return 1;
  }
}
