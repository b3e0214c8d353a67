// loom-dedup end to end on botchan.txt tokenized with internlm_v7.model: planted exact copies and
// near copies (exact 5-gram Jaccard computed here) found and reported, a 30% copy left alone,
// --keep none, reference sets, decontamination, the three input formats, usage errors; the same
// bytes whatever the sorts' memory.
#include <catch2/catch.hpp>

#include <algorithm>

#include "fixtures.h"
#include "loom/dedup/dedup.h"
#include "loom/dedup/work_file.h"
#include "loom/internlm_format.h"
#include "loom/json_text.h"
#include "loom/megatron_format.h"
#include "loom/sys.h"

using namespace loom;
using namespace loom::test;

namespace {
Docs slice(size_t begin, size_t end) { return Docs(botchan_docs().begin() + begin, botchan_docs().begin() + end); }

// a.bin: botchan 0..59, then a copy of 5, a ~80% copy of 7, a ~30% copy of 8;
// b.bin: botchan 60..99, then a copy of 10 and a copy of 5.
struct Corpus {
  TempDir dir{"dedup_e2e"};
  Docs a, b;
  Corpus() {
    const Docs& d = botchan_docs();
    a = slice(0, 60);
    a.push_back(d[5]);
    a.push_back(perturb(d[7], 45));
    a.push_back(perturb(d[8], 9));
    b = slice(60, 100);
    b.push_back(d[10]);
    b.push_back(d[5]);
    write_shard(dir / "in/a.bin", a);
    write_shard(dir / "in/b.bin", b);
  }
  std::string args(const std::string& work = "work", const std::string& out = "out") const {
    return "--work-dir " + quote(dir / work) + " --output-dir " + quote(dir / out) + " " + quote(dir / "in/a.bin") +
           " " + quote(dir / "in/b.bin");
  }
};

Docs without(const Docs& docs, std::vector<size_t> drop) {
  Docs out;
  for (size_t i = 0; i < docs.size(); ++i)
    if (std::find(drop.begin(), drop.end(), i) == drop.end()) out.push_back(docs[i]);
  return out;
}
}  // namespace

TEST_CASE("exact and near duplicates are removed, the first kept, a 30% copy is not", "[dedup][e2e]") {
  Corpus c;
  const Docs& d = botchan_docs();
  REQUIRE(jaccard5(d[7], c.a[61]) > 0.75);
  REQUIRE(jaccard5(d[7], c.a[61]) < 0.85);
  REQUIRE(jaccard5(d[8], c.a[62]) < 0.35);
  const RunResult r = loom_dedup(c.args());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(c.dir / "out/a.bin") == without(c.a, {60, 61}));
  CHECK(read_shard(c.dir / "out/b.bin") == without(c.b, {40, 41}));
  const auto report = lines_of(c.dir / "work/report.jsonl");
  REQUIRE(report.size() == 4);
  const std::string a = json_quote(c.dir / "in/a.bin"), b = json_quote(c.dir / "in/b.bin");
  CHECK(report[0].rfind("{\"input\":" + a + ",\"index\":60,\"tokens\":" + std::to_string(d[5].size()) +
                            ",\"reason\":\"exact\",\"removed\":true,\"matched_input\":" + a +
                            ",\"matched_index\":5,\"matched_is_reference\":false,\"jaccard_estimate\":1,\"jaccard\":1}",
                        0) == 0);
  CHECK(report[1].find("\"index\":61,") != std::string::npos);
  CHECK(report[1].find("\"reason\":\"near\"") != std::string::npos);
  CHECK(report[1].find("\"matched_index\":7,") != std::string::npos);
  CHECK(report[1].find("\"jaccard\":") == std::string::npos);  // not verified
  CHECK(report[2].find("\"input\":" + b + ",\"index\":40,") != std::string::npos);
  CHECK(report[2].find("\"matched_index\":10,") != std::string::npos);
  CHECK(report[3].find("\"input\":" + b + ",\"index\":41,") != std::string::npos);
  CHECK(report[3].find("\"matched_input\":" + a + ",\"matched_index\":5,") != std::string::npos);
  const std::string summary = read_all(c.dir / "work/summary.json");
  const uint64_t near_tokens = c.a[61].size();
  CHECK(summary.find("\"near\":{\"documents\":1,\"tokens\":" + std::to_string(near_tokens) + "}") != std::string::npos);
  CHECK(summary.find("\"total\":{\"documents_in\":105,") != std::string::npos);
  CHECK(summary.find("\"documents_out\":101,") != std::string::npos);
}

TEST_CASE("with --verify the report gives the exact Jaccard and pairs below the threshold stay", "[dedup][e2e]") {
  Corpus c;
  const double j = jaccard5(botchan_docs()[7], c.a[61]);
  RunResult r = loom_dedup(c.args() + " --verify --threshold 0.7");  // a bare flag is true
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto report = lines_of(c.dir / "work/report.jsonl");
  REQUIRE(report.size() == 4);
  CHECK(report[1].find(",\"jaccard\":" + json_number(j) + "}") != std::string::npos);
  r = loom_dedup(c.args("work2", "out2") + " --verify=true --threshold 0.9");
  REQUIRE(r.exit_code == 0);
  CHECK(lines_of(c.dir / "work2/report.jsonl").size() == 3);  // the 80% copy stays
}

TEST_CASE("with --near=false only exact duplicates are removed", "[dedup][e2e]") {
  Corpus c;
  const RunResult r = loom_dedup(c.args() + " --near=false");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(c.dir / "out/a.bin") == without(c.a, {60}));
  CHECK(read_shard(c.dir / "out/b.bin") == without(c.b, {40, 41}));
  CHECK(lines_of(c.dir / "work/report.jsonl").size() == 3);
  CHECK(sys::list_dir(c.dir / "work/edges") == std::vector<std::string>{"band-exact.edges"});
}

TEST_CASE("with --keep none every member of a cluster is removed", "[dedup][e2e]") {
  Corpus c;
  const RunResult r = loom_dedup(c.args() + " --keep none");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(c.dir / "out/a.bin") == without(c.a, {5, 7, 10, 60, 61}));
  CHECK(read_shard(c.dir / "out/b.bin") == without(c.b, {40, 41}));
  const auto report = lines_of(c.dir / "work/report.jsonl");
  REQUIRE(report.size() == 7);
  CHECK(report[0].find("\"index\":5,") != std::string::npos);
  CHECK(report[0].find("\"matched_index\":60,") != std::string::npos);  // the next member
}

TEST_CASE("a reference set removes its duplicates and is never written", "[dedup][e2e]") {
  TempDir dir("dedup_ref");
  const Docs& d = botchan_docs();
  write_shard(dir / "ref/old.bin", {d[20], perturb(d[21], 45), d[200]});
  write_shard(dir / "in/new.bin", slice(0, 60));
  const RunResult r = loom_dedup("--reference " + quote(dir / "ref") + " --work-dir " + quote(dir / "w") +
                                 " --output-dir " + quote(dir / "out") + " " + quote(dir / "in/new.bin"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(dir / "out/new.bin") == without(slice(0, 60), {20, 21}));
  CHECK(!sys::exists(dir / "out/old.bin"));
  const auto report = lines_of(dir / "w/report.jsonl");
  REQUIRE(report.size() == 2);
  CHECK(report[0].find("\"reason\":\"exact\"") != std::string::npos);
  CHECK(report[0].find("\"matched_index\":0,\"matched_is_reference\":true") != std::string::npos);
  CHECK(report[1].find("\"reason\":\"near\"") != std::string::npos);
  CHECK(report[1].find("\"matched_index\":1,\"matched_is_reference\":true") != std::string::npos);
}

TEST_CASE("documents sharing a 13-gram with an evaluation item are removed or reported", "[dedup][e2e]") {
  TempDir dir("dedup_decontam");
  write_shard(dir / "in/a.bin", slice(0, 40));
  // The longest line of document 12, alone: its 13-grams appear inside document 12.
  std::string line, text = botchan_texts()[12];
  for (size_t s = 0, e; s <= text.size(); s = e + 1) {
    e = std::min(text.find('\n', s), text.size());
    if (e - s > line.size()) line = text.substr(s, e - s);
  }
  REQUIRE(encode(line).size() >= 15);
  write_all(dir / "eval.jsonl", "{\"text\": \"An unrelated question about the boiling point of water at sea level?\"}\n" +
                                    std::string("{\"text\": ") + json_quote(line) + "}\n");
  const std::string args = "--eval " + quote(dir / "eval.jsonl") + " --model " + quote(internlm_model()) +
                           " --output-dir " + quote(dir / "out") + " " + quote(dir / "in/a.bin");
  RunResult r = loom_dedup(args + " --work-dir " + quote(dir / "w"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(dir / "out/a.bin") == without(slice(0, 40), {12}));
  auto report = lines_of(dir / "w/report.jsonl");
  REQUIRE(report.size() == 1);
  CHECK(report[0].find("\"index\":12,") != std::string::npos);
  CHECK(report[0].find("\"reason\":\"contaminated\",\"removed\":true") != std::string::npos);
  CHECK(report[0].find("\"eval_item\":" + json_quote(dir / "eval.jsonl:2")) != std::string::npos);
  r = loom_dedup(args + " --work-dir " + quote(dir / "w2") + " --decontaminate report");
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(dir / "out/a.bin") == slice(0, 40));
  report = lines_of(dir / "w2/report.jsonl");
  REQUIRE(report.size() == 1);
  CHECK(report[0].find("\"reason\":\"contaminated\",\"removed\":false") != std::string::npos);
}

TEST_CASE("a contaminated document is not kept for its cluster: the next member is", "[dedup][e2e]") {
  TempDir dir("dedup_contam_cluster");
  // Document 7's lines; the eval item is one of them, and b.bin holds document 7 with that line
  // replaced by another: a near copy without the contaminated n-grams.
  std::vector<std::string> lines;
  const std::string& text = botchan_texts()[7];
  for (size_t s = 0, e; s <= text.size(); s = e + 1) {
    e = std::min(text.find('\n', s), text.size());
    lines.push_back(text.substr(s, e - s));
  }
  REQUIRE(lines.size() == 12);
  const std::string eval_line = lines[5];
  REQUIRE(encode(eval_line).size() >= 13);
  lines[5] = "Nothing happened.";
  std::string copy_text;
  for (const auto& l : lines) copy_text += (copy_text.empty() ? "" : "\n") + l;
  std::vector<uint32_t> copy{1};
  for (uint32_t id : encode(copy_text)) copy.push_back(id);
  copy.push_back(2);
  REQUIRE(jaccard5(botchan_docs()[7], copy) > 0.8);
  write_shard(dir / "in/a.bin", slice(0, 20));
  write_shard(dir / "in/b.bin", {botchan_docs()[30], copy});
  write_all(dir / "eval.txt", eval_line + "\n");
  const std::string args = "--eval " + quote(dir / "eval.txt") + " --model " + quote(internlm_model()) + " " +
                           quote(dir / "in/a.bin") + " " + quote(dir / "in/b.bin");
  RunResult r = loom_dedup("--work-dir " + quote(dir / "w") + " --output-dir " + quote(dir / "out") + " " + args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(dir / "out/a.bin") == without(slice(0, 20), {7}));
  CHECK(read_shard(dir / "out/b.bin") == Docs{botchan_docs()[30], copy});
  REQUIRE(lines_of(dir / "w/report.jsonl").size() == 1);
  // Only reported: document 7 stays, so its near copy goes as usual.
  r = loom_dedup("--work-dir " + quote(dir / "w2") + " --output-dir " + quote(dir / "out2") +
                 " --decontaminate report " + args);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(dir / "out2/a.bin") == slice(0, 20));
  CHECK(read_shard(dir / "out2/b.bin") == Docs{botchan_docs()[30]});
  const auto report = lines_of(dir / "w2/report.jsonl");
  REQUIRE(report.size() == 2);
  CHECK(report[0].find("\"reason\":\"contaminated\",\"removed\":false") != std::string::npos);
  CHECK(report[1].find("\"reason\":\"near\",\"removed\":true,\"matched_input\":" + json_quote(dir / "in/a.bin") +
                       ",\"matched_index\":7,") != std::string::npos);
}

TEST_CASE("InternLM and Megatron inputs come out in their own format", "[dedup][e2e]") {
  TempDir dir("dedup_formats");
  const Docs& d = botchan_docs();
  Docs di = slice(0, 30), dm = slice(30, 50), all_copies{d[1], d[2]};
  di.push_back(d[4]);
  dm.push_back(d[35]);
  dm.push_back(d[2]);
  sys::make_dirs(dir / "in");
  {
    InternlmWriter w(dir / "in/i.bin");
    for (const auto& doc : di) w.add_doc(doc);
    w.commit();
    MegatronWriter m(dir / "in/m.bin", kMegatronInt32, 103168);
    for (const auto& doc : dm) m.add_doc(doc);
    m.commit();
    InternlmWriter c(dir / "in/copies.bin");
    for (const auto& doc : all_copies) c.add_doc(doc);
    c.commit();
  }
  const RunResult r = loom_dedup("--work-dir " + quote(dir / "w") + " --output-dir " + quote(dir / "out") + " " +
                                 quote(dir / "in/i.bin") + " " + quote(dir / "in/m") + " " + quote(dir / "in/copies.bin"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  Docs got_i, got_m;
  InternlmReader ri(dir / "out/i.bin");
  MegatronReader rm(dir / "out/m.bin");
  CHECK(rm.dtype_code() == kMegatronInt32);
  std::vector<uint32_t> ids;
  for (uint64_t i = 0; i < ri.num_docs(); ++i) ids.clear(), ri.read_doc(i, ids), got_i.push_back(ids);
  for (uint64_t i = 0; i < rm.num_docs(); ++i) ids.clear(), rm.read_doc(i, ids), got_m.push_back(ids);
  CHECK(got_i == slice(0, 30));
  CHECK(got_m == slice(30, 50));
  CHECK(!sys::exists(dir / "out/copies.bin"));  // every document a copy of an earlier input's
  CHECK(r.output.find("copies.bin: every document removed, no output") != std::string::npos);
}

TEST_CASE("loom-dedup --version names the tool, the commit and the build type", "[dedup][e2e]") {
  const RunResult r = loom_dedup("--version");
  CHECK(r.exit_code == 0);
  CHECK(r.output.rfind("loom-dedup ", 0) == 0);
  CHECK(r.output.find("\ncommit: ") != std::string::npos);
  CHECK(r.output.find("\nbuild type: ") != std::string::npos);
}

TEST_CASE("bad usage and inputs are refused with what was expected", "[dedup][e2e]") {
  Corpus c;
  RunResult r = loom_dedup(c.args() + " --tasks 2");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--tasks > 1 needs --stage") != std::string::npos);
  r = loom_dedup(c.args() + " --stage buckets");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("run the signatures stage first") != std::string::npos);
  TokenizerInfo other = internlm_info();
  other.vocab_size = 200000;
  {
    ShardWriter w(c.dir / "in/x.bin", other);
    w.add_doc(std::vector<uint32_t>{1, 2, 3});
    w.commit();
  }
  r = loom_dedup("--work-dir " + quote(c.dir / "w") + " --output-dir " + quote(c.dir / "o") + " " +
                 quote(c.dir / "in/a.bin") + " " + quote(c.dir / "in/x.bin"));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("tokenizer differs") != std::string::npos);
  r = loom_dedup(c.args() + " --keep some");
  CHECK(r.exit_code == 2);
  // A stage given other settings than the stage before it ran with: refused, naming what to rerun.
  REQUIRE(loom_dedup(c.args() + " --stage signatures").exit_code == 0);
  r = loom_dedup(c.args() + " --stage buckets --ngram 3");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("00000.sig: made from other inputs or settings than this run's; run the signatures stage again") !=
        std::string::npos);
}

namespace {
std::vector<std::string> dedup_results(const std::string& work, const std::string& out) {
  std::vector<std::string> bytes;
  for (const char* f : {"removals.bin", "report.jsonl", "summary.json"}) bytes.push_back(read_all(work + "/" + f));
  for (const std::string& f : sys::list_dir(out)) bytes.push_back(f + ": " + read_all(out + "/" + f));
  return bytes;
}
}  // namespace

TEST_CASE("the smallest sort buffers (spilled runs in every sort) give the default's bytes", "[dedup][e2e]") {
  TempDir dir("dedup_memory");
  const Docs& d = botchan_docs();
  // b: every document of a again, near copies of the odd ones; c: b backwards, so that a, a near copy
  // and its copy are a triangle, not a star (more than one round of connected components).
  Docs b, c;
  for (size_t i = 0; i < d.size(); ++i) b.push_back(i % 2 ? perturb(d[i], 45) : d[i]);
  c.assign(b.rbegin(), b.rend());
  write_shard(dir / "in/a.bin", d);
  write_shard(dir / "in/b.bin", b);
  write_shard(dir / "in/c.bin", c);
  std::string eval;
  for (size_t doc : {3, 17, 40, 41, 99, 200, 333}) eval += "{\"text\": " + json_quote(longest_line(doc)) + "}\n";
  write_all(dir / "eval.jsonl", eval);
  for (const bool keep_first : {true, false}) {
    dedup::DedupOptions o;
    o.inputs = {dir / "in/a.bin", dir / "in/b.bin", dir / "in/c.bin"};
    o.eval.files = {dir / "eval.jsonl"};
    o.eval.model = internlm_model();
    o.keep = keep_first ? dedup::Keep::kFirst : dedup::Keep::kNone;
    o.remove_contaminated = keep_first;
    const std::string args = std::string(keep_first ? "" : "--keep none --decontaminate report ") + "--eval " +
                             quote(o.eval.files[0]) + " --model " + quote(o.eval.model) + " " + quote(o.inputs[0]) +
                             " " + quote(o.inputs[1]) + " " + quote(o.inputs[2]);
    const std::string tag = keep_first ? "first" : "none";
    RunResult r = loom_dedup("--work-dir " + quote(dir / ("w-" + tag)) + " --output-dir " + quote(dir / ("o-" + tag)) + " " + args);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::vector<std::string> want = dedup_results(dir / ("w-" + tag), dir / ("o-" + tag));
    r = loom_dedup("--memory-mb 1 --work-dir " + quote(dir / ("w1-" + tag)) + " --output-dir " + quote(dir / ("o1-" + tag)) + " " + args);
    REQUIRE(r.exit_code == 0);
    CHECK(dedup_results(dir / ("w1-" + tag), dir / ("o1-" + tag)) == want);
    // Below what --memory-mb takes: every sort buffer at its floor of 1,024 pairs, so each of the
    // clusters stage's sorts spills runs (more than 1,024 documents in pairs and removed).
    o.work_dir = dir / ("w0-" + tag);
    o.output_dir = dir / ("o0-" + tag);
    o.memory_bytes = 1;
    dedup::run_stage(o, dedup::Stage::kAll, dedup::StageTask{});
    const dedup::WorkReader removals(o.work_dir + "/removals.bin", dedup::WorkKind::kRemovals, 64);
    CHECK(removals.num_records() > 1024);
    CHECK(dedup_results(o.work_dir, o.output_dir) == want);
    CHECK(sys::list_dir(o.work_dir) == std::vector<std::string>{"edges", "removals.bin", "report.jsonl", "sources", "summary.json"});
    CHECK(want[1].find("\"reason\":\"contaminated\"") != std::string::npos);
  }
}

TEST_CASE("scratch files a killed clusters stage left are replaced by the rerun, then removed", "[dedup][e2e]") {
  Corpus c;
  RunResult r = loom_dedup(c.args());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::vector<std::string> want = dedup_results(c.dir / "work", c.dir / "out");
  sys::remove_file(c.dir / "work/removals.bin");
  for (const char* f : {".cc-sym", ".cc-large", ".clusters", ".duplicates"})  // as a kill -9 leaves them
    write_all(c.dir / (std::string("work/removals.bin") + f), "the half-written scratch of a killed run");
  r = loom_dedup(c.args() + " --stage clusters");
  REQUIRE(r.exit_code == 0);
  CHECK(read_all(c.dir / "work/removals.bin") == want[0]);
  CHECK(sys::list_dir(c.dir / "work") ==
        std::vector<std::string>{"edges", "removals.bin", "report.jsonl", "sources", "summary.json"});
}
