// Launching one job's ranks on loopback as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), for the multi-process tests (label dist).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace loom::test {

// A loopback TCP port reserved for one job. The socket is bound (SO_REUSEADDR, never listening)
// for the object's lifetime, so the kernel hands the port to no other bind, while rank 0's c10d
// TCPStore, which binds with SO_REUSEADDR too, listens on it: no window in which another test can
// take the port between choosing it and using it.
class HeldPort {
 public:
  HeldPort();
  ~HeldPort();
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

struct RankResult {
  int exit_code = -1;
  double seconds = 0;  // from the launch to this rank's exit
  std::string log;     // the rank's stdout and stderr
};

// Runs `world` copies of `binary`, rank r with the arguments args_for_rank(r) (shell-quoted
// already), each under `timeout -s KILL timeout_s`, and waits for all; after_rank0 (a shell
// command, may be empty) runs as soon as rank 0 has exited. Logs and exit codes land in
// dir/tag.R.log and dir/tag.R.rc.
std::vector<RankResult> launch_ranks(int world, const std::string& binary,
                                     const std::function<std::string(int rank)>& args_for_rank,
                                     const TempDir& dir, const std::string& tag, int timeout_s,
                                     const std::string& after_rank0 = "");

// REQUIREs exit code 0 of every rank, printing the failing rank's log.
void require_success(const std::vector<RankResult>& ranks);

}  // namespace loom::test
