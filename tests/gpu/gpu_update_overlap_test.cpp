// The replicated optimizer's update overlapped with the next forward (adam.overlap_update,
// optim/cuda_update_stream.h) against the update in place: the same losses, weights, moments and
// master weights, bit for bit, after steps that clip and steps that do not; gradients released by
// zero_grad() (the side stream still reading them) are not overwritten before it is done. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "attention_select.h"
#include "chunked_loss.h"
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

Run make_run(bool overlap, const loom::OptimizerOptions& ao) {
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
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& kv : loom::named_state(*r.model))
    if (kv.second.requires_grad()) named.emplace_back(kv.first, kv.second);
  r.opt = std::make_unique<loom::Optimizer>(named, ao);
  if (overlap) {
    REQUIRE(r.opt->overlap_updates());
    REQUIRE(r.opt->layer_hooks() != nullptr);
    r.model->set_layer_hooks(r.opt->layer_hooks());
  } else {
    REQUIRE(r.opt->layer_hooks() == nullptr);
  }
  return r;
}

void train_step(Run& r, const loom::Batch& b, double lr) {
  const loom::LossResult l = loom::compute_chunked_loss(r.model->hidden_states(b), r.model->head_weight(), b, 0.0, 1);
  const torch::Tensor loss = l.loss_sum / l.tokens;
  loss.backward();
  r.losses.push_back(loss.item<double>());
  r.opt->step(lr);
  r.opt->zero_grad();
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
    Run in_place = make_run(false, ao), overlapped = make_run(true, ao);
    REQUIRE(loom::select_attention(cuda(), torch::kBFloat16, 32) == loom::AttentionKernel::kFlashVarlen);
    for (int step = 0; step < 6; ++step) {
      train_step(in_place, b, 2e-3);
      train_step(overlapped, b, 2e-3);
    }
    loom::set_varlen_attention({});
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
