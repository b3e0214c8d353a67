#include "memory_usage.h"

#include <cstdlib>
#include <string>

#include "loom/sys.h"

#ifdef LOOM_CUDA_KERNELS
#include "cuda_memory.h"
#endif

namespace loom {

namespace {
uint64_t status_kb(const char* key) {
  // /proc files report size 0: read until end of file rather than sys::read_file.
  sys::File f = sys::File::open_read("/proc/self/status");
  std::string s;
  char buf[4096];
  for (size_t n; (n = f.read_some(buf, sizeof buf)) > 0;) s.append(buf, n);
  const size_t at = s.find(key);
  if (at == std::string::npos) return 0;
  return std::strtoull(s.c_str() + at + std::char_traits<char>::length(key), nullptr, 10) * 1024;
}
}  // namespace

uint64_t peak_rss_bytes() { return status_kb("VmHWM:"); }
uint64_t current_rss_bytes() { return status_kb("VmRSS:"); }

uint64_t peak_memory_bytes(const torch::Device& device) {
  // The CUDA allocator's statistics need the CUDA headers of a GPU build; the CPU build reports RSS.
#ifdef LOOM_CUDA_KERNELS
  if (device.is_cuda()) {
    return static_cast<uint64_t>(cuda::memory_stats(device.has_index() ? device.index() : 0).peak_allocated);
  }
#endif
  return peak_rss_bytes();
}

}  // namespace loom
