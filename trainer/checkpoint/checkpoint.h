// The checkpoint directory format, version 1 (docs/TRAIN.md has the same text and a Python reader):
//
//   CKPT_FOLDER/
//     latest                    "step_N\n": the newest complete checkpoint (updated atomically, last)
//     step_N/                   one checkpoint, N = steps done
//       model.safetensors       the model's parameters and buffers, by their LibTorch names, in the
//                               model's dtype
//       optimizer.safetensors   AdamW state: "step" (F64 scalar), "exp_avg.NAME", "exp_avg_sq.NAME",
//                               and "master.NAME" (fp32 master weights) when the model is not fp32
//       optimizer_zero1_K.safetensors   instead of optimizer.safetensors when the run shards the
//                               optimizer (parallel.zero1 != 1): shard K of S, written by its rank
//                               at any ZeRO stage (zero.h has the layout); either kind resumes into either mode
//       state.json              TrainState: step, updates, consumed samples/tokens, sampler, RNG, counters
//       config.ini              the resolved configuration of the run that wrote it
//       lr_schedule.ini         the learning-rate schedule in force (INI: adam.lr, data.total_steps,
//                               lr_scheduler.*), which lr_scheduler.on_resume=keep makes differ
//                               from config.ini's; a checkpoint without it trained under config.ini's
//       tokenizer.model         the SentencePiece model of the data, when data.tokenizer names it
//       manifest.json           {"format": "loom-checkpoint", "version": 1, "step": N,
//                                "files": [{"name", "bytes", "xxh64" (16 hex digits)}]}, written last
//
// Writing: everything goes into step_N.tmp/ (each file fsync'd; with several ranks, each shard's
// rank writes its file there and rank 0 everything else), the folder is renamed to step_N,
// the parent fsync'd, then `latest` replaced; only then are checkpoints beyond the newest ckpt.keep
// removed. A crash at any point leaves the previous checkpoints intact and at most a step_N.tmp/
// that the next save removes. Reading: the manifest's version, each file's size and XXH64 are
// checked before anything is loaded; a damaged checkpoint is refused with the reason. --resume
// auto starts at the folder `latest` names, so the two never disagree (choose_resume).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "safetensors.h"

namespace loom {

inline constexpr int64_t kCheckpointVersion = 1;
inline constexpr const char* kCheckpointFormat = "loom-checkpoint";

// The [ckpt] section. The Checkpointer reads folder and keep; the loop reads the rest. Every field
// after keep has an initializer, so CheckpointOptions{folder, keep} stays complete.
struct CheckpointOptions {
  std::string folder;            // ckpt.save_ckpt_folder (default JOB.run_dir/checkpoints)
  int64_t keep = 2;              // ckpt.keep: complete checkpoints kept (0 = all)
  bool enable_save = true;       // ckpt.enable_save_ckpt
  int64_t checkpoint_every = 0;  // ckpt.checkpoint_every: steps between checkpoints (0 = only at the end)
  std::string stop_file{};       // ckpt.stop_file: InternLM's stop file ("" = off)
  bool async_save = false;       // ckpt.async_save: write checkpoints from a background thread
};

// What one checkpoint holds.
struct CheckpointContents {
  safetensors::NamedTensors model;
  safetensors::NamedTensors optimizer;  // empty: the optimizer's state is in shard files (extra)
  std::string state_json;
  std::string config_ini;
  // This rank's optimizer shard (shard_name "" = none), for a save that copies it to the host first
  // and writes it later: commit() leaves it to the rank, which writes it into the folder itself.
  std::string shard_name;
  safetensors::NamedTensors shard;
  safetensors::Metadata shard_metadata;
  // The SentencePiece model's bytes (data.tokenizer), written as tokenizer.model ("" = none).
  std::string tokenizer_model;
  // The learning-rate schedule in force, written as lr_schedule.ini ("" = none).
  std::string lr_schedule_ini;
};

inline constexpr const char* kCheckpointTokenizer = "tokenizer.model";
inline constexpr const char* kCheckpointSchedule = "lr_schedule.ini";
// The SentencePiece model that goes with checkpoint `dir`: `given` when set (refused when the
// checkpoint holds a tokenizer.model of other bytes: another XXH64), else the checkpoint's copy,
// else "".
std::string checkpoint_tokenizer(const std::string& dir, const std::string& given);

std::string checkpoint_dir_name(int64_t step);  // "step_N"
// "step_N" -> N, or -1 when name is not of that form (step_N.tmp included).
int64_t parse_step_name(const std::string& name);

// A file of a checkpoint, as its manifest lists it.
struct CheckpointFile {
  std::string name;
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};

// Writes c's shard (shard_name, shard, shard_metadata) as dir/shard_name and returns its manifest
// entry; nullopt when c holds none (shard_name "").
std::optional<CheckpointFile> write_shard(const std::string& dir, const CheckpointContents& c);

// The ZeRO-1 optimizer shard files of a checkpoint directory, sorted ("" prefix: none).
std::vector<std::string> zero1_shard_files(const std::string& dir);
std::string zero1_shard_name(int shard);  // "optimizer_zero1_K.safetensors"

// Checks a checkpoint directory (manifest, version, sizes, checksums); throws loom::Error naming
// the file and what is wrong. Returns its step.
int64_t validate_checkpoint(const std::string& dir);
// As validate_checkpoint, and a folder named step_N must hold step N.
int64_t validate_checkpoint_named(const std::string& dir);

class Checkpointer {
 public:
  explicit Checkpointer(CheckpointOptions o);

  // Writes step_N as described above; returns its path. Replaces an existing step_N (a rerun).
  std::string save(int64_t step, const CheckpointContents& c);
  // The same in two halves, for files written by other ranks in between: begin() makes an empty
  // step_N.tmp/ and returns it; commit() writes c there, lists `extra` (files already in it) in the
  // manifest, and publishes the folder.
  std::string begin(int64_t step);
  std::string commit(int64_t step, const CheckpointContents& c, const std::vector<CheckpointFile>& extra);
  // Steps of the step_N folders present (complete or not), ascending.
  std::vector<int64_t> steps() const;
  // What --resume auto picks: the checkpoint `latest` names when it validates, else the next older
  // one that does, walking back with a warning each (folders newer than `latest` are left by an
  // earlier, longer run and never picked; without a readable `latest`, the walk starts at the
  // newest step_N). `check` adds the caller's own test of a candidate (dir, step): it throws
  // loom::Error to reject it. dir "" when none validates; rejected lists each candidate refused, as
  // "step_N: why".
  struct Choice {
    std::string dir;
    std::vector<std::string> rejected;
  };
  Choice choose_resume(const std::function<void(const std::string&, int64_t)>& check = {}) const;
  std::string find_latest_valid() const { return choose_resume().dir; }
  const CheckpointOptions& options() const { return o_; }

 private:
  void prune(int64_t newest);
  CheckpointOptions o_;
};

// Removes a checkpoint-like folder: its files, then its (one level of) sub-folders, then itself.
void remove_checkpoint_dir(const std::string& dir);

}  // namespace loom
