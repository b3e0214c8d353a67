// One block of host memory for the asynchronous saves' buffers, prepared once, off the training
// thread, so that no save allocates (async_checkpoint.h).
//
//   HostBlock(bytes, cuda_device)   maps the address range (anonymous mmap; no page is touched yet)
//   prepare(cuts)                   faults every page in (one write per page from kFaultThreads
//                                   threads at nice kNice, madvise(MADV_HUGEPAGE) first), then on a CUDA device page-locks the block with
//                                   cudaHostRegister in pieces of about kRegisterPieceBytes whose
//                                   boundaries lie on `cuts` (the buffers' offsets), so no buffer
//                                   straddles two registrations and every copy into one is a
//                                   pinned copy
//   ~HostBlock()                    unregisters the pieces, then unmaps
//
// Why not cudaHostAlloc (what LibTorch's pinned allocator calls, once per tensor) on a background
// thread: it zeroes, maps and page-locks the whole size inside one driver call that holds the
// driver's locks throughout (seconds for tens of GB), and any CUDA call of the training thread that
// needs them waits as long; LibTorch's caching host allocator also rounds each tensor up to a power
// of two (up to 2x the memory). Here the slow part, faulting in and zeroing the pages, is ordinary
// memory work outside the driver, and each cudaHostRegister call page-locks already-present pages of
// one piece of about 256 MiB, so a training-thread CUDA call waits for at most one piece. Pieces
// end at buffer boundaries (a copy never spans two registrations), so one buffer larger than that
// is one piece: a ZeRO shard's flat fp32 state is three such buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom {

class HostBlock {
 public:
  static constexpr int64_t kRegisterPieceBytes = int64_t{256} << 20;
  static constexpr int64_t kAlignment = 4096;  // every buffer starts on a page
  static constexpr int64_t kFaultThreads = 4;   // threads that fault the pages in
  static constexpr int kNice = 10;              // their priority: below training and the data loader

  // cuda_device -1: pageable memory (CPU runs).
  HostBlock(int64_t bytes, int cuda_device);
  ~HostBlock();
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  // cuts: byte offsets where buffers begin (ascending, each a multiple of kAlignment). Returns a
  // one-line account of what it did (bytes, seconds to fault in, seconds to page-lock, pieces).
  std::string prepare(const std::vector<int64_t>& cuts);

  // [begin, end) of each registration of a block of `bytes`: each piece ends at the first cut at
  // least piece_bytes past its begin (or at the end), so pieces hold whole buffers.
  static std::vector<std::pair<int64_t, int64_t>> pieces(int64_t bytes, const std::vector<int64_t>& cuts,
                                                         int64_t piece_bytes = kRegisterPieceBytes);

  char* data() const { return base_; }
  int64_t bytes() const { return bytes_; }
  bool pinned() const { return !registered_.empty(); }

 private:
  char* base_ = nullptr;
  int64_t bytes_ = 0;
  int cuda_device_ = -1;
  std::vector<char*> registered_;  // starts of the cudaHostRegister'ed pieces
};

}  // namespace loom
