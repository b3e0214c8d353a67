#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace loom::test {

TempDir::TempDir(const std::string& tag) {
  std::string base = std::string(LOOM_BINARY_DIR) + "/test_tmp";
  std::system(("mkdir -p " + quote(base)).c_str());
  std::string templ = base + "/" + tag + ".XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp " + templ);
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (!std::getenv("LOOM_KEEP_TMP")) std::system(("rm -rf " + quote(path_)).c_str());
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

RunResult run(const std::string& command) {
  RunResult r{-1, ""};
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("popen " + command);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_all(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string test_data_dir() { return std::string(LOOM_SOURCE_DIR) + "/tests/data"; }
std::string source_dir() { return LOOM_SOURCE_DIR; }
std::string python() { return LOOM_PYTHON; }

Listener::Listener() {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("test Listener: cannot listen on a loopback port");
  }
  port = ntohs(a.sin_port);
}

Listener::~Listener() { ::close(fd); }

std::string Listener::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port) + path;
}

}  // namespace loom::test
