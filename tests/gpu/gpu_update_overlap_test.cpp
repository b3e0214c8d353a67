// The replicated optimizer's update overlapped with the next forward (adam.overlap_update,
// optim/cuda_update_stream.h) against the update in place: the same losses, weights, moments and
// master weights, bit for bit, after steps that clip and steps that do not. The side stream is
// held back (a spin of ~50 ms before each update) so that every forward really starts while the
// update runs, and NaN-filled tensors the size of the released gradients are allocated right
// after zero_grad(): the update must still read its gradients, not those. A control run without
// the layer hooks must differ, or the test could not tell. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "attention_select.h"
#include "chunked_loss.h"
#include "cuda_update_stream.h"
#include "flash_attention.h"
#include "gpu_util.h"
#include "model.h"
#include "model_state.h"
#include "optimizer.h"

namespace {

using loom::test::cuda;

struct Run {
  loom::InternLM model{nullptr};
  std::unique_ptr<loom::Optimizer> opt;
  std::vector<double> losses;
};

enum class Mode { kInPlace, kOverlapped, kOverlappedWithoutHooks };

// About 50 ms at the H200's ~2 GHz: far longer than a step of the small model below.
constexpr int64_t kDelayCycles = 100'000'000;

Run make_run(Mode mode, const loom::OptimizerOptions& ao) {
  loom::ModelOptions o;
  o.hidden_size = 128;
  o.num_layers = 3;
  o.num_attention_heads = 4;
  o.num_kv_attention_heads = 2;
  o.vocab_size = 512;
  o.dtype = torch::kBFloat16;
  torch::manual_seed(91);
  Run r;
  r.model = loom::InternLM(o);
  r.model->to(cuda());
  r.model->set_attention(loom::make_attention_kernel(loom::AttentionKernel::kFlashVarlen, cuda(), torch::kBFloat16,
                                                     o.head_dim()));
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& kv : loom::named_state(*r.model))
    if (kv.second.requires_grad()) named.emplace_back(kv.first, kv.second);
  r.opt = std::make_unique<loom::Optimizer>(named, ao);
  if (mode == Mode::kInPlace) {
    REQUIRE(r.opt->layer_hooks() == nullptr);
    return r;
  }
  REQUIRE(r.opt->overlap_updates());
  auto* stream = dynamic_cast<loom::cuda::UpdateStream*>(r.opt->layer_hooks());
  REQUIRE(stream != nullptr);
  stream->delay_for_tests(kDelayCycles);
  if (mode == Mode::kOverlapped) r.model->set_layer_hooks(stream);
  return r;
}

// One step; returns NaN-filled tensors allocated right after zero_grad() on the training stream,
// one per released gradient (keep them alive until the update has run).
std::vector<torch::Tensor> train_step(Run& r, const loom::Batch& b, double lr) {
  const loom::LossResult l = loom::compute_chunked_loss(r.model->hidden_states(b), r.model->head_weight(), b, 0.0, 1);
  const torch::Tensor loss = l.loss_sum / l.tokens;
  loss.backward();
  r.losses.push_back(loss.item<double>());
  std::vector<int64_t> numels;
  for (const auto& p : r.model->parameters())
    if (p.grad().defined()) numels.push_back(p.grad().numel());
  r.opt->step(lr);
  r.opt->zero_grad();
  std::vector<torch::Tensor> poison;
  for (int64_t n : numels)
    poison.push_back(torch::full({n}, std::nan(""), torch::TensorOptions().dtype(torch::kBFloat16).device(cuda())));
  return poison;
}

}  // namespace

TEST_CASE("an update overlapped with the next forward leaves the bits of the update in place") {
  // Flash attention's backward accumulates dq with atomics unless asked not to: two runs of the
  // same steps must be comparable bit for bit.
  struct Deterministic {
    Deterministic() { at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true); }
    ~Deterministic() { at::globalContext().setDeterministicAlgorithms(false, false); }
  } deterministic;
  const loom::Batch b = loom::test::make_packed_batch({{100, 28}, {64, 64}}, 128, 512, 92).to(cuda());
  for (const double clip : {0.0, 0.05}) {  // 0.05: every step clips (the grad_scale path)
    INFO("clip_grad_norm " << clip);
    loom::OptimizerOptions ao;
    ao.clip_grad_norm = clip;
    Run in_place = make_run(Mode::kInPlace, ao), overlapped = make_run(Mode::kOverlapped, ao);
    Run control = make_run(Mode::kOverlappedWithoutHooks, ao);
    for (int step = 0; step < 6; ++step) {
      train_step(in_place, b, 2e-3);
      const auto poison = train_step(overlapped, b, 2e-3);
      train_step(control, b, 2e-3);
    }
    // Without the hooks the forward reads weights the update has not written yet.
    CHECK(control.losses != in_place.losses);
    // The losses are those of the forward after each update: the forward saw each updated layer.
    CHECK(overlapped.losses == in_place.losses);
    CHECK(in_place.losses.back() < in_place.losses.front());
    // state() waits for the last update, which ran beside nothing.
    const auto want = in_place.opt->state(), got = overlapped.opt->state();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(want[i].first);
      CHECK(got[i].first == want[i].first);
      CHECK(torch::equal(got[i].second.cpu(), want[i].second.cpu()));
    }
    const auto want_w = loom::named_state(*in_place.model), got_w = loom::named_state(*overlapped.model);
    for (size_t i = 0; i < want_w.size(); ++i) {
      INFO(want_w[i].first);
      CHECK(torch::equal(got_w[i].second.cpu(), want_w[i].second.cpu()));
      // zero_grad() released the gradients on CUDA (the next backward makes them anew).
      CHECK_FALSE(got_w[i].second.grad().defined());
      CHECK_FALSE(want_w[i].second.grad().defined());
    }
  }
}
