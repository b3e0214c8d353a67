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

}  // namespace loom
