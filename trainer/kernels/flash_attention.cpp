#include "flash_attention.h"

#include "loom/error.h"
#include "loom/log.h"
#include "torch_compat.h"

namespace loom {
namespace {

#if LOOM_TORCH2
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Dropout 0, causal within every segment. The kernel's philox seed/offset outputs are kept for the
// backward call's signature (they are unused without dropout).
class FlashVarlen : public torch::autograd::Function<FlashVarlen> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& cu_seqlens, int64_t max_seqlen,
                               double scale) {
    auto r = at::_flash_attention_forward(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                          /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false,
                                          scale);
    torch::Tensor out = std::get<0>(r);
    ctx->save_for_backward({q, k, v, out, std::get<1>(r), cu_seqlens, std::get<2>(r), std::get<3>(r)});
    ctx->saved_data["max_seqlen"] = max_seqlen;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const int64_t max_seqlen = ctx->saved_data["max_seqlen"].toInt();
    const double scale = ctx->saved_data["scale"].toDouble();
    auto r = at::_flash_attention_backward(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], s[5], s[5],
                                           max_seqlen, max_seqlen, /*dropout_p=*/0.0, /*is_causal=*/true, s[6],
                                           s[7], scale);
    return {std::get<0>(r), std::get<1>(r), std::get<2>(r), {}, {}, {}};
  }
};
#endif

}  // namespace

torch::Tensor flash_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& cu_seqlens, int64_t max_seqlen, double scale) {
  LOOM_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                 q.size(2) == k.size(2) && q.size(1) % k.size(1) == 0,
             "flash attention needs q [Tok, H, D] and k, v [Tok, K, D] with H a multiple of K, got ", q.sizes(),
             ", ", k.sizes(), ", ", v.sizes());
  LOOM_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.scalar_type() == torch::kInt32,
             "flash attention needs cu_seqlens [S+1] int32, got ", cu_seqlens.sizes(), " ", cu_seqlens.scalar_type());
#if LOOM_TORCH2
  // The kernel reads rows with unit stride in the last dim; views from a fused QKV may not have it.
  return FlashVarlen::apply(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens.to(q.device()), max_seqlen,
                            scale);
#else
  (void)max_seqlen;
  (void)scale;
  LOOM_FAIL("flash attention needs LibTorch >= 2 (this build uses ", TORCH_VERSION, ")");
#endif
}

bool flash_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (!LOOM_TORCH2) return no(str("LibTorch ", TORCH_VERSION, " has no varlen flash attention (needs >= 2)"));
  if (!device.is_cuda()) return no("the device is " + device.str() + ", not CUDA");
  if (dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    return no(str("activations are ", c10::toString(dtype), ", flash attention takes bf16 or fp16"));
  }
  if (head_dim % 8 != 0 || head_dim > kFlashMaxHeadDim)
    return no(str("head dim ", head_dim, " is not a multiple of 8 up to ", kFlashMaxHeadDim));
  // The kernel's presence (build flags, GPU generation) is only known by trying it.
  try {
    const auto opt = torch::TensorOptions().device(device).dtype(dtype);
    const torch::Tensor x = torch::ones({4, 1, head_dim}, opt);
    const torch::Tensor cu = torch::tensor({0, 1, 4}, torch::dtype(torch::kInt32)).to(device);
    flash_varlen_attention(x, x, x, cu, 3, 1.0);
  } catch (const std::exception& e) {
    return no(std::string("the kernel failed on a probe: ") + e.what());
  }
  return true;
}

}  // namespace loom
