#include "memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "chunked_loss.h"
#include "cpu_attention.h"
#include "cudnn_attention.h"
#include "loom/cli.h"
#include "loom/error.h"
#include "loom/json_text.h"
#include "loom/progress.h"
#include "size_limits.h"

namespace loom {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
// What the runtime takes besides tensors the plan names: cuBLAS/cuBLASLt and flash workspaces in
// the caching allocator; on the CPU, LibTorch's and OpenBLAS's own resident memory.
constexpr uint64_t kCudaRuntimeBytes = uint64_t{256} << 20;
constexpr uint64_t kCpuRuntimeBytes = uint64_t{256} << 20;

Size dtype_bytes(torch::Dtype d) { return d == torch::kFloat32 ? 4 : 2; }

int64_t shards_of(const PlanInputs& in) {
  if (in.zero1 == 1) return 1;
  return in.zero1 <= 0 ? in.world_size : in.zero1;
}

// Activations of one micro-batch, per rank: what each layer keeps for backward.
struct LayerBytes {
  Size full = 0;          // a layer that is not recomputed
  Size checkpointed = 0;  // a recomputed layer: its input
  Size transient = 0;     // one layer's gradients in flight during backward
  Size shared = 0;        // once per micro-batch: the mask/bias of the masked path, cuDNN's windows' bias
  Size weight_copies = 0; // held all step: the FP8 linears' cached e4m3 weights (model.fp8_weight_cache)
};

LayerBytes layer_bytes(const PlanInputs& in) {
  const ModelOptions& m = in.model;
  const Size b = dtype_bytes(m.dtype), B = in.micro_bsz, T = in.seq_len, tok = B * T;
  const Size C = m.hidden_size, H = m.num_attention_heads, K = m.kv_heads(), D = m.head_dim(), F = m.ffn_hidden();
  LayerBytes l;
  // Two norms (input and output each), q k v, the attention output, SwiGLU's inputs and product.
  const Size per_token = (4 * C + C + 2 * K * D + C + 3 * F) * b + 2 * 4;  // + fp32 rstd of each norm
  l.full = tok * per_token;
  switch (in.attention) {
    case AttentionKernel::kCudnnSegments:
    case AttentionKernel::kFlashVarlen:
      l.full += tok * H * 4;  // log-sum-exp
      break;
    case AttentionKernel::kCpuSegments:
      // q/k/v in the kernel's layout and its output, then the probabilities of each document's
      // causal triangle: at most one document per row, T (T + kQueryBlock) / 2 per head.
      l.full += tok * (C + 2 * K * D + C) * 4 + B * H * (T * (T + kQueryBlock) / 2) * 4;
      break;
    case AttentionKernel::kMasked:
      l.full += B * H * T * T * b;        // softmax probabilities
      l.shared = B * T * T * (1 + 4);     // bool mask and its fp32 bias, shared by the layers
      break;
  }
  // model.precision=fp8, for each linear that runs in FP8 (fp8_linear_applies: rows, in and out
  // features multiples of 16; another runs in bf16): W's transposed e4m3 copy (1 byte a weight)
  // until its backward, and a 1-byte copy of its input in place of the b-byte input the linear
  // would keep. The norm outputs and the SwiGLU product are then kept by nobody; flash keeps the
  // attention output anyway, so wo's copy comes beside it. With the weight cache both e4m3 copies
  // of every weight (2 bytes) are held all step instead, recomputed layers' too.
  if (m.fp8) {
    const auto fp8 = [tok](Size in_features, Size out_features) {
      return tok.value() % 16 == 0 && in_features.value() % 16 == 0 && out_features.value() % 16 == 0;
    };
    Size add = 0, drop = 0, weights = 0;
    if (fp8(C, (H + 2 * K) * D)) weights += C * (H + 2 * K) * D, add += tok * C, drop += tok * C * b;  // wqkv
    if (fp8(H * D, C)) weights += H * D * C, add += tok * H * D;                                       // wo
    if (fp8(C, F)) weights += 2 * C * F, add += tok * C, drop += tok * C * b;  // w1, w2: one copy of their input
    if (fp8(F, C)) weights += F * C, add += tok * F, drop += tok * F * b;      // w3
    if (m.fp8_weight_cache)
      l.weight_copies = 2 * weights;
    else
      add += weights;
    l.full = l.full + add - drop;  // drop < l.full: it is part of per_token
  }
  l.checkpointed = tok * C * b;
  l.transient = tok * (3 * F + 2 * C) * b;
  if (in.attention == AttentionKernel::kCudnnSegments) {
    // Its backward accumulates dQ in fp32 and keeps a row sum per head, in its workspace.
    l.transient += tok * H * (D + 1) * 4;
    // Short documents' windows: a bias [n, 1, W, W] for at most n windows, built from a bool
    // comparison of as many entries, held by the forward's thread and by the recomputing
    // backward's.
    const Size W = kCudnnWindow;
    const Size n = cudnn_most_windows(static_cast<int64_t>(tok.value()), kCudnnWindow);
    l.shared += n * W * W * (2 * b + 1);
  }
  return l;
}

Size logits_and_loss_bytes(const PlanInputs& in) {
  const ModelOptions& m = in.model;
  const Size tok = Size(in.micro_bsz) * in.seq_len, V = m.vocab_size, C = m.hidden_size;
  const Size chunk = std::min(tok, std::max(Size(1), Size(ChunkedLossOptions::kChunkBytes) / (V * 4)));
  return chunk * V * 4           // one chunk's fp32 logits
         + tok * C * 4           // the hidden states' gradient, computed in forward
         + tok * 4               // per-token log-sum-exp
         + 2 * tok * C * dtype_bytes(m.dtype);  // the final norm's input and output
}

void fill(MemoryPlan& p) {
  const PlanInputs& in = p.in;
  const ModelOptions& m = in.model;
  const Size P = count_parameters(m), b = dtype_bytes(m.dtype);
  p.num_parameters = static_cast<int64_t>(P.value());
  p.zero_shards = shards_of(in);
  const bool sharded = in.zero1 != 1;
  const Size S = p.zero_shards;
  const int64_t stage = sharded ? in.zero_stage : 0;
  const Size L = count_parameters_per_layer(m), R = P - m.num_layers * L;
  const Size unit = std::max(L, Size(m.vocab_size) * m.hidden_size);  // a layer, the embedding or head
  const LayerBytes l = layer_bytes(in);
  const int64_t N = m.num_layers;
  // The FP8 weight cache beside the weights themselves.
  const Size parameters = (stage == 3 ? (P + S - 1) / S * b + (R + 3 * L) * b : P * b) + N * l.weight_copies;
  Size gradients = (stage >= 2 ? (R + 2 * L) * b : P * b) + (sharded ? (4 * P + S - 1) / S : 0);
  const Size optimizer_state = sharded ? (12 * P + S - 1) / S : 8 * P + (b < 4 ? 4 * P : 0);
  p.checkpointed_layers = m.checkpointed_layers();
  const Size kept = (N - p.checkpointed_layers) * l.full + p.checkpointed_layers * l.checkpointed;
  // In backward a recomputed layer is live again, one at a time.
  const Size activations = kept + (p.checkpointed_layers > 0 ? l.full : 0) + l.transient + l.shared;
  if (in.cuda && !sharded && in.micro_num == 1) {
    // The replicated optimizer on CUDA releases the gradients after each update: they grow from
    // nothing during the backward while the activations shrink. At the backward's start the head,
    // embedding and final norm have theirs and a layer is making its own; at its end all exist
    // and the activations are gone. Over several micro-batches the first one's are whole while
    // the next one's activations are kept, so then all of them count.
    gradients = std::max((R + L) * b, P * b > activations ? P * b - activations : 0);
  }
  const Size logits_and_loss = logits_and_loss_bytes(in);
  const Size workspace = (sharded ? 12 * unit + unit * b : 0) + (in.cuda ? kCudaRuntimeBytes : kCpuRuntimeBytes);
  const Size total = parameters + gradients + optimizer_state + activations + logits_and_loss + workspace;
  p.parameters = parameters.value();
  p.gradients = gradients.value();
  p.optimizer_state = optimizer_state.value();
  p.activations = activations.value();
  p.logits_and_loss = logits_and_loss.value();
  p.workspace = workspace.value();
  p.total = total.value();
  p.layer_full_bytes = l.full.value();
  p.layer_checkpointed_bytes = l.checkpointed.value();
  p.fp8_weight_copies = (N * l.weight_copies).value();
  p.fits = in.device_bytes > 0 && static_cast<double>(p.total) <= (1.0 - in.margin) * static_cast<double>(in.device_bytes);
}

// The plan of in; a size past 64 bits is the keys' fault (exit 2), named with their values.
MemoryPlan plan_only(const PlanInputs& in) {
  MemoryPlan p;
  p.in = in;
  try {
    fill(p);
  } catch (const SizeOverflow& e) {
    const ModelOptions& m = in.model;
    throw UsageError(str("the memory plan of model.hidden_size=", m.hidden_size, " model.num_layers=", m.num_layers,
                         " model.mlp_ratio=", m.mlp_ratio, " model.vocab_size=", m.vocab_size, " data.seq_len=",
                         in.seq_len, " data.micro_bsz=", in.micro_bsz, " needs more bytes than 64 bits count (",
                         e.what(), "): lower one of these keys"));
  }
  return p;
}

// Whether the plan of in fits (its total into *total when given); a plan past 64 bits does not.
bool plan_fits(const PlanInputs& in, uint64_t* total) {
  MemoryPlan p;
  p.in = in;
  try {
    fill(p);
  } catch (const SizeOverflow&) {
    return false;
  }
  if (total) *total = p.total;
  return p.fits;
}

// bytes in GiB with `decimals` decimals and thousands separators: "1,234.5" (decimals 1).
std::string gib_number(uint64_t bytes, int decimals) {
  uint64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  const auto scaled = static_cast<uint64_t>(std::llround(static_cast<double>(bytes) / kGiB * static_cast<double>(scale)));
  if (decimals <= 0) return format_count(scaled);
  std::string frac = std::to_string(scaled % scale);
  frac.insert(0, static_cast<size_t>(decimals) - frac.size(), '0');
  return format_count(scaled / scale) + "." + frac;
}

std::string gib(uint64_t bytes) { return gib_number(bytes, 1) + " GiB"; }

void suggest(MemoryPlan& p) {
  const PlanInputs& in = p.in;
  if (p.fits || in.device_bytes == 0) return;
  // Recompute: the smallest fraction that fits.
  if (in.model.checkpoint < 1) {
    PlanInputs t = in;
    for (int64_t k = t.model.checkpointed_layers() + 1; k <= t.model.num_layers; ++k) {
      t.model.checkpoint = static_cast<double>(k) / static_cast<double>(t.model.num_layers);
      uint64_t total = 0;
      if (plan_fits(t, &total)) {
        p.suggestions.push_back("model.checkpoint=" + json_number(t.model.checkpoint) + " (" + gib(total) + ")");
        break;
      }
    }
  }
  // A smaller micro-batch, more of them: the same global batch.
  for (int64_t bsz = in.micro_bsz - 1; bsz >= 1; --bsz) {
    if ((in.micro_bsz * in.micro_num) % bsz != 0) continue;
    PlanInputs t = in;
    t.micro_bsz = bsz;
    t.micro_num = in.micro_bsz * in.micro_num / bsz;
    uint64_t total = 0;
    if (plan_fits(t, &total)) {
      p.suggestions.push_back("data.micro_bsz=" + std::to_string(bsz) + " data.micro_num=" + std::to_string(t.micro_num) +
                              " (" + gib(total) + ")");
      break;
    }
  }
  // Shard over every rank, the smallest ZeRO stage that fits.
  const int64_t stage_now = in.zero1 == 1 ? 0 : in.zero_stage;
  if (in.world_size > 1) {
    for (int64_t z = 1; z <= 3; ++z) {
      if (p.zero_shards == in.world_size && z <= stage_now) continue;
      PlanInputs t = in;
      t.zero1 = -1;
      t.zero_stage = z;
      uint64_t total = 0;
      if (plan_fits(t, &total)) {
        p.suggestions.push_back("parallel.zero1=-1 parallel.zero_stage=" + std::to_string(z) + " (" + gib(total) + ")");
        break;
      }
    }
  }
  // More ranks, everything sharded over all of them.
  for (int64_t w = std::max<int64_t>(2, in.world_size * 2); w <= 4096; w *= 2) {
    PlanInputs t = in;
    t.world_size = w;
    t.zero1 = -1;
    t.zero_stage = 3;
    uint64_t total = 0;
    if (plan_fits(t, &total)) {
      p.suggestions.push_back("a world size of " + format_count(w) + " with parallel.zero1=-1 parallel.zero_stage=3 (" +
                              gib(total) + " per rank)");
      break;
    }
  }
  if (p.suggestions.empty())
    p.suggestions.push_back("none of model.checkpoint, data.micro_bsz, parallel.zero1/zero_stage or the world size "
                            "makes it fit: parameters and gradients alone need " + gib(p.parameters + p.gradients) +
                            " per rank");
}

}  // namespace

namespace {
std::pair<const char*, uint64_t> largest(const MemoryPlan& p) {
  const std::pair<const char*, uint64_t> terms[] = {
      {"parameters", p.parameters}, {"gradients", p.gradients}, {"optimizer_state", p.optimizer_state},
      {"activations", p.activations}, {"logits_and_loss", p.logits_and_loss}, {"workspace", p.workspace}};
  return *std::max_element(std::begin(terms), std::end(terms),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
}
}  // namespace

std::string MemoryPlan::largest_term() const { return largest(*this).first; }
uint64_t MemoryPlan::largest_term_bytes() const { return largest(*this).second; }

std::string MemoryPlan::refusal(const std::string& device_name) const {
  std::string s = "the memory plan needs " + gib(total) + " per rank, more than the " + gib(in.device_bytes) + " of " +
                  device_name + "; the largest term is " + largest_term() + " (" + gib(largest_term_bytes()) + ")";
  if (!suggestions.empty()) {
    s += ". Would fit: " + suggestions.front();
    for (size_t i = 1; i < suggestions.size(); ++i) s += "; or " + suggestions[i];
  }
  return s + ". loom-train plan with the same arguments prints the whole table";
}

std::string MemoryPlan::to_json() const {
  std::ostringstream o;
  o << "{\"fits\": " << (fits ? "true" : "false") << ", \"world_size\": " << in.world_size
    << ", \"device_bytes\": " << in.device_bytes << ", \"margin\": " << json_number(in.margin)
    << ", \"num_parameters\": " << num_parameters << ", \"zero_shards\": " << zero_shards
    << ", \"zero_stage\": " << (in.zero1 == 1 ? 0 : in.zero_stage)
    << ", \"dtype\": " << json_quote(dtype_name(in.model.dtype))
    << ", \"attention\": " << json_quote(attention_kernel_key(in.attention))
    << ", \"attention_kernel\": " << json_quote(attention_kernel_name(in.attention))
    << ", \"attention_source\": " << json_quote(in.attention_source)
    << ", \"micro_bsz\": " << in.micro_bsz << ", \"seq_len\": " << in.seq_len
    << ", \"per_rank_bytes\": {\"parameters\": " << parameters << ", \"gradients\": " << gradients
    << ", \"optimizer_state\": " << optimizer_state << ", \"activations\": " << activations
    << ", \"logits_and_loss\": " << logits_and_loss << ", \"workspace\": " << workspace << ", \"total\": " << total
    << "}, \"activations_per_layer_bytes\": {\"full\": " << layer_full_bytes
    << ", \"recomputed\": " << layer_checkpointed_bytes << "}"
    << ", \"checkpoint_fraction\": " << json_number(in.model.checkpoint)
    << ", \"checkpointed_layers\": " << checkpointed_layers << ", \"largest_term\": " << json_quote(largest_term())
    << ", \"suggestions\": [";
  for (size_t i = 0; i < suggestions.size(); ++i) o << (i ? ", " : "") << json_quote(suggestions[i]);
  o << "]}";
  return o.str();
}

std::string MemoryPlan::to_text() const {
  std::ostringstream o;
  const auto row = [&](const char* name, uint64_t v) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-16s %10s GiB  %5.1f%%\n", name, gib_number(v, 2).c_str(),
                  total ? 100.0 * static_cast<double>(v) / static_cast<double>(total) : 0.0);
    o << buf;
  };
  o << "memory plan per rank (" << format_count(num_parameters) << " parameters, " << dtype_name(in.model.dtype)
    << ", " << format_count(in.micro_bsz) << " x " << format_count(in.seq_len) << " tokens per micro-batch, "
    << checkpointed_layers << " of " << in.model.num_layers << " layers recomputed, world size "
    << format_count(in.world_size) << ", optimizer state in " << format_count(zero_shards)
    << (zero_shards == 1 ? " piece" : " shards");
  if (in.zero1 != 1) o << " (ZeRO-" << in.zero_stage << ")";
  o << ", attention " << attention_kernel_key(in.attention) << ": " << attention_kernel_name(in.attention) << "):\n";
  if (!in.attention_source.empty()) o << "  attention kernels " << in.attention_source << "\n";
  row("parameters", parameters);
  if (fp8_weight_copies > 0)
    o << "    of which " << gib(fp8_weight_copies) << " the FP8 linears' e4m3 weights, kept for the step's "
      << format_count(in.micro_num) << " micro-batches\n";
  row("gradients", gradients);
  row("optimizer_state", optimizer_state);
  row("activations", activations);
  row("logits_and_loss", logits_and_loss);
  row("workspace", workspace);
  row("total", total);
  o << "  device " << gib(in.device_bytes) << ", " << json_number(100 * in.margin) << "% kept free: "
    << (fits ? "fits" : "does not fit");
  for (const auto& s : suggestions) o << "\n  would fit: " << s;
  return o.str();
}

namespace {

// The inputs' own ranges; the model's keys and the batch's against their size limits
// (size_limits.h), so that no plan loops over 2^32 layers or divides by a wrapped zero.
void check_plan_inputs(const PlanInputs& in) {
  in.model.validate();
  check_batch_limits(in.micro_bsz, in.seq_len, in.micro_num);
  check_size_key("the world size", in.world_size, kMaxWorldSize);
  LOOM_CHECK(in.margin >= 0 && in.margin < 1, "plan: the margin must be in [0, 1), got ", in.margin);
  const int64_t S = shards_of(in);
  LOOM_CHECK(S > 0 && in.world_size % S == 0, "plan: parallel.zero1=", in.zero1, " must divide the world size ",
             in.world_size);
  LOOM_CHECK(in.zero_stage >= 1 && in.zero_stage <= 3, "plan: parallel.zero_stage must be 1, 2 or 3, got ",
             in.zero_stage);
}

}  // namespace

MemoryPlan plan_memory(const PlanInputs& in) {
  check_plan_inputs(in);
  MemoryPlan p = plan_only(in);
  suggest(p);
  return p;
}

double auto_checkpoint_fraction(const PlanInputs& in) {
  check_plan_inputs(in);
  PlanInputs t = in;
  const int64_t N = t.model.num_layers;
  for (int64_t k = 0; k <= N; ++k) {
    t.model.checkpoint = static_cast<double>(k) / static_cast<double>(N);
    if (plan_fits(t, nullptr)) return t.model.checkpoint;
  }
  return 1.0;
}

}  // namespace loom
