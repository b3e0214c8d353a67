#include "run_state.h"

#include <cstring>

#include "loom/error.h"
#include "loom/sys.h"
#include "torch_compat.h"

namespace loom {

namespace {

std::string rng_hex() {
  torch::Tensor s = compat::get_rng_state(torch::kCPU).contiguous();
  return to_hex(s.data_ptr(), static_cast<size_t>(s.numel()));
}

void set_rng_hex(const std::string& hex, const std::string& where) {
  const std::string bytes = from_hex(hex, where);
  torch::Tensor s = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(s.data_ptr(), bytes.data(), bytes.size());
  compat::set_rng_state(torch::kCPU, s);
}

}  // namespace

void check_state_step(const std::string& dir, int64_t step) {
  const std::string path = dir + "/state.json";
  const TrainState s = TrainState::from_json(sys::read_file(path), path);
  LOOM_CHECK(s.step == step, path, ": step ", s.step, ", but the checkpoint (folder and manifest) is step ", step);
}

void RunState::save_state(CheckpointContents& into) {
  state_.updates = update_.updates();
  state_.world_size = world_size_;
  state_.spike_json = spike_.to_json();
  state_.cpu_rng_state_hex = rng_hex();
  into.state_json = state_.to_json();
}

void RunState::load_state(const std::string& dir) {
  const std::string path = dir + "/state.json";
  state_ = TrainState::from_json(sys::read_file(path), path);
  loader_.restore(state_.sampler);
  set_rng_hex(state_.cpu_rng_state_hex, path);
  spike_.from_json(state_.spike_json);
}

}  // namespace loom
