#include "launch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "communicator.h"
#include "loom/error.h"
#include "loom/sys.h"

extern char** environ;

namespace loom {
namespace {

bool has(const Environment& env, const std::string& key) { return env.count(key) > 0; }

std::string get_or(const Environment& env, const std::string& key, const std::string& fallback) {
  auto it = env.find(key);
  return it == env.end() ? fallback : it->second;
}

// A whole decimal integer in [lo, hi], or an error naming the variable.
int parse_int(const Environment& env, const std::string& key, int lo, int hi) {
  auto it = env.find(key);
  LOOM_CHECK(it != env.end(), "launch environment: ", key, " is not set (expected an integer)");
  const std::string& v = it->second;
  bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); });
  LOOM_CHECK(digits && v.size() <= 9, "launch environment: ", key, "='", v, "' is not a non-negative integer");
  int x = std::stoi(v);
  LOOM_CHECK(x >= lo && x <= hi, "launch environment: ", key, "=", x, " is out of range [", lo, ", ", hi, "]");
  return x;
}

int parse_int_or(const Environment& env, const std::string& key, int fallback, int lo, int hi) {
  return has(env, key) ? parse_int(env, key, lo, hi) : fallback;
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": the count of the first node is what a node runs when
// the job is homogeneous; loom only uses it for the local world size, which is informative.
int slurm_tasks_on_first_node(const std::string& v) {
  size_t n = 0;
  while (n < v.size() && std::isdigit(static_cast<unsigned char>(v[n]))) ++n;
  return n == 0 ? 1 : std::max(1, std::stoi(v.substr(0, n)));
}

void check_ranks(LaunchInfo& li, const char* rank_var, const char* local_var) {
  LOOM_CHECK(li.rank < li.world, "launch environment (", li.launcher, "): ", rank_var, "=", li.rank,
             " must be below the world size ", li.world);
  LOOM_CHECK(li.local_rank < li.local_world, "launch environment (", li.launcher, "): ", local_var, "=",
             li.local_rank, " must be below the local world size ", li.local_world);
}

}  // namespace

Environment process_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string slurm_first_host(const std::string& nodelist) {
  LOOM_CHECK(!nodelist.empty(), "launch environment: SLURM_JOB_NODELIST is empty");
  // The first entry ends at the first ',' outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
  }
  std::string first = nodelist.substr(0, end);
  size_t open = first.find('[');
  if (open == std::string::npos) return first;
  size_t close = first.find(']', open);
  LOOM_CHECK(close != std::string::npos, "launch environment: SLURM_JOB_NODELIST='", nodelist,
             "' has an unclosed '['");
  std::string range = first.substr(open + 1, close - open - 1);
  // First element of the range list, first number of a range ("03-05" -> "03"; zero padding kept).
  std::string head = range.substr(0, range.find(','));
  head = head.substr(0, head.find('-'));
  LOOM_CHECK(!head.empty(), "launch environment: SLURM_JOB_NODELIST='", nodelist, "' has an empty range");
  return first.substr(0, open) + head + first.substr(close + 1);
}

LaunchInfo read_launch(const Environment& env) {
  constexpr int kMaxRanks = 1 << 20;
  LaunchInfo li;
  li.host = sys::hostname();
  if (has(env, "RANK") || has(env, "WORLD_SIZE")) {
    li.launcher = "torchrun";
    li.rank = parse_int(env, "RANK", 0, kMaxRanks);
    li.world = parse_int(env, "WORLD_SIZE", 1, kMaxRanks);
    li.local_rank = parse_int_or(env, "LOCAL_RANK", li.rank, 0, kMaxRanks);
    li.local_world = parse_int_or(env, "LOCAL_WORLD_SIZE", li.world, 1, kMaxRanks);
    LOOM_CHECK(li.world == 1 || has(env, "MASTER_ADDR"),
               "launch environment (torchrun): MASTER_ADDR is not set (expected the rendezvous host)");
    li.master_addr = get_or(env, "MASTER_ADDR", li.master_addr);
    li.master_port = parse_int_or(env, "MASTER_PORT", 29500, 1, 65535);
    li.agent_store = get_or(env, "TORCHELASTIC_USE_AGENT_STORE", "") == "True";
    check_ranks(li, "RANK", "LOCAL_RANK");
  } else if (has(env, "SLURM_PROCID")) {
    li.launcher = "slurm";
    li.rank = parse_int(env, "SLURM_PROCID", 0, kMaxRanks);
    li.world = parse_int(env, "SLURM_NTASKS", 1, kMaxRanks);
    li.local_rank = parse_int_or(env, "SLURM_LOCALID", 0, 0, kMaxRanks);
    if (has(env, "SLURM_NTASKS_PER_NODE")) {
      li.local_world = parse_int(env, "SLURM_NTASKS_PER_NODE", 1, kMaxRanks);
    } else {
      li.local_world = has(env, "SLURM_TASKS_PER_NODE")
                           ? slurm_tasks_on_first_node(env.at("SLURM_TASKS_PER_NODE"))
                           : li.world;
    }
    li.local_world = std::max(li.local_world, li.local_rank + 1);
    if (has(env, "MASTER_ADDR")) {
      li.master_addr = env.at("MASTER_ADDR");
    } else {
      LOOM_CHECK(has(env, "SLURM_JOB_NODELIST"),
                 "launch environment (slurm): neither MASTER_ADDR nor SLURM_JOB_NODELIST is set");
      li.master_addr = slurm_first_host(env.at("SLURM_JOB_NODELIST"));
    }
    int job = parse_int_or(env, "SLURM_JOB_ID", 0, 0, 1 << 30);
    li.master_port = parse_int_or(env, "MASTER_PORT", 29500 + job % 1000, 1, 65535);
    check_ranks(li, "SLURM_PROCID", "SLURM_LOCALID");
  } else if (has(env, "OMPI_COMM_WORLD_RANK")) {
    li.launcher = "openmpi";
    li.rank = parse_int(env, "OMPI_COMM_WORLD_RANK", 0, kMaxRanks);
    li.world = parse_int(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
    li.local_rank = parse_int_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, kMaxRanks);
    li.local_world = parse_int_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", li.world, 1, kMaxRanks);
    LOOM_CHECK(has(env, "MASTER_ADDR") || li.local_world == li.world,
               "launch environment (openmpi): ranks span several nodes (OMPI_COMM_WORLD_SIZE=", li.world,
               ", OMPI_COMM_WORLD_LOCAL_SIZE=", li.local_world,
               "); set MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=...)");
    li.master_addr = get_or(env, "MASTER_ADDR", li.master_addr);
    li.master_port = parse_int_or(env, "MASTER_PORT", 29500, 1, 65535);
    check_ranks(li, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK");
  }
  return li;
}

std::vector<RankRow> gather_rank_table(Communicator& comm, const RankRow& mine) {
  std::ostringstream os;
  os << mine.local_rank << ' ' << mine.host << ' ' << mine.device;
  comm.store_set("loom/rank_row/" + std::to_string(mine.rank), os.str());
  std::vector<RankRow> rows;
  if (comm.rank() != 0) return rows;
  for (int r = 0; r < comm.world(); ++r) {
    std::istringstream is(comm.store_get("loom/rank_row/" + std::to_string(r)));
    RankRow row;
    row.rank = r;
    is >> row.local_rank >> row.host >> row.device;
    rows.push_back(row);
  }
  return rows;
}

std::string format_rank_table(const std::vector<RankRow>& rows) {
  std::ostringstream os;
  os << "rank table (" << rows.size() << " ranks):\n  rank  local  host                      device";
  for (const RankRow& r : rows) {
    std::string host = r.host;
    host.resize(std::max<size_t>(host.size(), 24), ' ');
    os << "\n  " << std::string(4 - std::min<size_t>(4, std::to_string(r.rank).size()), ' ') << r.rank
       << "  " << std::string(5 - std::min<size_t>(5, std::to_string(r.local_rank).size()), ' ')
       << r.local_rank << "  " << host << "  " << r.device;
  }
  return os.str();
}

std::time_t shared_launch_time(Communicator& comm) {
  const std::string key = "loom/launch_time";
  if (comm.rank() == 0) comm.store_set(key, std::to_string(static_cast<long long>(std::time(nullptr))));
  return static_cast<std::time_t>(std::stoll(comm.store_get(key)));
}

std::string run_dir_name(std::time_t launch_time) {
  std::tm tm{};
  gmtime_r(&launch_time, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "run_%Y%m%d_%H%M%S", &tm);
  return buf;
}

}  // namespace loom
