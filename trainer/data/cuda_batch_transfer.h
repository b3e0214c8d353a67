// Host-to-device transfer of micro-batches: start() copies the batch into pinned host memory (on
// the host) and from there to the device on a side stream, recording an event; finish() makes the
// current (compute) stream wait for that event on the device, never on the host. LOOM_CUDA builds
// only.
//
// What overlaps today: no copy overlaps a step's compute. The loop moves a step's micro-batches in
// its data phase, before the forward and after the previous step ended synchronised, calling
// start() and finish() back to back for each, so the compute stream waits on each copy right away.
// The two halves exist for a caller that overlaps: start() the next batch while the current step
// runs, finish() it when that batch is needed.
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
