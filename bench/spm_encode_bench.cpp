// loom's SentencePiece encoder (loom/spm_encoder.h) against libsentencepiece on one core, side by
// side in one process: each round encodes every document with both, in alternating order, and the
// figure of each is the median over rounds of its thread CPU time (so other load on the machine
// costs both sides alike). loom's encoder is built afresh for every round (outside the timing), so
// its per-thread chunk cache starts empty each time: one pass over the corpus, as loom-tokenize
// makes. Documents are the non-empty lines of a text file, stripped of "\r" and
// surrounding ASCII spaces, as loom-tokenize's default --txt-doc line gives for plain text. The ids
// of both encoders are compared before timing; a difference is an error (exit 1).
//   usage: spm_encode_bench MODEL TEXT [ROUNDS]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "loom/spm/sentencepiece_model.h"
#include "loom/spm_encoder.h"
#include "loom/sys.h"

namespace {

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<std::string> documents(const std::string& data) {
  std::vector<std::string> docs;
  size_t at = 0;
  while (at < data.size()) {
    size_t nl = data.find('\n', at);
    if (nl == std::string::npos) nl = data.size();
    std::string line = data.substr(at, nl - at);
    at = nl + 1;
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    docs.push_back(line.substr(b, line.find_last_not_of(" \t\r") + 1 - b));
  }
  return docs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: spm_encode_bench MODEL TEXT [ROUNDS]\n");
    return 2;
  }
  const std::string model = argv[1];
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  const std::vector<std::string> docs = documents(loom::sys::read_file(argv[2]));
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  const loom::SentencePieceModel sp(model);
  const loom::spm::SpmModel spm_model = loom::spm::read_spm_model(model);
  const loom::spm::SpmEncoder loom_enc(spm_model);

  size_t tokens = 0;
  std::vector<uint32_t> a, b;
  for (size_t i = 0; i < docs.size(); ++i) {
    a.clear();
    b.clear();
    sp.encode(docs[i], a);
    loom_enc.encode(docs[i], b);
    if (a != b) {
      std::fprintf(stderr, "document %zu: loom's ids differ from libsentencepiece's\n", i);
      return 1;
    }
    tokens += a.size();
  }
  std::vector<double> t_sp, t_loom;
  std::vector<uint32_t> out;
  for (int r = 0; r < rounds; ++r) {
    const loom::spm::SpmEncoder fresh(spm_model);
    for (int side = 0; side < 2; ++side) {
      const bool loom_side = (side == 0) == (r % 2 == 0);
      const double t0 = thread_cpu_s();
      for (const auto& d : docs) {
        out.clear();
        if (loom_side) fresh.encode(d, out);
        else sp.encode(d, out);
      }
      (loom_side ? t_loom : t_sp).push_back(thread_cpu_s() - t0);
    }
  }
  const double s = median(t_sp), l = median(t_loom);
  std::printf("%s on %s: %zu docs, %zu bytes, %zu tokens, %d rounds (median thread CPU s), chunk cache %s\n",
              model.c_str(), argv[2], docs.size(), bytes, tokens, rounds,
              loom_enc.chunk_cache() ? "on" : ("off: " + loom_enc.why_no_chunk_cache()).c_str());
  std::printf("libsentencepiece %.4f s  %.2f MB/s per core\n", s, bytes / s / 1e6);
  std::printf("loom             %.4f s  %.2f MB/s per core\n", l, bytes / l / 1e6);
  std::printf("ratio loom/libsentencepiece %.2fx\n", s / l);
  return 0;
}
