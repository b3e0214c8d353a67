// Host-to-device transfer of micro-batches that overlaps compute: the next batch is copied from
// pinned host memory on a side stream while the current step runs, and the compute stream waits
// for that copy on the device (an event), never on the host. LOOM_CUDA builds only.
#pragma once

#include <memory>

#include "batch.h"

namespace loom::cuda {

class BatchTransfer {
 public:
  explicit BatchTransfer(int device);
  ~BatchTransfer();
  BatchTransfer(const BatchTransfer&) = delete;
  BatchTransfer& operator=(const BatchTransfer&) = delete;

  // Starts copying b's tensors (on the CPU) to the device on the side stream; returns at once.
  void start(const Batch& b);
  // The batch started last, ready for use on the current stream (which waits for the copy on the
  // device). Calling it without a start() is a bug (loom::InternalError).
  Batch finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::cuda
