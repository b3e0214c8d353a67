#include "startup.h"

#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

#include "data_manifest.h"
#include "device_peak.h"
#include "loom/cli.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/spm_model.h"
#include "loom/sys.h"
#include "memory_usage.h"
#include "run_state.h"

#ifdef LOOM_CUDA_KERNELS
#include "cuda_memory.h"
#endif

namespace loom {

namespace {

double round2(double x) { return std::round(x * 100) / 100; }

// Seconds since this process was launched (its start time in /proc); -1 if unknown.
double seconds_since_launch() {
  std::ifstream stat("/proc/self/stat"), up("/proc/uptime");
  std::string line;
  double uptime = 0;
  if (!std::getline(stat, line) || !(up >> uptime)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(line.substr(paren + 2));
  std::string f;
  for (int i = 3; i < 22 && fields >> f; ++i) {
  }
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return -1;
  return uptime - static_cast<double>(start_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

void StartupClock::phase(const char* what) {
  const auto now = std::chrono::steady_clock::now();
  log::info("start-up: ", what, " ", round2(std::chrono::duration<double>(now - last_).count()), " s, host RSS ",
            round2(static_cast<double>(current_rss_bytes()) / (1 << 30)), " GiB");
  last_ = now;
}

void StartupClock::first_step_done() {
  phase("first step");
  const double since_launch = seconds_since_launch();
  log::info("start-up: launch -> first step ", since_launch >= 0 ? str(round2(since_launch), " s") : "unknown",
            ", host peak RSS ", round2(static_cast<double>(peak_rss_bytes()) / (1 << 30)), " GiB");
}

void keep_freed_memory_in_heap() {
  // With glibc's defaults a freed block above the mmap threshold goes back to the kernel and the
  // next step faults its pages in again (~0.5M minor faults in 12 steps of bench/train_bench.sh,
  // ~10% of the step). Keeping it costs nothing: the next step needs the same peak.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  // mallopt returns 0 for a value it refuses: only speed is at stake, so say so and go on.
  const bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) != 0 &&         // glibc's maximum; larger blocks still use mmap
                  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) != 0 &&  // never shrink between steps
                  mallopt(M_TOP_PAD, 256 << 20) != 0;                 // grow the heap in large steps
  if (!ok) log::warn("mallopt refused a setting: freed activations may go back to the kernel every step");
}

std::string read_tokenizer_model(const DataOptions& data, const TrainData& train_data) {
  if (data.tokenizer.empty()) return "";
  // The model the data was tokenized with goes into every checkpoint: checked here, not trusted.
  std::string bytes = spm::read_spm_model_bytes(data.tokenizer);
  const uint64_t have = xxh64(bytes.data(), bytes.size());
  const uint64_t want = train_data.tokenizer().model_fingerprint;
  LOOM_CHECK(want == 0 || have == want, "data.tokenizer ", data.tokenizer, " (XXH64 ", hex64(have),
             ") is not the model the data in ", data.train_folder, " was tokenized with (XXH64 ", hex64(want), ")");
  if (want == 0)
    log::job_warn("data.tokenizer ", data.tokenizer, ": the data records no tokenizer fingerprint to check it against");
  return bytes;
}

std::string resolve_resume_dir(const std::string& resume, const Checkpointer& ckpt, const std::string& run_ini) {
  std::string dir;
  const std::string& folder = ckpt.options().folder;
  if (resume == "auto" || resume == "auto-or-fresh") {
    const Checkpointer::Choice pick = ckpt.choose_resume(check_state_step);
    dir = pick.dir;
    if (dir.empty() && !pick.rejected.empty()) {
      std::string why;
      for (const std::string& r : pick.rejected) why += "\n  " + r;
      // Starting fresh would overwrite them step by step: only on request.
      LOOM_CHECK(resume == "auto-or-fresh", "--resume auto: no checkpoint in ", folder, " validates:", why,
                 "\nRepair or move them, or pass --resume auto-or-fresh to start fresh over them");
      log::warn("--resume auto-or-fresh: no checkpoint in ", folder, " validates, starting fresh:", why);
    } else if (dir.empty()) {
      log::info("--resume ", resume, ": no checkpoint in ", folder, ", starting fresh");
    }
  } else if (!resume.empty()) {
    dir = resume;
    check_state_step(dir, validate_checkpoint_named(dir));
  }
  if (dir.empty()) return dir;
  // Equal shapes load under another architecture (more heads, another rotary base): refuse what
  // would silently train on as a different model; --init-from takes weights only.
  const std::vector<std::string> diff = model_key_differences(sys::read_file(dir + "/config.ini"), run_ini);
  std::string list;
  for (const std::string& d : diff) list += "\n  " + d;
  LOOM_CHECK(diff.empty(), dir, ": the checkpoint's model differs from this run's:", list,
             "\nResume with its model.* values, or start from its weights only with --init-from ", dir, " (a fresh run)");
  return dir;
}

namespace {

// The schedule keys of a config.ini text; absent keys keep `now`'s values.
LrScheduleOptions saved_schedule(const std::string& ini, const LrScheduleOptions& now, const std::string& path) {
  LrScheduleOptions o = now;
  const auto text = [&](const char* key, std::string& into) {
    const std::string v = ini_value(ini, key);
    if (!v.empty()) into = v;
  };
  const auto number = [&](const char* key, auto& into) {
    const std::string v = ini_value(ini, key);
    if (v.empty()) return;
    try {
      into = static_cast<std::remove_reference_t<decltype(into)>>(std::stod(v));
    } catch (const std::exception&) {
      LOOM_FAIL(path, ": ", key, " = '", v, "' is not a number");
    }
  };
  text("lr_scheduler.kind", o.kind);
  number("adam.lr", o.base_lr);
  number("lr_scheduler.warmup_ratio", o.warmup_ratio);
  o.warmup_steps = -1;  // a checkpoint without the key predates it: its warmup came from the ratio
  number("lr_scheduler.warmup_steps", o.warmup_steps);
  number("lr_scheduler.init_steps", o.init_steps);
  number("lr_scheduler.eta_min", o.eta_min);
  number("data.total_steps", o.total_steps);
  number("lr_scheduler.decay_ratio", o.decay_ratio);
  return o;
}

}  // namespace

std::string schedule_ini(const LrScheduleOptions& o) {
  char lr[32], ratio[32], eta[32], decay[32];
  std::snprintf(lr, sizeof lr, "%.17g", o.base_lr);
  std::snprintf(ratio, sizeof ratio, "%.17g", o.warmup_ratio);
  std::snprintf(eta, sizeof eta, "%.17g", o.eta_min);
  std::snprintf(decay, sizeof decay, "%.17g", o.decay_ratio);
  return str("[adam]\nlr = ", lr, "\n[data]\ntotal_steps = ", o.total_steps, "\n[lr_scheduler]\nkind = ", o.kind,
             "\nwarmup_ratio = ", ratio, "\nwarmup_steps = ", o.warmup_steps, "\ninit_steps = ", o.init_steps,
             "\neta_min = ", eta, "\ndecay_ratio = ", decay, "\n");
}

LrScheduleOptions schedule_on_resume(const std::string& resume_dir, const LrScheduleOptions& now,
                                     const std::string& on_resume, int64_t updates) {
  // The schedule in force when the checkpoint was saved: a restart under on_resume=keep continues
  // the kept schedule, not the one config.ini's keys describe.
  const std::string recorded = resume_dir + "/" + kCheckpointSchedule;
  const std::string path = sys::exists(recorded) ? recorded : resume_dir + "/config.ini";
  const LrScheduleOptions saved = saved_schedule(sys::read_file(path), now, path);
  const std::string diff = saved.differences(now);
  if (diff.empty()) return now;
  const double before = LrSchedule(saved).lr(updates), after = LrSchedule(now).lr(updates);
  log::job_warn("the learning-rate schedule differs from the checkpoint's (", diff, "): lr at update ", updates,
                " would be ", format_number(before), " as saved, ", format_number(after), " with this run's keys");
  if (on_resume == "apply") {
    log::info("lr_scheduler.on_resume=apply: this run's schedule from update ", updates, " on: lr ",
              format_number(before), " -> ", format_number(after));
    return now;
  }
  if (on_resume == "keep") {
    log::info("lr_scheduler.on_resume=keep: the checkpoint's schedule (lr ", format_number(before), ")",
              now.total_steps > saved.total_steps ? str("; updates past ", saved.total_steps, " hold eta_min") : "");
    return saved;
  }
  throw UsageError(str(resume_dir, ": the learning-rate schedule differs from the checkpoint's: ", diff,
                       ". Choose: --lr_scheduler.on_resume=apply (this run's keys from update ", updates, ": lr ",
                       format_number(before), " -> ", format_number(after),
                       ") or --lr_scheduler.on_resume=keep (the checkpoint's keys); a run meant to be extended "
                       "is best run with lr_scheduler.kind=wsd"));
}

void check_resumed_data(const std::string& resume_dir, const std::string& saved_json, const TrainData& data,
                        int64_t seq_len, uint64_t consumed) {
  if (saved_json.empty()) return;  // a checkpoint from before loom recorded its data
  const std::string where = resume_dir + "/state.json";
  const std::vector<std::string> changes =
      data_changes(DataManifest::from_json(saved_json, where), manifest_of(data, seq_len), resume_dir);
  if (changes.empty()) return;
  std::string list;
  for (const std::string& c : changes) list += (list.empty() ? "" : "; ") + c;
  const uint64_t n = data.epoch_samples();
  const std::string where_now = data.mixture() == Mixture::kScaled
                                    ? str("epoch ", n ? consumed / n : 0, " of ", n, " samples")
                                    : std::string("data.mixture=proportional: each dataset's share from here");
  log::job_warn("resuming onto other data than ", resume_dir, " trained on: ", list, ". The sampler goes on at sample ",
                consumed, " of the stream over this data (", where_now,
                "): a new order from here, so packs seen before this resume may come again in this epoch");
}

std::string tokenizer_from_checkpoint(const std::string& resume_dir, const TrainData& data) {
  const std::string path = resume_dir + "/" + kCheckpointTokenizer;
  if (!sys::exists(path)) return "";
  std::string bytes = sys::read_file(path);
  const uint64_t want = data.tokenizer().model_fingerprint;
  if (want == 0 || xxh64(bytes.data(), bytes.size()) != want) return "";
  log::info("data.tokenizer: the checkpoint's ", path, " (the model the data was tokenized with) goes into new checkpoints");
  return bytes;
}

void warn_if_global_batch_changed(const std::string& resume_dir, const DataOptions& data, int64_t saved_world,
                                  int64_t world, int64_t now) {
  // A checkpoint saved before its config recorded these keys is compared at the current sizes.
  const std::string saved_ini = sys::read_file(resume_dir + "/config.ini");
  auto saved_int = [&](const char* key, int64_t current) -> int64_t {
    const std::string v = ini_value(saved_ini, key);
    try {
      return v.empty() ? current : std::stoll(v);
    } catch (const std::exception&) {
      return current;
    }
  };
  const int64_t old_bsz = saved_int("data.micro_bsz", data.micro_bsz);
  const int64_t old_num = saved_int("data.micro_num", data.micro_num);
  const int64_t old_world = saved_world > 0 ? saved_world : world;
  const int64_t before = old_bsz * old_num * old_world;
  if (before == now) return;
  const int64_t per_micro = data.micro_bsz * world;
  log::job_warn("the global batch changes on this resume: ", before, " packs per step (micro_bsz ", old_bsz,
                " x micro_num ", old_num, " x world size ", old_world, ") before, ", now, " now (micro_bsz ",
                data.micro_bsz, " x micro_num ", data.micro_num, " x world size ", world, "); steps from here see ", now,
                " packs each, and the learning-rate schedule still counts steps. Keep the global batch with "
                "data.micro_num = ",
                before % per_micro == 0 ? std::to_string(before / per_micro) : std::string("(none: not divisible)"));
}

double resolve_peak_tflops(double configured, const torch::Device& device, std::string* source) {
  if (configured > 0) {
    *source = "job.peak_tflops";
    return configured;
  }
  std::string name;
#ifdef LOOM_CUDA_KERNELS
  if (device.is_cuda()) name = cuda::device_name(device.has_index() ? device.index() : 0);
#endif
  const double peak = known_bf16_peak_tflops(name);
  if (peak > 0) *source = "the dense bf16 peak of " + name;
  else if (device.is_cuda()) *source = "no known peak for GPU '" + name + "': set job.peak_tflops for an mfu field";
  else *source = "a CPU has no known peak: set job.peak_tflops for an mfu field";
  return peak;
}

}  // namespace loom
