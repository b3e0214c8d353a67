#include "model_state.h"

#include "loom/error.h"
#include "loom/sys.h"

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

torch::Tensor checkpoint_master(const safetensors::Reader& optimizer, const safetensors::Reader& model,
                                const std::string& name) {
  if (optimizer.contains("master." + name)) return optimizer.get("master." + name);
  LOOM_CHECK(model.contains(name), model.path(), ": no tensor '", name, "' (is this checkpoint of another model shape?)");
  torch::Tensor t = model.get(name);
  LOOM_CHECK(t.scalar_type() == torch::kFloat32, optimizer.path(), ": no tensor 'master.", name, "', and ", model.path(),
             " holds '", name, "' as ", t.scalar_type(), ", not the fp32 weights a master needs: the checkpoint has lost "
             "them. Resume with the model.dtype it was saved with, or take its weights only with --init-from (a fresh "
             "optimizer)");
  return t;
}

safetensors::NamedTensors optimizer_state_with_masters(const std::string& dir, const std::vector<std::string>& names) {
  const safetensors::Reader optimizer(dir + "/optimizer.safetensors"), model(dir + "/model.safetensors");
  safetensors::NamedTensors out;
  for (const std::string& n : optimizer.names()) out.emplace_back(n, optimizer.get(n));
  for (const std::string& n : names)
    if (!optimizer.contains("master." + n)) out.emplace_back("master." + n, checkpoint_master(optimizer, model, n));
  return out;
}

void ModuleState::load_state(const std::string& dir) {
  load_named_state(module_, safetensors::Reader(dir + "/model.safetensors"));
  // An fp32 model from a checkpoint of a bf16 one: its weights are the masters, not their rounding.
  const std::string opt = dir + "/optimizer.safetensors";
  if (!sys::exists(opt)) return;  // ZeRO shards: the update loads the masters into the weights
  const safetensors::Reader masters(opt);
  torch::NoGradGuard no_grad;
  for (auto& [name, dst] : named_state(module_))
    if (dst.scalar_type() == torch::kFloat32 && masters.contains("master." + name)) {
      torch::Tensor src = masters.get("master." + name);
      LOOM_CHECK(src.sizes() == dst.sizes(), masters.path(), ": tensor 'master.", name, "' has shape ", src.sizes(),
                 ", the model expects ", dst.sizes());
      dst.copy_(src);
    }
}

}  // namespace loom
