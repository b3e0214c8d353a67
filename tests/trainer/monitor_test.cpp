// Monitoring and fault tolerance: alerts (webhook, command), hang watchdog, loss spikes, stop file,
// async checkpoints, health-check statistics. Tag [monitor].
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <simdjson.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <mutex>
#include <thread>

#include "alerts.h"
#include "async_checkpoint.h"
#include "checkpoint.h"
#include "health_check.h"
#include "host_block.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "safetensors.h"
#include "spike_detector.h"
#include "stop_file.h"
#include "test_util.h"
#include "watchdog.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using loom::test::Listener;

// A one-shot HTTP server: accepts one request, keeps its body, answers `status`.
struct TinyHttpServer {
  Listener l;
  std::string request;
  std::thread t;
  explicit TinyHttpServer(int status = 200) {
    t = std::thread([this, status] {
      const int c = ::accept(l.fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      for (;;) {
        const size_t hdr_end = request.find("\r\n\r\n");
        if (hdr_end != std::string::npos) {
          const size_t cl = request.find("Content-Length: ");
          const size_t want = cl == std::string::npos ? 0 : std::stoul(request.substr(cl + 16));
          if (request.size() >= hdr_end + 4 + want) break;
        }
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      const std::string answer = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: 0\r\n\r\n";
      (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
    });
  }
  ~TinyHttpServer() {
    if (t.joinable()) t.join();
  }
  std::string body() {
    t.join();
    return request.substr(request.find("\r\n\r\n") + 4);
  }
};

// A port with nothing listening (bound, then closed).
int dead_port() {
  Listener l;
  return l.port;
}

simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& s) {
  simdjson::dom::element e;
  REQUIRE(!p.parse(s).get(e));
  return e;
}

std::string get_str(simdjson::dom::element e, const char* k) {
  std::string_view v;
  REQUIRE(!e[k].get(v));
  return std::string(v);
}

int64_t get_int(simdjson::dom::element e, const char* k) {
  int64_t v = 0;
  REQUIRE(!e[k].get(v));
  return v;
}

}  // namespace

// ---- alerts ----

TEST_CASE("alert JSON and exception body", "[monitor]") {
  const std::string j = alert_json(AlertLevel::kWarn, "loss \"spike\"", "line1\nline2", 3, "node7", 12, 86400.5);
  CHECK(j ==
        "{\"level\": \"warn\", \"title\": \"loss \\\"spike\\\"\", \"body\": \"line1\\u000aline2\", \"rank\": 3, "
        "\"host\": \"node7\", \"step\": 12, \"time\": \"1970-01-02T00:00:00Z\"}");
  std::string what;
  for (int i = 1; i <= 30; ++i) what += "line " + std::to_string(i) + "\n";
  const std::string b = exception_alert_body(what, 2, "h", 40, 3);
  CHECK(b == "rank 2 on h at step 40:\n...\nline 28\nline 29\nline 30");
  CHECK(exception_alert_body("one line", 0, "h", 1) == "rank 0 on h at step 1:\none line");
}

TEST_CASE("webhook receives the alert as JSON", "[monitor]") {
  TinyHttpServer server;
  {
    Alerts a({server.l.url(), "", 5.0}, 3, "node7");
    a.set_step(17);
    a.send(AlertLevel::kError, "hang", "no step for 600 s");
    REQUIRE(a.flush(5));
    CHECK(a.delivered() == 1);
    CHECK(a.failed() == 0);
  }
  const std::string full = server.request;
  CHECK(full.rfind("POST /hook HTTP/1.1\r\n", 0) == 0);
  CHECK(full.find("Content-Type: application/json\r\n") != std::string::npos);
  simdjson::dom::parser p;
  auto e = parse(p, server.body());
  CHECK(get_str(e, "level") == "error");
  CHECK(get_str(e, "title") == "hang");
  CHECK(get_str(e, "body") == "no step for 600 s");
  CHECK(get_int(e, "rank") == 3);
  CHECK(get_str(e, "host") == "node7");
  CHECK(get_int(e, "step") == 17);
  const std::string t = get_str(e, "time");
  CHECK(t.size() == 20);
  CHECK(t.back() == 'Z');
}

TEST_CASE("webhook: a non-2xx answer is a failure, https and bad URLs are refused", "[monitor]") {
  TinyHttpServer server(500);
  CHECK(http_post_json(server.l.url(), "{}", 5).find("HTTP/1.1 500") != std::string::npos);
  server.t.join();
  CHECK_THROWS_WITH(Alerts({"https://example.com/x", "", 5}, 0, "h"), Catch::Contains("https:// is not supported"));
  CHECK_THROWS_WITH(Alerts({"ftp://x", "", 5}, 0, "h"), Catch::Contains("must start with http://"));
  CHECK_THROWS_WITH(Alerts({"http://h:99999/", "", 5}, 0, "h"), Catch::Contains("bad port"));
  CHECK(http_post_json("http://127.0.0.1:" + std::to_string(dead_port()) + "/", "{}", 2).find("Connection refused") !=
        std::string::npos);
}

TEST_CASE("a dead webhook never slows send(), the destructor's wait is bounded", "[monitor]") {
  const double timeout = 0.5;
  SECTION("nobody listens") {
    const auto t_all = Clock::now();
    {
      Alerts a({"http://127.0.0.1:" + std::to_string(dead_port()) + "/", "", timeout}, 0, "h");
      for (int i = 0; i < 5; ++i) {
        const auto t0 = Clock::now();
        a.send(AlertLevel::kWarn, "t", "b");
        // Logging and a queue push take microseconds; touching the network would wait out `timeout`.
        // Half of it separates the two on a loaded machine too.
        CHECK(since(t0) < timeout / 2);
      }
      REQUIRE(a.flush(5));
      CHECK(a.failed() == 5);
    }
    CHECK(since(t_all) < 2 * timeout);  // refused at once: no delivery waits for its timeout
  }
  SECTION("a server that accepts and never answers") {
    Listener silent;
    const auto t_all = Clock::now();
    double dtor_s = 0;
    {
      std::unique_ptr<Alerts> a(new Alerts({silent.url(), "", timeout}, 0, "h"));
      for (int i = 0; i < 10; ++i) {
        const auto t0 = Clock::now();
        a->send(AlertLevel::kWarn, "t", "b");
        // Logging and a queue push take microseconds; touching the network would wait out `timeout`.
        // Half of it separates the two on a loaded machine too.
        CHECK(since(t0) < timeout / 2);
      }
      const auto t0 = Clock::now();
      a.reset();
      dtor_s = since(t0);
    }
    // The drain lasts at most timeout + 1 s (plus the 0.5 s grace for the thread to notice).
    CHECK(dtor_s < timeout + 1.5 + 0.3);
    CHECK(since(t_all) < timeout + 1.5 + 0.5);
  }
  SECTION("a full queue drops and counts") {
    Listener silent;
    Alerts a({silent.url(), "", timeout, 4}, 0, "h");
    for (int i = 0; i < 20; ++i) a.send(AlertLevel::kInfo, "t", "b");
    // One may already be in flight: 4 queued + at most 1 taken, the rest dropped.
    CHECK(a.dropped() >= 15);
    CHECK(a.dropped() <= 16);
  }
}

TEST_CASE("alert_command gets the JSON on stdin, a slow command is killed", "[monitor]") {
  test::TempDir dir("alerts");
  const std::string out = dir / "alerts.jsonl";
  {
    Alerts a({"", "cat >> " + test::quote(out), 5.0}, 1, "hostA");
    a.set_step(99);
    a.send(AlertLevel::kInfo, "start", "training starts");
    a.send_exception("c10::Error\nframe 1\nCUDA error: an illegal memory access");
    REQUIRE(a.flush(10));
    CHECK(a.delivered() == 2);
  }
  const std::string text = test::read_all(out);
  const size_t nl = text.find('\n');
  REQUIRE(nl != std::string::npos);
  simdjson::dom::parser p;
  auto first = parse(p, text.substr(0, nl));
  CHECK(get_str(first, "level") == "info");
  CHECK(get_str(first, "title") == "start");
  CHECK(get_str(first, "body") == "training starts");
  CHECK(get_int(first, "rank") == 1);
  CHECK(get_str(first, "host") == "hostA");
  CHECK(get_int(first, "step") == 99);
  simdjson::dom::parser p2;
  auto second = parse(p2, text.substr(nl + 1, text.find('\n', nl + 1) - nl - 1));
  CHECK(get_str(second, "title") == "exception on rank 1");
  CHECK(get_str(second, "body") ==
        "rank 1 on hostA at step 99:\nc10::Error\nframe 1\nCUDA error: an illegal memory access");

  const auto t0 = Clock::now();
  const std::string err = run_command_with_input("sleep 30", "x\n", 0.3);
  CHECK(since(t0) < 2);
  CHECK(err.find("timed out") != std::string::npos);
  CHECK(run_command_with_input("exit 3", "x", 5).find("exited with 3") != std::string::npos);
  CHECK(run_command_with_input("true", std::string(1 << 20, 'x'), 5) == "");  // exits unread: no SIGPIPE
}

// ---- watchdog ----

namespace {

// Runs body in a forked child with stderr redirected to a file; returns {exit code, stderr text}.
template <typename F>
std::pair<int, std::string> in_child(const std::string& log_path, F&& body) {
  std::fflush(stdout);  // or the child flushes the parent's buffered output a second time
  std::fflush(stderr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    body();
    std::fflush(stderr);
    std::_Exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, test::read_all(log_path)};
}

}  // namespace

TEST_CASE("watchdog fires without a heartbeat: exit code 4, the log names the phases", "[monitor]") {
  test::TempDir dir("watchdog");
  const auto t0 = Clock::now();
  auto [code, log] = in_child(dir / "child.log", [] {
    Watchdog w(1.0);
    w.set_on_hang([](const std::string& report) { log::error("on-hang hook got: ", report.substr(0, 13)); });
    w.heartbeat(41);
    const int loader = w.add_slot("loader");
    w.set_phase(loader, "read_shard");
    w.set_phase("allreduce:grads");
    std::this_thread::sleep_for(std::chrono::seconds(20));  // "hung"
  });
  CHECK(code == kExitHang);
  CHECK(code == 4);
  CHECK(since(t0) < 5);
  CHECK(log.find("hang detected") != std::string::npos);
  CHECK(log.find("last completed step 41") != std::string::npos);
  CHECK(log.find("main: phase 'allreduce:grads' for 1.") != std::string::npos);
  CHECK(log.find("loader: phase 'read_shard'") != std::string::npos);
  CHECK(log.find("exiting with code 4") != std::string::npos);
  CHECK(log.find("on-hang hook got: hang detected") != std::string::npos);
}

TEST_CASE("watchdog: an on-hang hook that blocks does not keep the process alive", "[monitor]") {
  test::TempDir dir("watchdog");
  const auto t0 = Clock::now();
  auto [code, log] = in_child(dir / "child.log", [] {
    Watchdog w(0.3);
    w.set_on_hang([](const std::string&) { std::this_thread::sleep_for(std::chrono::seconds(60)); }, 0.5);
    std::this_thread::sleep_for(std::chrono::seconds(60));
  });
  CHECK(code == 4);
  CHECK(since(t0) < 5);
  CHECK(log.find("the on-hang hook did not return within 0.5 s") != std::string::npos);
}

TEST_CASE("watchdog: heartbeats and a long phase move its deadline, a bounded long phase fires", "[monitor]") {
  // The deadline the watchdog's thread compares with the clock, read without waiting for anything.
  using std::chrono::duration;
  const auto seconds = [](Watchdog::Clock::duration d) { return duration<double>(d).count(); };
  Watchdog w(30);  // long enough never to fire while the test runs
  const auto before = Watchdog::Clock::now();
  w.heartbeat(0);
  const auto after = Watchdog::Clock::now();
  const auto d0 = w.deadline();
  CHECK(seconds(d0 - before) >= 30.0);
  CHECK(seconds(d0 - after) <= 30.0);
  w.set_phase("forward_backward");  // a phase alone is no progress
  CHECK(w.deadline() == d0);
  w.heartbeat(1);
  CHECK(w.deadline() >= d0);
  CHECK(w.report().find("last completed step 1") != std::string::npos);
  {
    Watchdog::LongPhase v(&w, "validation");  // unbounded
    CHECK(w.deadline() == Watchdog::Clock::time_point::max());
  }
  const auto end = Watchdog::Clock::now();
  CHECK(seconds(w.deadline() - end) <= 30.0);  // the clock restarted at the guard's end
  CHECK(seconds(w.deadline() - end) > 29.0);
  {
    const auto t = Watchdog::Clock::now();
    Watchdog::LongPhase v(&w, "checkpoint", 0.5);
    CHECK(seconds(w.deadline() - t) >= 0.5);
    CHECK(seconds(w.deadline() - t) < 30.0);
  }

  // And the thread acts on it: a bounded phase that never ends is reported with its timeout.
  test::TempDir dir("watchdog");
  auto [code, log] = in_child(dir / "save.log", [] {
    Watchdog wd(5);
    Watchdog::LongPhase v(&wd, "checkpoint", 0.5);
    std::this_thread::sleep_for(std::chrono::seconds(20));  // "hung": the watchdog ends the process first
  });
  CHECK(code == 4);
  CHECK(log.find("main: phase 'checkpoint'") != std::string::npos);
  CHECK(log.find("(timeout 0.5 s)") != std::string::npos);
}

TEST_CASE("watchdog sends its alert before exiting", "[monitor]") {
  test::TempDir dir("watchdog");
  const std::string out = dir / "alert.json";
  auto [code, log] = in_child(dir / "child.log", [&] {
    Alerts a({"", "cat > " + test::quote(out), 2.0}, 5, "h");
    Watchdog w(0.5, &a);
    w.set_phase("optimizer");
    std::this_thread::sleep_for(std::chrono::seconds(20));
  });
  CHECK(code == 4);
  const std::string j = test::read_all(out);
  simdjson::dom::parser p;
  auto e = parse(p, j.substr(0, j.find('\n')));
  CHECK(get_str(e, "title") == "hang");
  CHECK(get_int(e, "rank") == 5);
  CHECK(get_str(e, "body").find("main: phase 'optimizer'") != std::string::npos);
}

// ---- spike detector ----

TEST_CASE("spike detector: exact steps flagged on a fixed series", "[monitor]") {
  SpikeDetector d({2.0, 4, true});
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Hand-computed: warm-up 10 9 8 7; then reference = median of the 4 accepted losses.
  struct Case {
    double loss;
    bool spike;
    double reference;
  };
  const std::vector<Case> series = {
      {10, false, 0}, {9, false, 0},  {8, false, 0},      {7, false, 0},      // warm-up
      {20, true, 8.5}, {7.5, false, 8.5},                                     // 20 > 2*8.5; excluded
      {nan, true, 7.75},                                                      // window 9 8 7 7.5
      {15, false, 7.75}, {15.6, true, 7.75}, {inf, true, 7.75},               // window 8 7 7.5 15
      {7, false, 7.75},                                                       // window 7 7.5 15 7
      {14.6, true, 7.25}};                                                    // 14.6 > 14.5
  std::vector<int64_t> flagged;
  for (size_t s = 0; s < series.size(); ++s) {
    const SpikeVerdict v = d.observe(static_cast<int64_t>(s), series[s].loss);
    INFO("step " << s);
    CHECK(v.is_spike == series[s].spike);
    CHECK(v.reference == series[s].reference);
    CHECK(v.warming_up == (s < 4));
    if (v.is_spike) flagged.push_back(static_cast<int64_t>(s));
  }
  CHECK(flagged == std::vector<int64_t>{4, 6, 8, 9, 11});
  CHECK(d.spikes() == 5);

  // Not excluding spikes: 20 enters the window and raises the median.
  SpikeDetector keep({2.0, 4, false});
  int64_t step = 0;
  for (double x : {10.0, 9.0, 8.0, 7.0, 20.0}) keep.observe(step++, x);
  CHECK(keep.reference() == 8.5);  // window 9 8 7 20
  // NaN during warm-up is a spike too.
  SpikeDetector w({2.0, 4, true});
  CHECK(w.observe(0, nan).is_spike);
  CHECK(w.observe(1, nan).warming_up);
}

TEST_CASE("spike detector: a level shift rebases after `window` spikes in a row", "[monitor]") {
  SpikeDetector d({2.0, 3, true});
  int64_t s = 0;
  for (int i = 0; i < 3; ++i) d.observe(s++, 1.0);
  CHECK(d.observe(s++, 5).is_spike);
  CHECK(d.observe(s++, 5).is_spike);
  const SpikeVerdict third = d.observe(s++, 5);
  CHECK(third.is_spike);
  CHECK(third.rebased);
  for (int i = 0; i < 3; ++i) CHECK(d.observe(s++, 5).warming_up);
  const SpikeVerdict after = d.observe(s++, 5.1);
  CHECK_FALSE(after.is_spike);
  CHECK(after.reference == 5);
}

TEST_CASE("spike detector: state round trip continues bitwise the same", "[monitor]") {
  SpikeDetector a({1.5, 7, true});
  std::vector<double> losses;
  for (int i = 0; i < 60; ++i) losses.push_back(1.0 / 3 + std::sin(i * 0.7) * 0.2 + (i % 13 == 12 ? 1.0 : 0.0));
  for (int i = 0; i < 30; ++i) a.observe(i, losses[static_cast<size_t>(i)]);
  SpikeDetector b({1.5, 7, true});
  b.from_json(a.to_json());
  CHECK(b.to_json() == a.to_json());
  CHECK(b.reference() == a.reference());
  int spikes = 0;
  for (int i = 30; i < 60; ++i) {
    const SpikeVerdict va = a.observe(i, losses[static_cast<size_t>(i)]);
    const SpikeVerdict vb = b.observe(i, losses[static_cast<size_t>(i)]);
    CHECK(va.is_spike == vb.is_spike);
    CHECK(va.reference == vb.reference);  // bitwise: same doubles
    spikes += va.is_spike;
  }
  CHECK(spikes > 0);
  CHECK(a.to_json() == b.to_json());
  CHECK_THROWS_WITH(b.from_json("{\"losses\": [1]}"), Catch::Contains("needs integers"));
  CHECK_THROWS_WITH(b.from_json("nope"), Catch::Contains("not valid JSON"));
}

// ---- stop file ----

TEST_CASE("stop file: parsing each form and garbage", "[monitor]") {
  struct Case {
    std::string text;
    int64_t value;
    bool garbage;
  };
  for (const Case& c : std::vector<Case>{{"5", 5, false},
                                         {"+5\n", 5, false},
                                         {"  -7 \n\n", -7, false},
                                         {"0", 0, false},
                                         {"", 0, false},
                                         {" \n", 0, false},
                                         {"abc", 0, true},
                                         {"5x", 0, true},
                                         {"+", 0, true},
                                         {"--3", 0, true},
                                         {"1 2", 0, true},
                                         {"99999999999999999999", 0, true}}) {
    bool garbage = false;
    INFO("text '" << c.text << "'");
    CHECK(parse_stop_file_text(c.text, &garbage) == c.value);
    CHECK(garbage == c.garbage);
  }
  auto d = stop_decision(-5, 5);
  CHECK((d.save && !d.quit));
  d = stop_decision(5, 5);
  CHECK((d.save && d.quit));
  d = stop_decision(5, 4);
  CHECK((!d.save && !d.quit));
  d = stop_decision(-5, 6);
  CHECK((!d.save && !d.quit));
  d = stop_decision(0, 0);
  CHECK((!d.save && !d.quit));
}

TEST_CASE("stop file: created with 0, polled on change only, garbage is a warning", "[monitor]") {
  test::TempDir dir("stopfile");
  const std::string path = dir / "sub/stop";
  StopFile missing(dir / "nothing", false);
  CHECK(missing.poll() == 0);
  CHECK_FALSE(sys::exists(dir / "nothing"));

  StopFile f(path, true);
  CHECK(test::read_all(path) == "0\n");
  CHECK(f.poll() == 0);
  test::write_all(path, "+3\n");
  CHECK(f.poll() == 3);
  auto d = f.check(2, nullptr);
  CHECK((!d.save && !d.quit));
  d = f.check(3, nullptr);
  CHECK((d.save && d.quit));

  // Same size, inode and mtime: not re-read (the cached command stays).
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  test::write_all(path, "-4\n");
  const timespec times[2] = {st.st_atim, st.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  CHECK(f.poll() == 3);
  const timespec later[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), later, 0) == 0);
  CHECK(f.poll() == -4);
  d = f.check(4, nullptr);
  CHECK((d.save && !d.quit));

  test::write_all(path, "stop please");
  CHECK(f.poll() == 0);
  ::unlink(path.c_str());
  CHECK(f.poll() == 0);
  StopFile off("", true);
  CHECK(off.poll() == 0);
}

// ---- async checkpoint ----

namespace {

CheckpointContents sample_contents(float v) {
  CheckpointContents c;
  torch::manual_seed(11);
  c.model = {{"w", torch::randn({64, 33}) + v}, {"b", torch::arange(7, torch::kInt64)}};
  c.optimizer = {{"step", torch::full({}, 3.0, torch::kFloat64)}, {"exp_avg.w", torch::randn({64, 33})}};
  c.state_json = "{\"step\": 5}\n";
  c.config_ini = "[job]\nrun_dir = x\n";
  return c;
}

}  // namespace

TEST_CASE("async checkpoint writes the same bytes as a synchronous save", "[monitor]") {
  test::TempDir dir("async_ckpt");
  Checkpointer sync_ck({dir / "sync", 2});
  Checkpointer async_ck({dir / "async", 2});
  sync_ck.save(5, sample_contents(1));
  AsyncCheckpointer ac(async_ck);
  const double blocked = ac.save(5, sample_contents(1));
  CHECK(blocked >= 0);
  const AsyncSaveResult r = ac.wait();
  REQUIRE(r.ok());
  CHECK(r.path == dir / "async/step_5");
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json", "config.ini", "manifest.json"}) {
    INFO(f);
    CHECK(test::read_all(dir / "async/step_5/" + f) == test::read_all(dir / "sync/step_5/" + f));
  }
  CHECK(test::read_all(dir / "async/latest") == "step_5\n");
  CHECK(validate_checkpoint(dir / "async/step_5") == 5);
}

// Saves after the first copy into the same host buffers (no allocation), and each copy holds the
// values of its own save: the second sees the updated weights, not the first's.
TEST_CASE("async checkpoint: host buffers are reused from save to save and hold each save's values", "[monitor]") {
  HostBuffers buffers;
  CheckpointContents first_src = sample_contents(1);
  const CheckpointContents first = copy_to_host(first_src, &buffers);
  const void* w_first = first.model[0].second.data_ptr();
  CHECK(torch::equal(first.model[0].second, first_src.model[0].second));
  CHECK(first.model[0].second.data_ptr() != first_src.model[0].second.data_ptr());  // a copy, not the live tensor
  const int64_t bytes = buffers.bytes();
  CHECK(bytes == (64 * 33 * 4) * 2 + 7 * 8 + 8);
  const float w0 = first.model[0].second[0][0].item<float>();
  first_src.model[0].second.add_(5);  // the optimizer moves on
  const CheckpointContents second = copy_to_host(first_src, &buffers);
  CHECK(second.model[0].second.data_ptr() == w_first);  // the same buffer
  CHECK(buffers.bytes() == bytes);
  CHECK(second.model[0].second[0][0].item<float>() == w0 + 5);
  CHECK(torch::equal(second.optimizer[1].second, first_src.optimizer[1].second));
  // A tensor that changes shape gets a new buffer under its name.
  first_src.model[0].second = torch::zeros({3});
  const CheckpointContents third = copy_to_host(first_src, &buffers);
  CHECK(third.model[0].second.sizes() == torch::IntArrayRef({3}));
  CHECK(buffers.bytes() == bytes - 64 * 33 * 4 + 3 * 4);
}

// Page-locking goes piece by piece, each piece whole buffers: a piece ends at the first buffer
// start at least piece_bytes in, one larger buffer is a piece of its own, the last piece takes the rest.
TEST_CASE("async checkpoint: the host block is registered in pieces that hold whole buffers", "[monitor]") {
  using P = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(HostBlock::pieces(100, {0, 10, 20, 30, 90}, 25) == P{{0, 30}, {30, 90}, {90, 100}});
  CHECK(HostBlock::pieces(100, {0, 60}, 25) == P{{0, 60}, {60, 100}});
  CHECK(HostBlock::pieces(100, {0}, 25) == P{{0, 100}});
  CHECK(HostBlock::pieces(100, {0, 10, 20}, 1000) == P{{0, 100}});
  CHECK(HostBlock::pieces(8192, {0, 4096}, HostBlock::kRegisterPieceBytes) == P{{0, 8192}});
}

// reserve() lays the buffers out in one block made before the first save (on CUDA page-locked on a
// background thread); the first save copies into exactly those buffers and writes the synchronous bytes.
TEST_CASE("async checkpoint: buffers reserved at start-up take the first save, bytes as a synchronous save",
          "[monitor]") {
  HostBuffers buffers;
  const CheckpointContents like = sample_contents(0);
  safetensors::NamedTensors keyed;
  for (const auto& [name, t] : like.model) keyed.emplace_back("model/" + name, t);
  for (const auto& [name, t] : like.optimizer) keyed.emplace_back("optimizer/" + name, t);
  // Shapes only are needed: a meta tensor stands for a shard that a save would cut later.
  keyed.emplace_back("shard/exp_avg", torch::empty({5000}, torch::TensorOptions().device(torch::kMeta)));
  buffers.reserve(keyed, /*cuda_device=*/-1);
  CHECK(buffers.wait_reserved() >= 0);
  const int64_t reserved = buffers.bytes();
  CHECK(reserved == (64 * 33 * 4) * 2 + 7 * 8 + 8 + 5000 * 4);
  CheckpointContents src = sample_contents(1);
  const CheckpointContents host = copy_to_host(src, &buffers);
  CHECK(buffers.bytes() == reserved);  // no new buffer
  // One block, page-aligned pieces in the order given.
  const auto at = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); };
  CHECK(at(host.model[0].second) % 4096 == 0);
  CHECK(at(host.model[1].second) == at(host.model[0].second) + 4096 * 3);  // 8448 bytes -> 3 pages
  CHECK(at(host.optimizer[0].second) == at(host.model[1].second) + 4096);
  CHECK(torch::equal(host.model[0].second, src.model[0].second));
  CHECK(torch::equal(host.optimizer[1].second, src.optimizer[1].second));
  // A key it did not foresee gets its own buffer.
  src.model.emplace_back("extra", torch::ones({3}));
  const CheckpointContents more = copy_to_host(src, &buffers);
  CHECK(buffers.bytes() == reserved + 3 * 4);
  CHECK(torch::equal(more.model[2].second, torch::ones({3})));

  test::TempDir dir("async_ckpt");
  Checkpointer sync_ck({dir / "sync", 2});
  Checkpointer async_ck({dir / "async", 2});
  sync_ck.save(5, sample_contents(1));
  AsyncCheckpointer ac(async_ck);
  ac.reserve(sample_contents(0), -1);
  // A caller may fill a model buffer itself (ZeRO-3's gather): save() keeps what it holds.
  CheckpointContents c = sample_contents(1);
  torch::Tensor w = ac.model_buffer("w", c.model[0].second);
  w.copy_(c.model[0].second);
  c.model[0].second = w;
  ac.save(5, std::move(c));
  REQUIRE(ac.wait().ok());
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json", "config.ini", "manifest.json"}) {
    INFO(f);
    CHECK(test::read_all(dir / "async/step_5/" + f) == test::read_all(dir / "sync/step_5/" + f));
  }
}

TEST_CASE("async checkpoint: control returns before the write, later in-place updates are not written",
          "[monitor]") {
  test::TempDir dir("async_ckpt");
  Checkpointer ck({dir / "c", 2});
  AsyncCheckpointer ac(ck);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> writer_started{false};
  ac.set_before_write([&](int64_t) {
    writer_started = true;
    gate.wait();
  });
  torch::Tensor w = torch::zeros({1000});
  CheckpointContents c;
  c.model = {{"w", w}};
  c.optimizer = {{"step", torch::full({}, 1.0, torch::kFloat64)}};
  c.state_json = "{}\n";
  c.config_ini = "";
  ac.save(8, std::move(c));
  // save() returned while the writer is held back: nothing is on disk yet.
  CHECK(ac.busy());
  CHECK_FALSE(sys::exists(dir / "c/step_8"));
  w.add_(1);  // the optimizer's next in-place update
  release.set_value();
  const AsyncSaveResult r = ac.wait();
  CHECK(writer_started);
  REQUIRE(r.ok());
  CHECK_FALSE(ac.busy());
  safetensors::Reader rd(dir / "c/step_8/model.safetensors");
  CHECK(torch::equal(rd.get("w"), torch::zeros({1000})));
}

TEST_CASE("async checkpoint: a failed write is reported and keeps the previous latest", "[monitor]") {
  test::TempDir dir("async_ckpt");
  Checkpointer ck({dir / "c", 2});
  // The hook runs on the writer thread before wait() returns: no lock needed to read it after wait().
  std::vector<std::pair<int64_t, std::string>> failures;
  AsyncCheckpointer ac(ck, [&failures](int64_t step, const std::string& error) { failures.emplace_back(step, error); });
  ac.save(1, sample_contents(0));
  REQUIRE(ac.wait().ok());

  // The writer fails half-way: model.safetensors is written, then the optimizer holds a dtype the
  // format cannot store.
  CheckpointContents bad = sample_contents(1);
  bad.optimizer.emplace_back("complex", torch::zeros({2}, torch::kComplexFloat));
  ac.save(2, std::move(bad));
  const AsyncSaveResult r = ac.wait();
  CHECK_FALSE(r.ok());
  CHECK(r.step == 2);
  CHECK(r.error.find("unsupported tensor dtype") != std::string::npos);
  CHECK(test::read_all(dir / "c/latest") == "step_1\n");
  CHECK_FALSE(sys::exists(dir / "c/step_2"));
  CHECK_FALSE(sys::exists(dir / "c/step_2.tmp"));
  CHECK(ck.find_latest_valid() == dir / "c/step_1");
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].first == 2);
  CHECK(failures[0].second == r.error);

  if (::geteuid() != 0) {  // root writes anywhere: only an unprivileged run can test permissions
    REQUIRE(::chmod((dir / "c").c_str(), 0555) == 0);
    ac.save(3, sample_contents(2));
    const AsyncSaveResult r3 = ac.wait();
    CHECK_FALSE(r3.ok());
    CHECK(r3.error.find("Permission denied") != std::string::npos);
    REQUIRE(::chmod((dir / "c").c_str(), 0755) == 0);
    CHECK(test::read_all(dir / "c/latest") == "step_1\n");
  }

  // The next save succeeds again.
  ac.save(4, sample_contents(3));
  REQUIRE(ac.wait().ok());
  CHECK(test::read_all(dir / "c/latest") == "step_4\n");
}

// ---- health check ----

TEST_CASE("health check statistics on fixed inputs", "[monitor]") {
  RankTimeStats s = rank_time_stats({0.10, 0.12, 0.30, 0.11}, 1.5);
  CHECK(s.min == 0.10);
  CHECK(s.max == 0.30);
  CHECK(s.median == Approx(0.115).epsilon(1e-15));
  CHECK(s.slowest_rank == 2);
  CHECK(s.outliers == std::vector<int>{2});
  CHECK(describe(s, "step time", 1.5) ==
        "step time min 0.1 / median 0.115 / max 0.3 s over 4 ranks, slowest rank 2; outliers (> 1.5x median): "
        "rank 2 (0.3 s)");

  s = rank_time_stats({1, 3, 2}, 1.4);  // odd count: the middle value
  CHECK(s.median == 2);
  CHECK(s.slowest_rank == 1);
  CHECK(s.outliers == std::vector<int>{1});  // 3 > 2.8

  s = rank_time_stats({5, 5, 5}, 1.5);  // ties: the lowest rank, no outliers
  CHECK(s.slowest_rank == 0);
  CHECK(s.outliers.empty());
  CHECK_THROWS(rank_time_stats({}, 1.5));

  // One process: the report is this rank's time; the probe runs on the CPU.
  s = step_time_report(nullptr, 0.25, 1.5);
  CHECK(s.per_rank == std::vector<double>{0.25});
  CHECK(describe(s, "step time", 1.5) == "step time 0.25 s");  // no "over 1 rank(s), slowest rank 0"
  const ProbeResult p = startup_probe(nullptr, torch::kCPU, {64, 1024, 3, 1.5});
  CHECK(p.matmul.per_rank.size() == 1);
  CHECK(p.matmul.per_rank[0] > 0);
  CHECK(p.matmul_tflops > 0);
  CHECK(p.allreduce.per_rank.empty());
}
