// The INI side of loom's one options scheme (loom/options.h, Boost.Program_options' config file
// parser behind --config, as every tool and loom-train's [section] keys use it) on arbitrary bytes,
// with a key of each kind loom registers: text, integers and doubles read as text and range-checked
// (get_int, get_uint, get_double), typed int64/double/bool, and a repeated key. What parses must
// print (resolved_ini) as an INI file that parses back to the same text, as the config.ini saved
// beside a run's outputs is meant to repeat the run.
#include <vector>

#include "fuzz_util.h"
#include "loom/options.h"

namespace {


loom::OptionParser make_parser(std::string& name, int64_t& steps, double& lr, bool& flag) {
  loom::OptionParser p("loom-fuzz", "loom-fuzz --config FILE");
  p.options().add_options()
      ("job.name", loom::po::value(&name)->default_value("run"), "text")
      ("job.threads", loom::po::value<std::string>()->default_value("1"), "integer as text")
      ("job.seed", loom::po::value<std::string>()->default_value("7"), "unsigned integer as text")
      ("adam.beta", loom::po::value<std::string>()->default_value("0.9"), "double as text")
      ("data.total_steps", loom::po::value(&steps)->default_value(100), "typed int64")
      ("adam.lr", loom::po::value(&lr)->default_value(0.001), "typed double")
      ("data.verify_checksums", loom::po::value(&flag)->default_value(true), "typed bool")
      ("data.folders", loom::po::value<std::vector<std::string>>()->composing(), "repeatable");
  return p;
}

std::string parse_file(const std::string& path) {
  std::string name;
  int64_t steps = 0;
  double lr = 0;
  bool flag = false;
  loom::OptionParser p = make_parser(name, steps, lr, flag);
  LOOM_ASSERT(p.parse({"--config=" + path}), "no --help was given");
  (void)p.get_int("job.threads", 1, 1024);
  (void)p.get_uint("job.seed", 0, UINT64_MAX);
  (void)p.get_double("adam.beta", 0, 1);
  return p.resolved_ini();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::scratch() / "c.ini";
  loom::fuzz::put_file(path, {reinterpret_cast<const char*>(data), size});
  std::string once;
  loom::fuzz::expect_only_loom_errors([&] { once = parse_file(path); });
  if (once.empty()) return 0;
  const std::string again_path = loom::fuzz::scratch() / "resolved.ini";
  loom::fuzz::put_file(again_path, once);
  std::string twice;
  try {
    twice = parse_file(again_path);
  } catch (const loom::Error& e) {
    LOOM_ASSERT(false, "resolved_ini does not parse back: ", e.what(), "\n--- input\n",
                std::string(reinterpret_cast<const char*>(data), size), "\n--- resolved\n", once);
  }
  LOOM_ASSERT(twice == once, "resolved_ini is not a fixed point:\n", once, "---\n", twice);
  return 0;
}
