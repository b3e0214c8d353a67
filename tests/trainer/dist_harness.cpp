#include "dist_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace loom::test {

HeldPort::HeldPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;  // the kernel's pick
  socklen_t n = sizeof a;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    throw std::runtime_error("cannot reserve a loopback port: " + why);
  }
  port_ = ntohs(a.sin_port);
}

HeldPort::~HeldPort() { ::close(fd_); }

std::vector<RankResult> launch_ranks(int world, const std::string& binary,
                                     const std::function<std::string(int rank)>& args_for_rank,
                                     const TempDir& dir, const std::string& tag, int timeout_s,
                                     const std::string& after_rank0) {
  const HeldPort port;
  std::ostringstream sh;
  for (int r = 0; r < world; ++r) {
    const std::string p = dir / (tag + "." + std::to_string(r));
    sh << "( RANK=" << r << " WORLD_SIZE=" << world << " LOCAL_RANK=" << r << " LOCAL_WORLD_SIZE=" << world
       << " MASTER_ADDR=127.0.0.1 MASTER_PORT=" << port.port() << " timeout -s KILL " << timeout_s << " "
       << quote(binary) << " " << args_for_rank(r) << " > " << quote(p + ".log") << " 2>&1; echo $? $(date +%s.%N) > "
       << quote(p + ".rc") << " ) &\n";
    if (r == 0) sh << "rank0=$!\n";
  }
  sh << "wait $rank0\n" << after_rank0 << "\nwait\n";
  const std::string script = dir / (tag + ".sh");
  write_all(script, sh.str());
  const auto t0 = std::chrono::system_clock::now();
  run("bash " + quote(script));
  const double start = std::chrono::duration<double>(t0.time_since_epoch()).count();
  std::vector<RankResult> out(world);
  for (int r = 0; r < world; ++r) {
    const std::string p = dir / (tag + "." + std::to_string(r));
    std::istringstream rc(read_all(p + ".rc"));
    double end = 0;
    rc >> out[r].exit_code >> end;
    out[r].seconds = end - start;
    out[r].log = read_all(p + ".log");
  }
  return out;
}

void require_success(const std::vector<RankResult>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    INFO("rank " << r << " of " << ranks.size() << " log:\n" << ranks[r].log);
    REQUIRE(ranks[r].exit_code == 0);
  }
}

}  // namespace loom::test
