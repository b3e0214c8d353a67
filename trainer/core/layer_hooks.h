// What a model calls around its decoder layers, so that a parameter-sharding update (ZeRO-3,
// parallel/zero.h) can gather a layer's weights just before they are used and free them right after,
// without the model knowing about ranks. A model without hooks runs as it always did.
//
// Forward: begin_forward() once (the weights outside the layers: embedding, final norm, head), then
// before_layer(i) and after_layer(i, out) around layer i. after_layer returns the tensor the model
// goes on with; under autograd it registers a hook on it that runs before layer i's backward (which
// needs the weights again, also to recompute a checkpointed layer).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace loom {

class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void begin_forward() = 0;
  virtual void before_layer(int64_t layer) = 0;
  virtual torch::Tensor after_layer(int64_t layer, const torch::Tensor& out) = 0;
};

}  // namespace loom
