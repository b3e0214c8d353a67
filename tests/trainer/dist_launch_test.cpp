// The launch environment (torchrun, Slurm, Open MPI, none), the rank table and run folder name, and
// the single-process communicator (collectives are the identity, the store is local).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>

#include "communicator.h"
#include "grad_sync.h"
#include "launch.h"
#include "loom/error.h"

using loom::Environment;
using loom::LaunchInfo;
using loom::read_launch;

TEST_CASE("launch: no launcher variables is a single process", "[dist]") {
  LaunchInfo li = read_launch({{"HOME", "/root"}});
  CHECK(li.launcher == "single");
  CHECK(li.rank == 0);
  CHECK(li.world == 1);
  CHECK(li.local_rank == 0);
  CHECK(li.master_addr == "127.0.0.1");
  CHECK(li.master_port == 29500);
  CHECK(!li.host.empty());
}

TEST_CASE("launch: torchrun variables", "[dist]") {
  Environment env = {{"RANK", "5"},          {"WORLD_SIZE", "8"},         {"LOCAL_RANK", "1"},
                     {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node07"}, {"MASTER_PORT", "29811"},
                     // torchrun wins over the Slurm variables of the allocation it runs in
                     {"SLURM_PROCID", "0"},     {"SLURM_NTASKS", "2"}};
  LaunchInfo li = read_launch(env);
  CHECK(li.launcher == "torchrun");
  CHECK(li.rank == 5);
  CHECK(li.world == 8);
  CHECK(li.local_rank == 1);
  CHECK(li.local_world == 4);
  CHECK(li.master_addr == "node07");
  CHECK(li.master_port == 29811);
  CHECK(!li.agent_store);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  CHECK(read_launch(env).agent_store);
}

TEST_CASE("launch: torchrun errors name the variable and value", "[dist]") {
  CHECK_THROWS_WITH(read_launch({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
                    Catch::StartsWith("launch environment (torchrun): RANK=2 must be below the world size 2"));
  CHECK_THROWS_WITH(read_launch({{"RANK", "x1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
                    Catch::StartsWith("launch environment: RANK='x1' is not a non-negative integer"));
  CHECK_THROWS_WITH(read_launch({{"RANK", "0"}, {"WORLD_SIZE", "2"}}),
                    Catch::StartsWith("launch environment (torchrun): MASTER_ADDR is not set"));
  CHECK_THROWS_WITH(read_launch({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                    Catch::StartsWith("launch environment: MASTER_PORT=70000 is out of range [1, 65535]"));
  CHECK_THROWS_WITH(read_launch({{"RANK", "0"}}),
                    Catch::StartsWith("launch environment: WORLD_SIZE is not set (expected an integer)"));
}

TEST_CASE("launch: Slurm variables and the first host of the node list", "[dist]") {
  Environment env = {{"SLURM_PROCID", "9"},
                     {"SLURM_NTASKS", "16"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_TASKS_PER_NODE", "8(x2)"},
                     {"SLURM_JOB_NODELIST", "gpu[03-04,9],cpu1"},
                     {"SLURM_JOB_ID", "123456"}};
  LaunchInfo li = read_launch(env);
  CHECK(li.launcher == "slurm");
  CHECK(li.rank == 9);
  CHECK(li.world == 16);
  CHECK(li.local_rank == 1);
  CHECK(li.local_world == 8);
  CHECK(li.master_addr == "gpu03");
  CHECK(li.master_port == 29500 + 456);

  env["MASTER_ADDR"] = "login1";
  env["MASTER_PORT"] = "12345";
  LaunchInfo li2 = read_launch(env);
  CHECK(li2.master_addr == "login1");
  CHECK(li2.master_port == 12345);

  CHECK(loom::slurm_first_host("a1,b2") == "a1");
  CHECK(loom::slurm_first_host("node[7]") == "node7");
  CHECK(loom::slurm_first_host("rack[2-3]-n[01-08]") == "rack2-n[01-08]");
  CHECK(loom::slurm_first_host("x[001-100]y") == "x001y");
  CHECK_THROWS_WITH(loom::slurm_first_host("gpu[03-04"), Catch::StartsWith("launch environment: SLURM_JOB_NODELIST='gpu[03-04' has an unclosed '['"));
  CHECK_THROWS_WITH(read_launch({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}),
                    Catch::StartsWith("launch environment (slurm): neither MASTER_ADDR nor SLURM_JOB_NODELIST is set"));
}

TEST_CASE("launch: Open MPI variables", "[dist]") {
  Environment env = {{"OMPI_COMM_WORLD_RANK", "3"},
                     {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  LaunchInfo li = read_launch(env);
  CHECK(li.launcher == "openmpi");
  CHECK(li.rank == 3);
  CHECK(li.world == 4);
  CHECK(li.local_rank == 3);
  CHECK(li.local_world == 4);
  CHECK(li.master_addr == "127.0.0.1");  // one node: loopback
  CHECK(li.master_port == 29500);

  env["OMPI_COMM_WORLD_SIZE"] = "8";  // two nodes and no MASTER_ADDR
  CHECK_THROWS_WITH(read_launch(env), Catch::StartsWith("launch environment (openmpi): ranks span several nodes "
                                                        "(OMPI_COMM_WORLD_SIZE=8, OMPI_COMM_WORLD_LOCAL_SIZE=4); set "
                                                        "MASTER_ADDR"));
  env["MASTER_ADDR"] = "n0";
  CHECK(read_launch(env).master_addr == "n0");
}

TEST_CASE("launch: run folder name is the launch time in UTC", "[dist]") {
  CHECK(loom::run_dir_name(0) == "run_19700101_000000");
  CHECK(loom::run_dir_name(1764675000) == "run_20251202_113000");
}

TEST_CASE("launch: single-process communicator is the identity", "[dist]") {
  LaunchInfo li;
  loom::Communicator comm(li, {}, torch::Device(torch::kCPU));
  CHECK(comm.world() == 1);
  torch::Tensor t = torch::arange(6, torch::kFloat32);
  comm.all_reduce(t);
  comm.broadcast(t);
  CHECK(torch::equal(t, torch::arange(6, torch::kFloat32)));
  torch::Tensor out = torch::empty({6});
  comm.reduce_scatter(out, t);
  CHECK(torch::equal(out, t));
  comm.all_gather(out, t * 2);
  CHECK(torch::equal(out, t * 2));
  CHECK(comm.all_reduce_scalar(2.5) == 2.5);

  // The rank table and launch time go through the (local) store.
  auto rows = loom::gather_rank_table(comm, {0, 0, "hostA", "cpu"});
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].host == "hostA");
  CHECK(loom::format_rank_table(rows) ==
        "rank table (1 ranks):\n  rank  local  host                      device\n     0      0  hostA                     cpu");
  std::time_t t0 = loom::shared_launch_time(comm);
  CHECK(std::llabs(static_cast<long long>(t0 - std::time(nullptr))) <= 5);

  loom::CommOptions bad;
  bad.backend = "mpi";
  CHECK_THROWS_WITH(loom::Communicator(li, bad, torch::Device(torch::kCPU)),
                    Catch::StartsWith("parallel.backend='mpi': expected auto, gloo or nccl"));
}
