#include "flops.h"

namespace loom {

int64_t layer_matmul_parameters(const ModelOptions& m) {
  const int64_t C = m.hidden_size, H = m.num_attention_heads, K = m.kv_heads(), D = m.head_dim();
  return C * (H + 2 * K) * D + H * D * C + 3 * C * m.ffn_hidden();
}

int64_t matmul_parameters(const ModelOptions& m) {
  return m.num_layers * layer_matmul_parameters(m) + m.vocab_size * m.hidden_size;
}

double model_flops_per_token(const ModelOptions& m, int64_t seq_len) {
  const double attention = 12.0 * double(m.num_layers) * double(m.hidden_size) * double(seq_len);
  return 6.0 * double(matmul_parameters(m)) + attention;
}

double hardware_flops_per_token(const ModelOptions& m, int64_t seq_len) {
  const double ckpt = double(m.checkpointed_layers());
  const double recompute =
      ckpt * (2.0 * double(layer_matmul_parameters(m)) + 4.0 * double(m.hidden_size) * double(seq_len));
  return model_flops_per_token(m, seq_len) + recompute;
}

double executed_flops(const ModelOptions& m, int64_t tokens, const torch::Tensor& cu_seqlens_host) {
  const double L = double(m.num_layers), ckpt = double(m.checkpointed_layers());
  const double matmuls = double(tokens) * (6.0 * double(matmul_parameters(m)) + 2.0 * ckpt * double(layer_matmul_parameters(m)));
  double squares = 0;
  const torch::Tensor cu = cu_seqlens_host.to(torch::kInt64).contiguous();
  const int64_t* c = cu.data_ptr<int64_t>();
  for (int64_t s = 0; s + 1 < cu.numel(); ++s) {
    const double n = double(c[s + 1] - c[s]);
    squares += n * (n + 1);  // twice the n (n + 1) / 2 query-key pairs of a causal document
  }
  return matmuls + squares * double(m.hidden_size) * (6.0 * L + 2.0 * ckpt);
}

}  // namespace loom
