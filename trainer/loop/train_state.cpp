#include "train_state.h"

#include <simdjson.h>

#include <sstream>

#include "loom/error.h"

namespace loom {

std::string to_hex(const void* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

std::string from_hex(const std::string& hex, const std::string& where) {
  LOOM_CHECK(hex.size() % 2 == 0, where, ": hex string of odd length ", hex.size());
  auto nibble = [&](char c, size_t at) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    LOOM_FAIL(where, ": bad hex digit '", c, "' at character ", at);
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(nibble(hex[2 * i], 2 * i) << 4 | nibble(hex[2 * i + 1], 2 * i + 1));
  return out;
}

std::string TrainState::to_json() const {
  std::ostringstream os;
  os << "{\n  \"version\": " << kTrainStateVersion << ",\n  \"step\": " << step << ",\n  \"updates\": " << updates
     << ",\n  \"consumed_samples\": " << sampler.consumed_samples << ",\n  \"consumed_tokens\": " << consumed_tokens
     << ",\n  \"inf_nan_skips\": " << inf_nan_skips << ",\n  \"skipped_batches\": " << skipped_batches
     << ",\n  \"spike_skips\": " << spike_skips << ",\n  \"spike\": " << spike_json
     << ",\n  \"sampler\": {\"seed\": " << sampler.seed << ", \"epoch\": " << sampler.epoch
     << ", \"consumed_samples\": " << sampler.consumed_samples << "},\n  \"world_size\": " << world_size
     << ",\n  \"rng\": {\"cpu\": \"" << cpu_rng_state_hex << "\"}"
     << (data_json.empty() ? std::string() : ",\n  \"data\": " + data_json) << ",\n  \"loom_version\": \"" << LOOM_VERSION_STRING
     << "\"\n}\n";
  return os.str();
}

TrainState TrainState::from_json(const std::string& json, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  LOOM_CHECK(!err, where, ": not valid JSON: ", simdjson::error_message(err));
  auto u64 = [&](simdjson::dom::element e, const char* key) {
    uint64_t v = 0;
    LOOM_CHECK(!e[key].get(v), where, ": missing or non-integer key '", key, "'");
    return v;
  };
  // Counters kept as int64: a value past 2^63-1 would read as negative.
  auto i64 = [&](simdjson::dom::element e, const char* key) {
    const uint64_t v = u64(e, key);
    LOOM_CHECK(v <= static_cast<uint64_t>(INT64_MAX), where, ": key '", key, "' is ", v, ", more than 2^63-1");
    return static_cast<int64_t>(v);
  };
  const uint64_t version = u64(root, "version");
  LOOM_CHECK(version == static_cast<uint64_t>(kTrainStateVersion), where, ": state version ", version,
             ", this build reads version ", kTrainStateVersion);
  TrainState s;
  s.step = i64(root, "step");
  s.updates = i64(root, "updates");
  s.consumed_tokens = u64(root, "consumed_tokens");
  s.inf_nan_skips = i64(root, "inf_nan_skips");
  s.skipped_batches = i64(root, "skipped_batches");
  uint64_t spike_skips = 0;
  if (!root["spike_skips"].get(spike_skips)) s.spike_skips = i64(root, "spike_skips");
  simdjson::dom::object spike;
  if (!root["spike"].get(spike)) s.spike_json = simdjson::minify(spike);
  simdjson::dom::element sampler;
  LOOM_CHECK(!root["sampler"].get(sampler), where, ": missing key 'sampler'");
  s.sampler.seed = u64(sampler, "seed");
  s.sampler.epoch = u64(sampler, "epoch");
  s.sampler.consumed_samples = u64(sampler, "consumed_samples");
  s.world_size = i64(root, "world_size");
  std::string_view rng;
  LOOM_CHECK(!root["rng"]["cpu"].get(rng), where, ": missing string key 'rng.cpu'");
  s.cpu_rng_state_hex = std::string(rng);
  simdjson::dom::object data;
  if (!root["data"].get(data)) s.data_json = simdjson::minify(data);
  return s;
}

}  // namespace loom
