// loom-dedup's result does not depend on how it runs: the same bytes for any --threads, for one
// process or the stages as separate tasks, for a rerun that skips finished stages, after a damaged
// work file, and after a kill -9 in the middle of a run.
#include <catch2/catch.hpp>

#include <cstdio>

#include "fixtures.h"
#include "loom/sys.h"

using namespace loom;
using namespace loom::test;

namespace {
// Three inputs with planted copies across them.
struct Corpus {
  TempDir dir{"dedup_staged"};
  Corpus() {
    const Docs& d = botchan_docs();
    Docs a(d.begin(), d.begin() + 80), b(d.begin() + 80, d.begin() + 160), c(d.begin() + 160, d.begin() + 240);
    b.push_back(d[3]);
    b.push_back(perturb(d[7], 45));
    c.push_back(d[100]);
    c.push_back(perturb(d[90], 50));
    c.push_back(d[3]);
    write_shard(dir / "in/a.bin", a);
    write_shard(dir / "in/b.bin", b);
    write_shard(dir / "in/c.bin", c);
  }
  std::string inputs() const { return quote(dir / "in/a.bin") + " " + quote(dir / "in/b.bin") + " " + quote(dir / "in/c.bin"); }
  std::string args(const std::string& run) const {
    return "--work-dir " + quote(dir / (run + "/work")) + " --output-dir " + quote(dir / (run + "/out")) + " " + inputs();
  }
  // Every output and the report and summary, concatenated (paths name the run, so compare per file).
  std::vector<std::string> results(const std::string& run) const {
    std::vector<std::string> out;
    for (const char* f : {"out/a.bin", "out/a.bin.meta", "out/b.bin", "out/b.bin.meta", "out/c.bin", "out/c.bin.meta",
                          "work/report.jsonl", "work/summary.json", "work/removals.bin"})
      out.push_back(read_all(dir / (run + "/" + f)));
    return out;
  }
};

void require_ok(const RunResult& r) {
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}
}  // namespace

TEST_CASE("the same bytes for --threads 1 and 2 and for the stages as separate tasks", "[dedup][e2e]") {
  Corpus c;
  require_ok(loom_dedup(c.args("one") + " --threads 1"));
  require_ok(loom_dedup(c.args("two") + " --threads 2"));
  CHECK(c.results("one") == c.results("two"));
  CHECK(lines_of(c.dir / "one/work/report.jsonl").size() == 5);
  for (int t = 1; t >= 0; --t) require_ok(loom_dedup(c.args("staged") + " --stage signatures --tasks 2 --task " + std::to_string(t)));
  for (int t = 0; t < 4; ++t) require_ok(loom_dedup(c.args("staged") + " --stage buckets --tasks 4 --task " + std::to_string(t)));
  require_ok(loom_dedup(c.args("staged") + " --stage clusters"));
  for (int t = 0; t < 3; ++t) require_ok(loom_dedup(c.args("staged") + " --stage apply --tasks 3 --task " + std::to_string(t)));
  CHECK(c.results("one") == c.results("staged"));
}

TEST_CASE("a rerun skips finished stages and redoes a damaged work file", "[dedup][e2e]") {
  Corpus c;
  require_ok(loom_dedup(c.args("r")));
  const auto first = c.results("r");
  RunResult again = loom_dedup(c.args("r"));
  require_ok(again);
  CHECK(again.output.find("signatures of " + c.dir.path() + "/in/c.bin: done already, kept") != std::string::npos);
  CHECK(again.output.find("buckets of band 13: done already, kept") != std::string::npos);
  CHECK(again.output.find("clusters: done already, kept") != std::string::npos);
  CHECK(again.output.find("out/b.bin done already, kept") != std::string::npos);
  CHECK(c.results("r") == first);
  // A flipped byte in a band file's records: the source's signatures are computed again.
  const std::string band = c.dir / "r/work/sources/00001.band-3";
  std::string bytes = read_all(band);
  bytes[100] ^= 1;
  write_all(band, bytes);
  again = loom_dedup(c.args("r"));
  require_ok(again);
  CHECK(again.output.find("records checksum") != std::string::npos);
  CHECK(again.output.find("signatures of " + c.dir.path() + "/in/b.bin: done already") == std::string::npos);
  CHECK(c.results("r") == first);
}

TEST_CASE("kill -9 during a run, then a rerun: the same bytes", "[dedup][e2e]") {
  Corpus c;
  require_ok(loom_dedup(c.args("clean")));
  // Killed as soon as the second source's signatures exist (no sleep: a busy wait on the file).
  const std::string sig = c.dir / "killed/work/sources/00001.sig";
  const RunResult k = run("(" + std::string(LOOM_DEDUP_BIN) + " " + c.args("killed") + " >/dev/null 2>&1 & pid=$!; " +
                          "while [ ! -e " + quote(sig) + " ] && kill -0 $pid 2>/dev/null; do :; done; kill -9 $pid " +
                          "2>/dev/null; wait $pid; echo rc=$?)");
  INFO(k.output);
  require_ok(loom_dedup(c.args("killed")));
  CHECK(c.results("clean") == c.results("killed"));
}

TEST_CASE("scripts/launch/dedup_slurm.sh: the stages as job arrays give the one-process bytes", "[dedup][e2e]") {
  Corpus c;
  require_ok(loom_dedup(c.args("one")));
  // A stand-in for sbatch: runs each task of the array in turn, as Slurm's sh would, and fails
  // like afterok would stop the next stage.
  sys::make_dirs(c.dir / "bin");
  write_all(c.dir / "bin/sbatch",
            "#!/bin/sh\n"
            "for a; do case $a in --array=*) r=${a#--array=};; --wrap=*) w=${a#--wrap=};; esac; done\n"
            "i=0; n=${r#0-}\n"
            "while [ $i -le $n ]; do SLURM_ARRAY_TASK_ID=$i sh -c \"$w\" >>\"$WORK/fake.log\" 2>&1 || exit 1; i=$((i+1)); done\n"
            "echo job-$n\n");
  REQUIRE(run("chmod +x " + quote(c.dir / "bin/sbatch")).exit_code == 0);
  const RunResult r = run("PATH=" + quote(c.dir / "bin") + ":\"$PATH\" WORK=" + quote(c.dir / "slurm/work") + " OUT=" +
                          quote(c.dir / "slurm/out") + " LOOM_DEDUP=" + quote(LOOM_DEDUP_BIN) +
                          " SIG_TASKS=2 BUCKET_TASKS=4 APPLY_TASKS=2 THREADS=2 bash " +
                          quote(source_dir() + "/scripts/launch/dedup_slurm.sh") + " -- " + c.inputs());
  INFO(r.output + read_all(c.dir / "slurm/work/fake.log"));
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("submitted: signatures job-1, buckets job-3, clusters job-0, apply job-1") != std::string::npos);
  CHECK(c.results("one") == c.results("slurm"));
}
