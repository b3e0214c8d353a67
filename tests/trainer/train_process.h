// loom-train as a process on loop_fixture.h's data: the e2e tests' one way to run it.
#pragma once

#include <string>
#include <vector>

#include "loop_fixture.h"
#include "test_util.h"

namespace loom::test {

struct TrainRun {
  int exit_code = -1;
  std::string log;
};

// total_steps steps, a checkpoint every 2, all kept, no dropout, no start-up probe, killed after
// 120 s; extra replaces any of these keys.
inline TrainRun run_train_process(const std::string& data, const std::string& run_dir, int total_steps,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> all = {"--model.dropout=0", "--ckpt.keep=0",
                                  "--data.total_steps=" + std::to_string(total_steps), "--ckpt.checkpoint_every=2",
                                  "--monitor.startup_probe=false"};
  all.insert(all.end(), extra.begin(), extra.end());
  std::string cmd = "timeout -s KILL 120 " + quote(LOOM_TRAIN_BIN);
  for (const auto& a : loop_args(data, run_dir, all)) cmd += " " + quote(a);
  const RunResult r = run(cmd + " 2>&1");
  return {r.exit_code, r.output};
}

}  // namespace loom::test
