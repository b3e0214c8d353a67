#include "plan_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "loom/cli.h"
#include "loom/error.h"
#include "size_limits.h"

#ifdef LOOM_CUDA_KERNELS
#include <torch/cuda.h>

#include "cuda_memory.h"
#endif

namespace loom {

bool fp8_weight_cache_wanted(const TrainConfig& c) {
  return c.model.fp8 && c.data.micro_num > 1 && c.parallel.zero1 == 1;
}

PlanInputs plan_inputs(const TrainConfig& c, int64_t world_size, uint64_t device_bytes, const AttentionCaps& caps) {
  PlanInputs in;
  in.model = c.model;
  in.micro_bsz = c.data.micro_bsz;
  in.seq_len = c.data.seq_len;
  in.micro_num = c.data.micro_num;
  in.model.fp8_weight_cache = fp8_weight_cache_wanted(c);
  in.world_size = world_size;
  in.zero1 = c.parallel.zero1;
  in.zero_stage = c.parallel.zero_stage;
  in.cuda = c.job.device.rfind("cuda", 0) == 0;
  in.attention =
      choose_attention(caps, c.model.dtype, c.model.head_dim(), parse_attention_kernel(c.job.attention),
                       c.job.deterministic).kernel;
  in.attention_source = caps.source;
  in.device_bytes = device_bytes;
  in.margin = 0;
  return in;
}

uint64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

namespace {

// Device memory beyond any machine (an exbibyte), so that its bytes fit in 64 bits.
constexpr double kMaxDeviceGiB = double(uint64_t{1} << 30);

constexpr const char* kUsage =
    "loom-train plan --config F.ini [--section.key=value ...] [--world-size W] [--device-memory-gib G] [--json]\n"
    "  Prints the per-rank memory plan of a run (parameters, gradients, optimizer state, activations,\n"
    "  logits and loss, workspace) against one device's memory, allocating nothing. The device's memory\n"
    "  is G GiB, else the visible GPU's (CUDA builds), else this host's RAM for job.device=cpu.\n"
    "  --world-size W (default 1: the launch environment is not read). --json: one JSON object.\n"
    "  Exit code 0 when it fits, 1 when it does not, 2 for a value outside its range or size limit\n"
    "  (loom/cli.h; the limits: docs/TRAIN.md).\n";

}  // namespace

MemoryPlan plan_for_device(const TrainConfig& c, int64_t world, uint64_t device, const AttentionCaps& caps) {
  const auto resolve = [&c](PlanInputs in) {
    if (c.model.checkpoint_auto) {
      in.margin = c.model.checkpoint_margin;
      in.model.checkpoint = auto_checkpoint_fraction(in);
      in.margin = 0;
    }
    return in;
  };
  const PlanInputs base = plan_inputs(c, world, device, caps);
  PlanInputs in = resolve(base);
  if (in.model.fp8_weight_cache) {
    // The cache saves a quantization pass per weight and micro-batch; a recomputed layer or a run
    // that no longer fits costs more than that, so then the weights are quantized every time.
    PlanInputs without = base;
    without.model.fp8_weight_cache = false;
    without = resolve(without);
    if (in.model.checkpointed_layers() > without.model.checkpointed_layers() ||
        (!plan_memory(in).fits && plan_memory(without).fits))
      in = without;
  }
  return plan_memory(in);
}

namespace {

uint64_t device_memory(const TrainConfig& c) {
  if (c.job.device.rfind("cuda", 0) != 0) return host_memory_bytes();
#ifdef LOOM_CUDA_KERNELS
  if (torch::cuda::is_available()) {
    const torch::Device d(c.job.device);
    return static_cast<uint64_t>(cuda::memory_stats(d.has_index() ? d.index() : 0).device_total);
  }
#endif
  throw UsageError("loom-train plan: job.device=" + c.job.device + " and no GPU here: give --device-memory-gib G");
}

// The kernels of the device a `plan` command describes: probed where it is visible, else assumed.
AttentionCaps plan_attention_caps(const TrainConfig& c) {
  const bool on_cuda = c.job.device.rfind("cuda", 0) == 0;
#ifdef LOOM_CUDA_KERNELS
  if (on_cuda && torch::cuda::is_available()) return probe_attention_caps(torch::Device(c.job.device), c.model.head_dim());
#endif
  return on_cuda ? assumed_attention_caps(true) : probe_attention_caps(torch::kCPU, c.model.head_dim());
}

}  // namespace

MemoryPlan plan_for_run(const TrainConfig& c, int64_t world_size, const torch::Device& device, const AttentionCaps& caps) {
  uint64_t bytes = host_memory_bytes();
#ifdef LOOM_CUDA_KERNELS
  if (device.is_cuda())
    bytes = static_cast<uint64_t>(cuda::memory_stats(device.has_index() ? device.index() : 0).device_total);
#endif
  return plan_for_device(c, world_size, bytes, caps);
}

int run_plan(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  int64_t world = 1;
  double gib = 0;
  bool json = false, folder_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    // plan's own flags in either spelling (--world_size = --world-size), as every key of loom.
    std::string a = args[i];
    if (a.rfind("--world_size", 0) == 0 || a.rfind("--device_memory_gib", 0) == 0) {
      const size_t end = std::min(a.find('='), a.size());
      std::replace(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
    }
    auto value = [&](const std::string& name) -> std::string {
      if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
      if (i + 1 >= args.size()) throw UsageError("loom-train plan: " + name + " needs a value");
      return args[++i];
    };
    auto number = [&](const std::string& name, const std::string& text) {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != text.size() || !std::isfinite(v) || v <= 0)
        throw UsageError("loom-train plan: " + name + "='" + text + "': expected a positive number");
      return v;
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage << "\nThe run's keys (loom-train --help):\n";
      parse_train_config({"--help"});
      return kExitOk;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--world-size" || a.rfind("--world-size=", 0) == 0) {
      const double w = number("--world-size", value("--world-size"));
      if (w != std::floor(w) || w > static_cast<double>(kMaxWorldSize))
        throw UsageError(str("loom-train plan: --world-size must be a whole number in [1, ", kMaxWorldSize, "], got ",
                             w));
      world = static_cast<int64_t>(w);
    } else if (a == "--device-memory-gib" || a.rfind("--device-memory-gib=", 0) == 0) {
      gib = number("--device-memory-gib", value("--device-memory-gib"));
      if (gib > kMaxDeviceGiB)
        throw UsageError(str("loom-train plan: --device-memory-gib must be at most ", kMaxDeviceGiB, " (2^30 GiB), got ",
                             gib));
    } else {
      if (a.rfind("--data.train_folder", 0) == 0) folder_given = true;
      rest.push_back(a);
    }
  }
  // The plan reads no data: the key parse_train_config requires needs no real folder.
  if (!folder_given) rest.push_back("--data.train_folder=(the plan reads no data)");
  const std::optional<TrainConfig> c = parse_train_config(rest);
  LOOM_ASSERT(c.has_value(), "--help was handled above");
  const uint64_t device = gib > 0 ? static_cast<uint64_t>(gib * double(uint64_t{1} << 30)) : device_memory(*c);
  const MemoryPlan p = plan_for_device(*c, world, device, plan_attention_caps(*c));
  if (json) std::cout << p.to_json() << "\n";
  else std::cout << p.to_text() << "\n";
  return p.fits ? kExitOk : kExitFailed;
}

}  // namespace loom
