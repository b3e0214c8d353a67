// A minimal HTTP/1.1 client: one POST over a plain TCP socket, bounded by a deadline, for
// notifications (alert webhooks). No TLS, no redirects, no body read back: the status line decides.
// Failures come back as text, never as exceptions.
#pragma once

#include <string>

namespace loom::sys {

struct HttpUrl {
  std::string host;         // a name or an address; IPv6 without its brackets
  std::string port = "80";
  std::string path = "/";
};

// Parses "http://host[:port][/path]" (IPv6 as [addr]) into u; "" on success, else the problem
// ("https:// is not supported ..." for https).
std::string parse_http_url(const std::string& url, HttpUrl& u);

// POSTs body with this Content-Type; "" when the answer's status is 2xx, else what went wrong (the
// status line of another answer, a connection or timeout error), prefixed with "POST URL: ". Connect,
// send and receive share one deadline of timeout_s; name resolution has none of its own (an IP
// address resolves without the network).
std::string http_post(const std::string& url, const std::string& content_type, const std::string& body,
                      double timeout_s);

}  // namespace loom::sys
