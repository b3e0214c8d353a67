#include "loom/net.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

#include "loom/error.h"
#include "loom/fd.h"

namespace loom::sys {

std::string parse_http_url(const std::string& url, HttpUrl& u) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) return "https:// is not supported (loom has no TLS)";
  if (url.rfind(scheme, 0) != 0) return "the URL must start with http://";
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.path = rest.substr(slash);
  if (authority.empty()) return "no host in the URL";
  if (authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return "unterminated [IPv6] host";
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return "junk after the [IPv6] host";
      u.port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return "no host in the URL";
  if (u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos || u.port.size() > 5 ||
      std::stoi(u.port) == 0 || std::stoi(u.port) > 65535)
    return "bad port '" + u.port + "'";
  return "";
}

namespace {

// A connected non-blocking socket to u, or an invalid Fd with the last error in `error`.
Fd connect_to(const HttpUrl& u, Deadline deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res); rc != 0) {
    error = str("resolving ", u.host, ": ", ::gai_strerror(rc));
    return Fd();
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(res, ::freeaddrinfo);
  error = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      error = errno_text("socket", errno);
      continue;
    }
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = errno_text("connect", errno);
      continue;
    }
    if (std::string w = wait_fd(s.get(), POLLOUT, deadline, "connect"); !w.empty()) {
      error = w;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      error = errno_text("connect", err);
      continue;
    }
    return s;
  }
  return Fd();
}

}  // namespace

std::string http_post(const std::string& url, const std::string& content_type, const std::string& body,
                      double timeout_s) {
  const Deadline deadline = deadline_after(timeout_s);
  HttpUrl u;
  if (std::string bad = parse_http_url(url, u); !bad.empty()) return bad;
  std::string error;
  const Fd sock = connect_to(u, deadline, error);
  if (!sock.valid()) return str("POST ", url, ": ", error);

  const std::string host_header = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  const std::string request = str("POST ", u.path, " HTTP/1.1\r\nHost: ", host_header, ":", u.port,
                                  "\r\nContent-Type: ", content_type, "\r\nContent-Length: ", body.size(),
                                  "\r\nConnection: close\r\nUser-Agent: loom\r\n\r\n", body);
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(sock.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (std::string w = wait_fd(sock.get(), POLLOUT, deadline, "send"); !w.empty()) return str("POST ", url, ": ", w);
    } else {
      return str("POST ", url, ": ", errno_text("send", errno));
    }
  }
  // The status line is all we need: "HTTP/1.1 200 OK\r\n".
  std::string answer;
  while (answer.find("\r\n") == std::string::npos && answer.size() < 4096) {
    if (std::string w = wait_fd(sock.get(), POLLIN, deadline, "receive the answer"); !w.empty())
      return str("POST ", url, ": ", w);
    char buf[512];
    const ssize_t n = ::recv(sock.get(), buf, sizeof buf, 0);
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return str("POST ", url, ": ", errno_text("recv", errno));
    }
  }
  const std::string status_line = answer.substr(0, answer.find("\r\n"));
  const size_t sp = status_line.find(' ');
  if (status_line.rfind("HTTP/", 0) != 0 || sp == std::string::npos)
    return str("POST ", url, ": not an HTTP answer: '", status_line.substr(0, 80), "'");
  const int code = std::atoi(status_line.c_str() + sp + 1);
  if (code < 200 || code > 299) return str("POST ", url, ": ", status_line);
  return "";
}

}  // namespace loom::sys
