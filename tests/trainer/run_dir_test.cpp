// The folder locks of run_dir.h (job.run_dir's and the checkpoint folder's) and
// prepare_fresh_run_dir with both held. No LibTorch: checkpoints are stood in for by their names.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "loom/log.h"
#include "loom/sys.h"
#include "run_dir.h"
#include "test_util.h"

using namespace loom;

namespace {
std::string me() { return "host " + sys::hostname() + " pid " + std::to_string(::getpid()); }

// What a checkpoint folder holds, as earlier_run_outputs sees it.
void fake_checkpoint(const std::string& folder, int step) {
  sys::make_dirs(folder + "/step_" + std::to_string(step));
  test::write_all(folder + "/step_" + std::to_string(step) + "/manifest.json", "{}\n");
  test::write_all(folder + "/latest", "step_" + std::to_string(step) + "\n");
}
}  // namespace

TEST_CASE("a folder lock refuses a second holder while the first holds it, naming folder, key and holder", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("folder_lock");
  const std::string ckpt = dir / "shared_ckpt";
  {
    FolderLock first(ckpt, "ckpt.save_ckpt_folder");
    CHECK(first.path() == ckpt + "/" + kRunDirLockName);
    CHECK(test::read_all(first.path()) == sys::hostname() + " " + std::to_string(::getpid()) + "\n");
    // flock conflicts between two open files of one process too.
    CHECK_THROWS_WITH(FolderLock(ckpt, "ckpt.save_ckpt_folder"),
                      Catch::Contains(ckpt) && Catch::Contains("another loom-train run holds") && Catch::Contains(me()) &&
                          Catch::Contains("wait for it to end, or give this run another ckpt.save_ckpt_folder"));
    // Another spelling of the same folder is the same lock file.
    CHECK_THROWS_WITH(FolderLock(dir / "." + "/shared_ckpt/", "ckpt.save_ckpt_folder"), Catch::Contains(me()));
  }
  FolderLock again(ckpt, "ckpt.save_ckpt_folder");  // released with its holder
}

TEST_CASE("a folder lock whose holder died is taken over, whatever name its file still holds", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("folder_lock_dead");
  const std::string ckpt = dir / "ckpt";
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      FolderLock held(ckpt, "ckpt.save_ckpt_folder");
      (void)!::write(ready[1], "x", 1);
      for (;;) ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  const std::string child_name = "host " + sys::hostname() + " pid " + std::to_string(child);
  CHECK_THROWS_WITH(FolderLock(ckpt, "ckpt.save_ckpt_folder"), Catch::Contains(child_name));
  ::kill(child, SIGKILL);  // no destructor runs: the kernel drops the flock
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(test::read_all(ckpt + "/" + kRunDirLockName) == sys::hostname() + " " + std::to_string(child) + "\n");
  FolderLock taken(ckpt, "ckpt.save_ckpt_folder");
  CHECK(test::read_all(taken.path()) == sys::hostname() + " " + std::to_string(::getpid()) + "\n");
}

TEST_CASE("two runs with their own run_dir but one checkpoint folder: the second is refused", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("ckpt_lock_runs");
  const std::string ckpt = dir / "ckpt";
  RunDirLock run_a(dir / "a");
  const auto ckpt_a = lock_ckpt_folder(ckpt, dir / "a");
  REQUIRE(ckpt_a);
  RunDirLock run_b(dir / "b");  // another run folder: free
  CHECK_THROWS_WITH(lock_ckpt_folder(ckpt, dir / "b"),
                    Catch::Contains(ckpt + " (ckpt.save_ckpt_folder): another loom-train run holds " + ckpt + "/" +
                                    kRunDirLockName) &&
                        Catch::Contains(me()));
  // The default, run_dir/checkpoints, is a folder of its own, locked beside run_dir's lock.
  const auto inner = lock_ckpt_folder(dir / "b/checkpoints", dir / "b");
  CHECK(inner);
  // A checkpoint folder that is run_dir itself (any spelling) is covered by run_dir's lock.
  CHECK_FALSE(lock_ckpt_folder(dir / "b", dir / "b"));
  CHECK_FALSE(lock_ckpt_folder(dir / "b/../b/", dir / "b"));
  // run_dir's message is unchanged in substance.
  CHECK_THROWS_WITH(RunDirLock(dir / "a"),
                    Catch::Contains("another loom-train run holds") && Catch::Contains("another job.run_dir"));
}

TEST_CASE("job.overwrite moves an earlier run aside but leaves the checkpoint folder's held lock in place", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("ckpt_lock_overwrite");
  SECTION("the checkpoint folder inside run_dir") {
    const std::string run = dir / "run", ckpt = run + "/checkpoints";
    RunDirLock lock(run);
    const auto ckpt_lock = lock_ckpt_folder(ckpt, run);
    fake_checkpoint(ckpt, 2);
    test::write_all(run + "/metrics.jsonl", "{}\n");
    const std::string aside = prepare_fresh_run_dir(run, ckpt, true);
    CHECK(sys::exists(aside + "/metrics.jsonl"));
    CHECK(sys::exists(aside + "/checkpoints/step_2/manifest.json"));
    CHECK(sys::exists(aside + "/checkpoints/latest"));
    CHECK_FALSE(sys::exists(aside + "/checkpoints/" + kRunDirLockName));
    CHECK(sys::list_dir(ckpt) == std::vector<std::string>{kRunDirLockName});
    CHECK(earlier_run_outputs(run, ckpt).empty());
    // Still held, by the file where the next run looks.
    CHECK_THROWS_WITH(lock_ckpt_folder(ckpt, dir / "other"), Catch::Contains(me()));
  }
  SECTION("the checkpoint folder outside run_dir") {
    const std::string run = dir / "run", ckpt = dir / "ckpt";
    RunDirLock lock(run);
    const auto ckpt_lock = lock_ckpt_folder(ckpt, run);
    fake_checkpoint(ckpt, 4);
    prepare_fresh_run_dir(run, ckpt, true);
    std::string ckpt_aside;
    for (const std::string& name : sys::list_dir(dir.path()))
      if (name.rfind("ckpt.old-", 0) == 0) ckpt_aside = dir / name;
    REQUIRE_FALSE(ckpt_aside.empty());
    CHECK(sys::exists(ckpt_aside + "/step_4/manifest.json"));
    CHECK(sys::list_dir(ckpt) == std::vector<std::string>{kRunDirLockName});
    CHECK_THROWS_WITH(lock_ckpt_folder(ckpt, dir / "other"), Catch::Contains(me()));
  }
  SECTION("without a checkpoint lock an outside folder moves whole, as before") {
    const std::string run = dir / "run", ckpt = dir / "ckpt";
    RunDirLock lock(run);
    fake_checkpoint(ckpt, 6);
    prepare_fresh_run_dir(run, ckpt, true);
    CHECK_FALSE(sys::exists(ckpt));
  }
}
