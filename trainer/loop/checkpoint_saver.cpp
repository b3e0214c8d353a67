#include "checkpoint_saver.h"

#include <sstream>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "model_state.h"

namespace loom {

CheckpointSaver::CheckpointSaver(Checkpointer& ckpt, Communicator& comm, SaveSources sources, FaultInjector& faults,
                                 Alerts& alerts, bool async, int cuda_device)
    : ckpt_(ckpt), comm_(comm), src_(std::move(sources)), faults_(faults), lead_(comm.rank() == 0), async_mode_(async) {
  LOOM_ASSERT(src_.model && src_.update, "a saver needs the model and its update");
  // Replicated: rank 0 writes everything. Sharded: every rank writes its shard, rank 0 the rest.
  if (!async || !(lead_ || src_.update->sharded())) return;
  async_ = std::make_unique<AsyncCheckpointer>(ckpt_, [&alerts](int64_t step, const std::string& error) {
    alerts.send(AlertLevel::kError, "checkpoint write failed", str("step ", step, ": ", error));
  });
  // The host buffers of every save, made now on a background thread while training starts: the
  // first save then copies instead of allocating (and page-locking) them.
  async_->reserve(layout(), cuda_device);
}

CheckpointSaver::~CheckpointSaver() = default;

std::string CheckpointSaver::folder_of(int64_t step) const {
  return ckpt_.options().folder + "/" + checkpoint_dir_name(step);
}

CheckpointContents CheckpointSaver::contents(const HostFor& model_into) {
  CheckpointContents cc;
  for (Stateful* part : src_.parts) part->save_state(cc);
  // The model's part, whole: at ZeRO stage 3 every rank gathers the weights collectively (rank 0
  // receives them, into model_into's buffers when given); elsewhere the same tensors again.
  cc.model = src_.update->whole_model_state(named_state(*src_.model), model_into);
  cc.config_ini = src_.config_ini;
  cc.tokenizer_model = src_.tokenizer_model;
  cc.lr_schedule_ini = src_.lr_schedule_ini;
  return cc;
}

CheckpointContents CheckpointSaver::layout() {
  CheckpointContents like;
  if (lead_) {
    like.model = named_state(*src_.model);  // at ZeRO-3 the shapes stay while the storage is sharded
    like.optimizer = src_.update->replicated_state();
  }
  src_.update->shard_layout(like);
  return like;
}

std::string CheckpointSaver::save(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  if (async_) {
    // The previous write must be done (a sharded one published by rank 0) before this save reuses
    // the host buffers or begins a new step_N.tmp.
    const AsyncSaveResult previous = async_->wait();  // a failed one was logged and alerted by the writer
    if (previous.ok()) log::info("checkpoint ", previous.path, " written (step ", previous.step, ")");
  }
  if (async_mode_ && !src_.update->sharded()) {
    if (!lead_) return folder_of(step);  // rank 0 alone writes a replicated checkpoint
    const std::string dir = save_replicated_async(step);
    log_blocked(step, t0, dir);
    return dir;
  }
  // Rank 0 opens step_N.tmp/ and every rank learns its name (the folder is shared by all ranks).
  const std::string key = "ckpt/" + std::to_string(saves_++) + "/";
  std::string tmp;
  if (lead_) tmp = ckpt_.begin(step);
  if (comm_.distributed()) {
    if (lead_) comm_.store_set(key + "tmp", tmp);
    tmp = comm_.store_get(key + "tmp");
  }
  if (!async_) return save_sharded(step, key, tmp);
  const std::string dir = save_sharded_async(step, key, tmp);
  log_blocked(step, t0, dir);
  return dir;
}

std::string CheckpointSaver::save_replicated_async(int64_t step) {
  // Rank 0 copies the state to host memory and a background thread writes it; the others go on.
  async_->save(step, contents({}), [this](int64_t s, CheckpointContents& host) {
    const std::string tmp = ckpt_.begin(s);
    faults_.in_save(s, tmp, host.model);
    return ckpt_.commit(s, host, {});
  });
  return folder_of(step);
}

std::string CheckpointSaver::save_sharded(int64_t step, const std::string& key, const std::string& tmp) {
  // Also the replicated synchronous save: no shards, rank 0 commits. A rank whose part fails still
  // takes part in the agreement below, so every rank raises the same error at once instead of
  // waiting for the failed rank until the communicator's timeout.
  std::vector<CheckpointFile> shards;
  std::string error;
  try {
    faults_.in_shard_write(step);
    if (const auto mine = src_.update->save_shard(tmp)) {
      shards.push_back(*mine);
      publish_shard(key, *mine);
    }
  } catch (const std::exception& e) {
    error = e.what();
    publish_shard_error(key, error);
  }
  agree_or_throw(step, "writing the optimizer shards", error);
  CheckpointContents cc = contents({});  // every rank: at ZeRO-3 the weights are gathered collectively
  std::string dir;
  if (lead_) {
    try {
      faults_.in_save(step, tmp, cc.model);
      collect_shards(key, shards);
      dir = ckpt_.commit(step, cc, shards);
      log::info("checkpoint ", dir, " written (step ", step, ")");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Also the barrier: nobody runs ahead into a step (or a next save) before step_N is published.
  agree_or_throw(step, "committing the checkpoint on rank 0", error);
  return lead_ ? dir : folder_of(step);
}

void CheckpointSaver::agree_or_throw(int64_t step, const char* what, const std::string& error) {
  const double failed = error.empty() ? 0.0 : 1.0;
  const bool any = comm_.distributed() ? comm_.all_reduce_scalar(failed, ReduceOp::kMax) > 0 : failed > 0;
  if (!any) return;
  LOOM_CHECK(error.empty(), "checkpoint of step ", step, ": ", what, " failed on this rank: ", error);
  LOOM_FAIL("checkpoint of step ", step, ": ", what, " failed on another rank (its own error names the cause)");
}

std::string CheckpointSaver::save_sharded_async(int64_t step, const std::string& key, const std::string& tmp) {
  // Training waits for the host copies only: this rank's shard (and on rank 0 the model, gathered at
  // ZeRO-3 on every rank straight into rank 0's host buffers, and the run state); each rank's writer
  // thread then writes its shard into step_N.tmp/ and publishes it, and rank 0's commits the folder
  // once every shard is there.
  AsyncCheckpointer& async = *async_;
  CheckpointContents cc = contents(lead_ ? HostFor([&async](const std::string& name, const torch::Tensor& like) {
    return async.model_buffer(name, like);
  })
                                         : HostFor());
  src_.update->shard_contents(cc);
  if (!lead_) cc.model.clear();
  const bool lead = lead_;
  async.save(step, std::move(cc), [this, key, tmp, lead](int64_t s, CheckpointContents& host) {
    std::vector<CheckpointFile> shards;
    try {
      if (const auto mine = write_shard(tmp, host)) {
        shards.push_back(*mine);
        publish_shard(key, *mine);
      }
    } catch (const std::exception& e) {
      publish_shard_error(key, e.what());  // rank 0's commit fails at once, naming this rank
      throw;
    }
    if (!lead) return folder_of(s);
    faults_.in_save(s, tmp, host.model);
    collect_shards(key, shards);
    return ckpt_.commit(s, host, shards);
  });
  return folder_of(step);
}

void CheckpointSaver::finish() {
  if (!async_) return;  // the process must not end mid-write
  const AsyncSaveResult last = async_->wait();
  if (last.ok()) log::info("checkpoint ", last.path, " written (step ", last.step, ")");
  LOOM_CHECK(last.error.empty(), "the last checkpoint (step ", last.step, ") failed: ", last.error);
}

void CheckpointSaver::log_blocked(int64_t step, std::chrono::steady_clock::time_point t0, const std::string& dir) {
  const double blocked = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("checkpoint of step ", step, ": training blocked ", format_number(blocked, 3), " s (copy ",
            format_number(async_->last_copy_seconds(), 3), " s; with the previous write",
            src_.update->zero_stage() == 3 ? " and the weight gather" : "", "); writing ", dir, " in the background");
}

void CheckpointSaver::publish_shard(const std::string& key, const CheckpointFile& f) {
  if (comm_.distributed() && comm_.rank() != 0)
    comm_.store_set(key + std::to_string(comm_.rank()), f.name + " " + std::to_string(f.bytes) + " " + std::to_string(f.xxh64));
}

void CheckpointSaver::publish_shard_error(const std::string& key, const std::string& error) {
  if (comm_.distributed() && comm_.rank() != 0) comm_.store_set(key + std::to_string(comm_.rank()), "error " + error);
}

void CheckpointSaver::collect_shards(const std::string& key, std::vector<CheckpointFile>& shards) {
  for (int r = 1; r < src_.update->shards(); ++r) {  // ranks 1..S-1 hold the other distinct shards
    const std::string entry = comm_.store_get(key + std::to_string(r));
    LOOM_CHECK(entry.rfind("error ", 0) != 0, "rank ", r, " could not write its optimizer shard: ", entry.substr(6));
    std::istringstream in(entry);
    CheckpointFile f;
    in >> f.name >> f.bytes >> f.xxh64;
    LOOM_ASSERT(!in.fail(), "rank ", r, " published a malformed shard entry");
    shards.push_back(f);
  }
}

}  // namespace loom
