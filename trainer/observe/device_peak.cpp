#include "device_peak.h"

namespace loom {

double known_bf16_peak_tflops(const std::string& name) {
  const auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  // Most specific first: an H100 PCIe is also an "H100".
  if (has("H100") && has("PCIe")) return 756;
  if (has("H100") && has("NVL")) return 835;
  if (has("H100") || has("H200") || has("H800") || has("GH200")) return 989.4;
  if (has("B200")) return 2250;
  if (has("A100") || has("A800")) return 312;
  if (has("L40S")) return 362;
  if (has("L4") && !has("L40")) return 121;
  return 0;
}

}  // namespace loom
