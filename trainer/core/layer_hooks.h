// What a model calls around its decoder layers, so that a parameter-sharding update (ZeRO-3,
// parallel/zero.h) can gather a layer's weights just before they are used and free them right after,
// without the model knowing about ranks. A model without hooks runs as it always did.
//
// Forward: begin_forward() once (the weights outside the layers: embedding, final norm, head), then
// before_layer(i) and after_layer(i, outputs) around layer i. A layer's outputs are the residual
// stream as one tensor, or as two whose sum it is (the next layer's norm adds them). Under autograd
// after_layer registers a hook on each that runs before layer i's backward (which needs the weights
// again, also to recompute a checkpointed layer): either output's gradient may arrive first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace loom {

// "layers.K.rest" (a decoder layer's parameter in named_state's names) -> K; anything else -> -1.
inline int64_t layer_of(const std::string& name) {
  static const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return -1;
  int64_t k = 0;
  for (size_t i = prefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    k = k * 10 + (name[i] - '0');
  }
  return k;
}

class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void begin_forward() = 0;
  virtual void before_layer(int64_t layer) = 0;
  virtual void after_layer(int64_t layer, const std::vector<torch::Tensor>& outputs) = 0;
};

}  // namespace loom
