// Where this process stands in a job: rank, world size, local rank and the rendezvous address, read
// from the launcher's environment in this order (the first launcher whose variables are present wins):
//
//   1. torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
//                 TORCHELASTIC_USE_AGENT_STORE=True (static rendezvous) means torchrun's agent already
//                 serves the TCPStore at MASTER_ADDR:MASTER_PORT, so rank 0 connects instead of serving
//   2. Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (or
//                 SLURM_TASKS_PER_NODE); MASTER_ADDR if set, else the first host of SLURM_JOB_NODELIST;
//                 MASTER_PORT if set, else 29500 + SLURM_JOB_ID % 1000 (two jobs on one node differ)
//   3. Open MPI   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; MASTER_ADDR if set, else
//                 127.0.0.1 when every rank is on one node (an error otherwise); MASTER_PORT or 29500
//   4. none       a single process: rank 0 of 1
//
// Every number is checked (rank < world, local rank < local world); a malformed value is an error that
// names the variable and its value. The rendezvous itself (TCPStore) is the Communicator's job.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <string>
#include <vector>

namespace loom {

class Communicator;

using Environment = std::map<std::string, std::string>;

struct LaunchInfo {
  std::string launcher = "single";  // torchrun | slurm | openmpi | single
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // the launcher serves the store; no rank does
  std::string host;  // this process's host name
};

// The process environment as a map (tests pass their own).
Environment process_environment();

// Resolves the launch as described above.
LaunchInfo read_launch(const Environment& env);

// The first host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03", "a1,b2" -> "a1".
std::string slurm_first_host(const std::string& nodelist);

// One line of the rank table rank 0 prints at start.
struct RankRow {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  std::string device;  // "cpu", "cuda:1"
};

// Every rank's row, gathered through the communicator's store (all ranks call it; rank 0 gets the
// full table, sorted by rank).
std::vector<RankRow> gather_rank_table(Communicator& comm, const RankRow& mine);
std::string format_rank_table(const std::vector<RankRow>& rows);

// Rank 0's launch time (seconds since the epoch), the same on every rank (through the store).
std::time_t shared_launch_time(Communicator& comm);
// The run folder name for a launch time, in UTC: "run_20261202_113000".
std::string run_dir_name(std::time_t launch_time);

}  // namespace loom
