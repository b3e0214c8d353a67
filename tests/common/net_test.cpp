// sys::http_post against a socket the test listens on (port 0: the kernel picks a free one), and
// sys::parse_http_url's accepted and refused forms.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "loom/net.h"
#include "test_util.h"

using namespace loom;

namespace {

using loom::test::Listener;

// Accepts one connection, reads one request (headers and Content-Length bytes of body), answers.
std::string serve_one(int listen_fd, const std::string& answer) {
  const int c = ::accept(listen_fd, nullptr, nullptr);
  if (c < 0) return "accept failed";
  std::string req;
  char buf[1024];
  for (;;) {
    const size_t head_end = req.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const size_t cl = req.find("Content-Length: ");
      const size_t body = cl == std::string::npos ? 0 : std::strtoul(req.c_str() + cl + 16, nullptr, 10);
      if (req.size() >= head_end + 4 + body) break;
    }
    const ssize_t n = ::recv(c, buf, sizeof buf, 0);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  (void)!::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
  ::close(c);
  return req;
}

}  // namespace

TEST_CASE("http_post sends one request with its body, a 2xx answer is success") {
  Listener l;
  std::string request;
  std::thread server([&] { request = serve_one(l.fd, "HTTP/1.1 204 No Content\r\n\r\n"); });
  const std::string body = "{\"x\": 1}";
  const std::string err = sys::http_post(l.url("/hook?a=b"), "application/json", body, 10);
  server.join();
  CHECK(err == "");
  CHECK(request.rfind("POST /hook?a=b HTTP/1.1\r\n", 0) == 0);
  CHECK(request.find("\r\nHost: 127.0.0.1:" + std::to_string(l.port) + "\r\n") != std::string::npos);
  CHECK(request.find("\r\nContent-Type: application/json\r\n") != std::string::npos);
  CHECK(request.find("\r\nContent-Length: 8\r\n") != std::string::npos);
  CHECK(request.substr(request.size() - body.size()) == body);
}

TEST_CASE("http_post: another status, a refused connection, a silent server, a bad URL") {
  {
    Listener l;
    std::thread server([&] { serve_one(l.fd, "HTTP/1.1 500 Internal Server Error\r\n\r\n"); });
    const std::string err = sys::http_post(l.url("/"), "text/plain", "x", 10);
    server.join();
    CHECK(err == "POST " + l.url("/") + ": HTTP/1.1 500 Internal Server Error");
  }
  {
    Listener l;
    std::thread server([&] { serve_one(l.fd, "garbage\r\n"); });
    const std::string err = sys::http_post(l.url("/"), "text/plain", "x", 10);
    server.join();
    CHECK(err.find("not an HTTP answer: 'garbage'") != std::string::npos);
  }
  int dead_port = 0;
  {
    Listener l;  // closed at the end of the scope: nobody listens on that port any more
    dead_port = l.port;
  }
  CHECK(sys::http_post("http://127.0.0.1:" + std::to_string(dead_port) + "/", "text/plain", "x", 5)
            .find("Connection refused") != std::string::npos);
  {
    Listener l;  // connects (the kernel accepts), never answers
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const std::string err = sys::http_post(l.url("/"), "text/plain", "x", 0.3);
    CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 10);
    CHECK(err.find("timed out waiting to receive the answer") != std::string::npos);
  }
  CHECK(sys::http_post("https://example.com/", "text/plain", "x", 1).find("https:// is not supported") == 0);
}

TEST_CASE("parse_http_url: host, port, path, IPv6, bad forms named") {
  sys::HttpUrl u;
  CHECK(sys::parse_http_url("http://relay.local", u) == "");
  CHECK(u.host == "relay.local");
  CHECK(u.port == "80");
  CHECK(u.path == "/");
  sys::HttpUrl v;
  CHECK(sys::parse_http_url("http://[::1]:8080/a/b", v) == "");
  CHECK(v.host == "::1");
  CHECK(v.port == "8080");
  CHECK(v.path == "/a/b");
  sys::HttpUrl w;
  CHECK(sys::parse_http_url("ftp://x", w) == "the URL must start with http://");
  CHECK(sys::parse_http_url("http://", w) == "no host in the URL");
  CHECK(sys::parse_http_url("http://h:0/", w) == "bad port '0'");
  CHECK(sys::parse_http_url("http://h:65536/", w) == "bad port '65536'");
  CHECK(sys::parse_http_url("http://h:8x/", w) == "bad port '8x'");
  CHECK(sys::parse_http_url("http://[::1/", w) == "unterminated [IPv6] host");
}
