#include "host_block.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

#include "clock.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"

#ifdef LOOM_CUDA
#include "cuda_host_register.h"
#endif

namespace loom {

HostBlock::HostBlock(int64_t bytes, int cuda_device) : bytes_(bytes), cuda_device_(cuda_device) {
  LOOM_ASSERT(bytes > 0 && bytes % kAlignment == 0, "HostBlock of ", bytes, " bytes");
#ifndef LOOM_CUDA
  LOOM_ASSERT(cuda_device < 0, "a pinned HostBlock in a build without CUDA");
#endif
  void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (p == MAP_FAILED)
    sys::throw_errno("mmap", str(bytes, " bytes of checkpoint host buffers"), errno,
                     "ckpt.async_save keeps one host copy of the checkpoint; free host memory or save synchronously");
  base_ = static_cast<char*>(p);
  // Transparent huge pages where the kernel allows them: 512x fewer faults and page-table entries
  // to lock. Advice only: a refusal changes nothing but speed.
  (void)::madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
}

HostBlock::~HostBlock() {
#ifdef LOOM_CUDA
  for (char* piece : registered_) cuda::host_unregister(piece);
#endif
  if (base_) ::munmap(base_, static_cast<size_t>(bytes_));
}

std::vector<std::pair<int64_t, int64_t>> HostBlock::pieces(int64_t bytes, const std::vector<int64_t>& cuts,
                                                            int64_t piece_bytes) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  size_t next = 0;
  while (begin < bytes) {
    int64_t end = bytes;
    while (next < cuts.size() && cuts[next] <= begin) ++next;
    for (size_t k = next; k < cuts.size(); ++k)
      if (cuts[k] - begin >= piece_bytes && cuts[k] < bytes) {
        end = cuts[k];
        break;
      }
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

std::string HostBlock::prepare(const std::vector<int64_t>& cuts) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
  // The kernel zeroes each page on its first write; doing it here keeps that work out of the
  // driver call below and out of the first save. A few threads: one zeroes about 1-3 GB/s.
  const int64_t pages = (bytes_ + page - 1) / page;
  const int64_t per = (pages + kFaultThreads - 1) / kFaultThreads;
  const auto fault_in = [this, page](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) base_[k * page] = 0;
  };
  std::vector<std::thread> threads;
  threads.reserve(kFaultThreads);
  int64_t started = 0;  // ranges [0, started * per) belong to threads
  try {
    for (; started < kFaultThreads; ++started)
      threads.emplace_back([fault_in, lo = started * per, hi = std::min(pages, (started + 1) * per)] {
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), kNice);
        fault_in(lo, hi);
      });
  } catch (const std::system_error&) {
    // No thread to spare (a pids limit): this thread does the rest, and no joinable thread is
    // left behind.
  }
  if (started < kFaultThreads) fault_in(std::min(pages, started * per), pages);
  for (auto& th : threads) th.join();
  const double fault_s = seconds_since(t0);
  if (cuda_device_ < 0) return str(bytes_, " bytes of pageable memory, faulted in in ", fault_s, " s");
#ifdef LOOM_CUDA
  const auto t1 = std::chrono::steady_clock::now();
  for (const auto& [begin, end] : pieces(bytes_, cuts)) {
    cuda::host_register(base_ + begin, static_cast<size_t>(end - begin), cuda_device_);
    registered_.push_back(base_ + begin);
  }
  return str(bytes_, " bytes page-locked: faulted in in ", fault_s, " s, registered in ", seconds_since(t1), " s (",
             registered_.size(), " pieces)");
#else
  (void)cuts;
  LOOM_ASSERT(false, "unreachable: pinned HostBlock without CUDA");
  return "";
#endif
}

}  // namespace loom
