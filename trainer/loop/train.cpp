// train(): one process's part of a run: its launch (rank, world), the communicator, the run
// folder's lock and config.ini, the hang watchdog, then the Loop (loop.h). Failures are reported to
// the other ranks and alerted before they leave.
#include "trainer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "determinism.h"
#include "launch.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "loop.h"
#include "run_dir.h"

namespace loom {

namespace {

// The folders of `path` and above that do not exist yet, deepest first: what this start creates.
std::vector<std::string> missing_folders(const std::string& path) {
  std::vector<std::string> out;
  std::string top = path;
  while (top.size() > 1 && top.back() == '/') top.pop_back();
  for (std::string p = top; !p.empty() && p != "." && p != "/" && !sys::exists(p); p = sys::dirname(p))
    out.push_back(p);
  return out;
}

// A start that failed leaves no run folder behind: the folders it created, when they hold only what
// train() wrote there (config.ini, the locks of the run and of a checkpoint folder inside it), are
// removed while their locks are still held, deepest first. Anything else in them stays.
void remove_failed_start_folders(const std::vector<std::string>& created, const std::string& ckpt_folder) {
  try {
    const auto only = [](const std::string& dir, std::vector<std::string> names) {
      for (const std::string& n : sys::list_dir(dir))
        if (std::find(names.begin(), names.end(), n) == names.end()) return false;
      return true;
    };
    if (created.empty()) return;
    const std::string& run_dir = created.front();
    const bool ckpt_inside = sys::dirname(ckpt_folder) == run_dir && sys::exists(ckpt_folder);
    if (!only(run_dir, {"config.ini", kRunDirLockName, ckpt_inside ? sys::basename(ckpt_folder) : "config.ini"}) ||
        (ckpt_inside && !only(ckpt_folder, {kRunDirLockName})))
      return;
    if (ckpt_inside) {
      sys::remove_file(ckpt_folder + "/" + kRunDirLockName);
      sys::remove_dir(ckpt_folder);
    }
    sys::remove_file(run_dir + "/config.ini");
    sys::remove_file(run_dir + "/" + kRunDirLockName);
    for (const std::string& dir : created)
      if (sys::list_dir(dir).empty()) sys::remove_dir(dir);
  } catch (const std::exception& e) {
    log::warn("could not remove the run folder of the failed start, ", created.front(), ": ", e.what());
  }
}

}  // namespace

TrainSummary train(const TrainConfig& config_in, const WeightInit& init_weights) {
  TrainConfig config = config_in;
  const LaunchInfo li = read_launch(process_environment());
  log::set_rank(li.rank);
  log::set_world(li.world);
  if (li.rank != 0) log::set_level(log::Level::kWarn);  // rank 0 speaks for the job; others on trouble
  // LibTorch's own message for a CPU-only build is a dispatcher dump that never says "no CUDA".
  if (torch::Device(config.job.device).is_cuda()) {
    LOOM_CHECK(torch::cuda::is_available(), "job.device=", config.job.device,
               at::hasCUDA() ? ": no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, the driver)"
                             : ": this loom-train is built without CUDA (its LibTorch is CPU only); use job.device=cpu "
                               "or a CUDA build (docs/GPU.md)");
  }
  if (config.job.deterministic) enable_deterministic_mode();  // before cuBLAS or NCCL starts
  // One device per rank: a bare "cuda" means this rank's local GPU.
  if (config.job.device == "cuda") config.job.device = "cuda:" + std::to_string(li.local_rank);
  CommOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000));
  co.backend = config.parallel.backend;
  Alerts alerts(config.monitor.alerts, li.rank, li.host);  // first: a failed rendezvous is alerted too
  std::unique_ptr<Communicator> comm_owner;
  try {
    comm_owner = std::make_unique<Communicator>(li, co, torch::Device(config.job.device));
  } catch (const std::exception& e) {
    alerts.send_exception(e.what());
    alerts.flush(config.monitor.alerts.timeout_s);
    throw;
  }
  Communicator& comm = *comm_owner;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<RunDirLock> run_dir_lock;
  std::unique_ptr<FolderLock> ckpt_lock;  // ckpt.save_ckpt_folder's: another run with its own run_dir may save there
  std::vector<std::string> created;        // the folders rank 0 made for this run
  try {
    derive_micro_num(config, li.world);  // before anything reads data.micro_num or writes config.ini
    if (config.job.run_dir.empty()) set_run_dir(config, "runs/" + run_dir_name(shared_launch_time(comm)));
    const std::vector<RankRow> table =
        gather_rank_table(comm, RankRow{li.rank, li.local_rank, li.host, config.job.device});
    if (li.world > 1)
      log::info(li.launcher, " launch, ", li.world, " ranks, backend ", comm.backend_name(), ":\n",
                format_rank_table(table));
    log::info("loom-train configuration (what differs from the defaults; every key in ", config.job.run_dir,
              "/config.ini):\n", config.changed_ini.empty() ? std::string("(all defaults)\n") : config.changed_ini);
    // Rank 0 locks the folder before anything is written there, and holds it until the run ends.
    if (li.rank == 0) {
      created = missing_folders(config.job.run_dir);
      run_dir_lock = std::make_unique<RunDirLock>(config.job.run_dir);
      // Before prepare_fresh_run_dir: a folder another run is saving into must not be moved aside.
      if (config.ckpt.enable_save || !config.flags.resume.empty())
        ckpt_lock = lock_ckpt_folder(config.ckpt.folder, config.job.run_dir);
      if (config.flags.resume.empty())
        prepare_fresh_run_dir(config.job.run_dir, config.ckpt.folder, config.job.overwrite, config.flags.init_from);
      sys::AtomicFile ini(config.job.run_dir + "/config.ini");  // this run's; each checkpoint keeps its own
      ini.write(config.resolved_ini);
      ini.commit();
    }
    comm.barrier();
    if (config.monitor.hang_timeout > 0) {
      watchdog = std::make_unique<Watchdog>(config.monitor.hang_timeout, &alerts);
      watchdog->set_on_hang([&comm](const std::string& report) { comm.report_failure("hang watchdog: " + report); });
    }
    std::unique_ptr<Loop> loop;
    {
      const Watchdog::StartupPhase startup(watchdog.get());  // the Loop indexes the data and its checksums
      loop = std::make_unique<Loop>(config, init_weights, comm, alerts, watchdog.get());
    }
    return loop->run();
  } catch (const std::exception& e) {
    comm.report_failure(e.what());  // the other ranks' reports name this cause
    remove_failed_start_folders(created, config.ckpt.folder);
    alerts.send_exception(e.what());
    alerts.flush(config.monitor.alerts.timeout_s);
    throw;
  }
}

}  // namespace loom
