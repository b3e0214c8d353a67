// The run's saves, in one piece: which ranks write what, when, and from where. Four ways, chosen
// once at construction from the options and the update's mode, never by a flag toggled per save:
//   replicated, sync     rank 0 gathers every component and commits step_N (checkpoint.h)
//   replicated, async    rank 0 copies into host buffers; a writer thread commits (async_checkpoint.h)
//   sharded, sync        every rank writes its optimizer shard into step_N.tmp/, publishes its
//                        manifest entry through the store; rank 0 writes the rest and commits
//   sharded, async       the same on each rank's writer thread; at ZeRO-3 the weights are gathered
//                        straight into rank 0's host buffers (the gather's destination is an argument
//                        of contents(), not a mode)
// Every rank calls save() at the same steps; it returns the step_N folder on every rank. A part that
// fails on one rank fails the save on every rank at once (sync: an agreement after each phase;
// async: the failed rank's store entry says so, and rank 0's commit fails naming it), never a
// wait until the communicator's timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "alerts.h"
#include "async_checkpoint.h"
#include "checkpoint.h"
#include "communicator.h"
#include "data_parallel.h"
#include "fault_injector.h"
#include "model.h"
#include "stateful.h"

namespace loom {

// What a checkpoint holds, and where its text parts come from.
struct SaveSources {
  InternLMImpl* model = nullptr;       // its weights, gathered whole (at ZeRO-3) over ModuleState's part
  DataParallelUpdate* update = nullptr;
  std::vector<Stateful*> parts;        // every component (state.json, model, optimizer.safetensors, ...)
  std::string config_ini;              // written for the record, never restored
  std::string tokenizer_model;         // data.tokenizer's bytes ("" if none)
  std::string lr_schedule_ini;         // the schedule in force (schedule_ini, startup.h)
};

class CheckpointSaver {
 public:
  // async: ckpt.async_save (a writer thread on rank 0, or on every rank when sharded).
  // cuda_device: where the weights live (-1: CPU), for the host buffers' page-locking.
  CheckpointSaver(Checkpointer& ckpt, Communicator& comm, SaveSources sources, FaultInjector& faults, Alerts& alerts,
                  bool async, int cuda_device);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Saves step `step` (every rank calls it). Sync: returns once step_N is published. Async: once
  // the copies to host memory are done; the folder is written in the background.
  std::string save(int64_t step);
  // Waits for a write in flight; throws loom::Error if the last one failed.
  void finish();

 private:
  using HostFor = std::function<torch::Tensor(const std::string&, const torch::Tensor&)>;
  CheckpointContents contents(const HostFor& model_into);  // what rank 0 writes (all but the shards)
  CheckpointContents layout();                             // the same as shapes: the host buffers
  std::string save_replicated_async(int64_t step);
  std::string save_sharded(int64_t step, const std::string& key, const std::string& tmp);
  std::string save_sharded_async(int64_t step, const std::string& key, const std::string& tmp);
  void publish_shard(const std::string& key, const CheckpointFile& f);            // ranks > 0
  void publish_shard_error(const std::string& key, const std::string& error);    // ranks > 0
  void collect_shards(const std::string& key, std::vector<CheckpointFile>& shards);  // rank 0
  void log_blocked(int64_t step, std::chrono::steady_clock::time_point t0, const std::string& dir);
  std::string folder_of(int64_t step) const;
  // Every rank: whether any rank's `error` is set; throws loom::Error on every rank if so.
  void agree_or_throw(int64_t step, const char* what, const std::string& error);

  Checkpointer& ckpt_;
  Communicator& comm_;
  SaveSources src_;
  FaultInjector& faults_;
  bool lead_;
  bool async_mode_;
  int64_t saves_ = 0;  // names this process's saves in the store
  std::unique_ptr<AsyncCheckpointer> async_;  // async saves: rank 0 (replicated), every rank (sharded)
};

}  // namespace loom
