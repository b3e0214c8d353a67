#include "weight_grad.h"

#include "fused_ops.h"
#include "loom/error.h"

namespace loom {

bool adds_into_grad(const torch::Tensor& weight) {
  if (!weight.requires_grad() || !weight.is_leaf() || torch::GradMode::is_enabled()) return false;
  const torch::Tensor& g = weight.grad();
  return g.defined() && g.sizes() == weight.sizes() && g.scalar_type() == weight.scalar_type() &&
         g.device() == weight.device() && g.layout() == torch::kStrided && g.is_contiguous();
}

torch::Tensor weight_gradient(const torch::Tensor& weight, const WeightGradGemm& gemm) {
  if (adds_into_grad(weight)) {
    gemm(weight.grad(), /*add=*/true);
    return {};
  }
  torch::Tensor out = torch::empty(weight.sizes(), weight.options().requires_grad(false));
  gemm(out, /*add=*/false);
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor linear_forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias) {
  const torch::Tensor x2 = x.reshape({-1, x.size(-1)});
  const torch::Tensor y = bias.defined() ? torch::addmm(bias, x2, weight.t()) : torch::mm(x2, weight.t());
  ctx->save_for_backward({x2, weight, bias});  // the leaves: their gradients are looked up in backward
  ctx->saved_data["x_sizes"] = x.sizes().vec();
  std::vector<int64_t> out = x.sizes().vec();
  out.back() = weight.size(0);
  return y.view(out);
}

// {dx, dW} and db where the forward had a bias.
variable_list linear_backward(AutogradContext* ctx, const variable_list& grads) {
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor &x2 = saved[0], &weight = saved[1], &bias = saved[2];
  const torch::Tensor dy = grads[0].reshape({-1, weight.size(0)});
  variable_list out(bias.defined() ? 3 : 2);
  if (ctx->needs_input_grad(0)) out[0] = dy.mm(weight).view(ctx->saved_data["x_sizes"].toIntVector());
  if (ctx->needs_input_grad(1)) {
    out[1] = weight_gradient(weight, [&](torch::Tensor g, bool add) {
      if (add)
        g.addmm_(dy.t(), x2);
      else
        torch::mm_out(g, dy.t(), x2);
    });
  }
  if (bias.defined() && ctx->needs_input_grad(2)) {
    out[2] = weight_gradient(bias, [&](torch::Tensor g, bool add) { fused_bias_grad(g, dy, add); });
  }
  return out;
}

class LinearFn : public torch::autograd::Function<LinearFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
    return linear_forward(ctx, x, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return linear_backward(ctx, grads); }
};

class LinearNoBiasFn : public torch::autograd::Function<LinearNoBiasFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight) {
    return linear_forward(ctx, x, weight, {});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return linear_backward(ctx, grads); }
};

}  // namespace

torch::Tensor accumulating_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  LOOM_ASSERT(weight.dim() == 2 && x.size(-1) == weight.size(1) && (!bias.defined() || bias.size(0) == weight.size(0)),
              "accumulating_linear: x ", x.sizes(), ", weight ", weight.sizes());
  return bias.defined() ? LinearFn::apply(x, weight, bias) : LinearNoBiasFn::apply(x, weight);
}

}  // namespace loom
