// Weight gradients added inside the GEMM that makes them. With several micro-batches a step,
// autograd computes each micro-batch's dW into fresh memory and its AccumulateGrad then adds it to
// the parameter's .grad: one more pass reading two and writing one tensor of every weight's size
// per micro-batch (95 ms of a 2.2 s step of the 7b12 at 16 micro-batches on an H100). Here the
// backward hands the GEMM the parameter's own .grad with beta = 1 (cuBLAS adds the product to it
// in fp32 and rounds once, where the add rounded the product first), and returns no gradient, so
// AccumulateGrad has nothing to add; its post hooks (data parallelism's, ZeRO's) still run after.
#pragma once

#include <functional>

#include <torch/torch.h>

namespace loom {

// How a backward computes a weight's gradient into `out`: out = dW (add false: out is fresh,
// uninitialised) or out += dW (add true: out is the parameter's accumulated gradient).
using WeightGradGemm = std::function<void(torch::Tensor out, bool add)>;

// The tensor a custom autograd function's backward returns for `weight` (a leaf it saved):
// undefined after gemm added into weight's existing gradient (same shape, dtype and device,
// contiguous, no graph being built through the backward), else a fresh tensor gemm wrote, for
// AccumulateGrad to take as it takes any gradient.
torch::Tensor weight_gradient(const torch::Tensor& weight, const WeightGradGemm& gemm);

// Whether weight_gradient would add into weight's gradient now.
bool adds_into_grad(const torch::Tensor& weight);

// y = x W^T + b over x [..., K] (bias optional): the forward is one addmm (mm without bias) on
// [rows, K], as loom's CUDA projections ran it; the backward makes dx with one mm and dW and db
// through weight_gradient. For CUDA projections; correct on any device.
torch::Tensor accumulating_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace loom
