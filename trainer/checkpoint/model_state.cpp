#include "model_state.h"

#include "loom/error.h"

namespace loom {

safetensors::NamedTensors named_state(const torch::nn::Module& module) {
  safetensors::NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

void load_named_state(torch::nn::Module& module, const safetensors::Reader& r) {
  torch::NoGradGuard no_grad;
  for (auto& [name, dst] : named_state(module)) {
    LOOM_CHECK(r.contains(name), r.path(), ": no tensor '", name, "' (is this checkpoint of another model shape?)");
    torch::Tensor src = r.get(name);
    LOOM_CHECK(src.sizes() == dst.sizes(), r.path(), ": tensor '", name, "' has shape ", src.sizes(),
               ", the model (see model.* keys) expects ", dst.sizes());
    dst.copy_(src);
  }
}

void ModuleState::load_state(const std::string& dir) {
  load_named_state(module_, safetensors::Reader(dir + "/model.safetensors"));
}

}  // namespace loom
