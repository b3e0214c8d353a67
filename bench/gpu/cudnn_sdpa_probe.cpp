// Checks and times trainer/kernels/cuda/cudnn_sdpa.{h,cpp} alone, without LibTorch: random bf16
// q, k, v and output gradient over the given documents, one forward and one backward, compared
// with attention computed document by document in float64 on the host; then the mean time of
// --iters forward and backward calls, and TFLOP/s of the causal work done (4 n^2/2 D H a
// document forward, 2.5x that backward). Built and run on the device by bench/gpu/cudnn_sdpa.sh (bench/gpu/call.sh sdpa).
// Usage: cudnn_sdpa_probe H K D LENGTHS [--batch B] [--max-seq S] [--iters N] [--packs P] [--no-check] [--dense]
//                         [--windows W] [--longest-first]
//   --windows W: consecutive documents share sequences of up to W tokens (windows), kept apart by an
//   additive bias of -inf across documents (SdpaShape::bias); longer documents run in a second graph
//   after it, as in the trainer; the check is still per document, the times are of both calls.
//   --longest-first: the graph's sequences longest first (loom::cuda::longest_first, as the trainer
//   orders them); without it, in the packs' order.
//   LENGTHS: comma-separated document lengths, or pack:T:N (N documents a pack of T tokens, random
//   lengths, repeated to fill --packs packs, default 4).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../../trainer/kernels/cuda/cudnn_sdpa.h"

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void ok(const char* err, const char* what) {
  if (err) {
    std::fprintf(stderr, "%s: %s\n", what, err);
    std::exit(1);
  }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
double from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(n) { cuda_ok(cudaMalloc(&p, std::max<size_t>(n, 16)), "cudaMalloc"); }
  ~Buf() { cudaFree(p); }
};

std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(normal(rng));
  return v;
}

template <typename T>
std::vector<T> download(const Buf& b, size_t n) {
  std::vector<T> v(n);
  cuda_ok(cudaMemcpy(v.data(), b.p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return v;
}

// max |a - b| / max |b| over a tensor.
double rel(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, std::abs(got[i] - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / den;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: %s H K D LENGTHS [--batch B] [--max-seq S] [--iters N] [--packs P] [--no-check] [--dense] "
                 "[--windows W] [--longest-first]\n",
                 argv[0]);
    return 2;
  }
  const int64_t H = std::atoll(argv[1]), K = std::atoll(argv[2]), D = std::atoll(argv[3]);
  std::string spec = argv[4];
  int64_t batch = 0, max_seq = 0, iters = 20, packs = 4, window = 0;
  bool check = true, dense = false, longest_first = false;
  for (int i = 5; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch") batch = std::atoll(argv[++i]);
    else if (a == "--max-seq") max_seq = std::atoll(argv[++i]);
    else if (a == "--iters") iters = std::atoll(argv[++i]);
    else if (a == "--packs") packs = std::atoll(argv[++i]);
    else if (a == "--no-check") check = false;
    else if (a == "--dense") dense = true;
    else if (a == "--windows") window = std::atoll(argv[++i]);
    else if (a == "--longest-first") longest_first = true;
  }
  std::mt19937_64 rng(1234);
  std::vector<int32_t> cu{0};
  if (spec.rfind("pack:", 0) == 0) {
    // pack:T:N: N documents a pack of T tokens, cut at random points.
    const int64_t T = std::atoll(spec.c_str() + 5);
    const int64_t N = std::atoll(std::strchr(spec.c_str() + 5, ':') + 1);
    for (int64_t p = 0; p < packs; ++p) {
      std::vector<int32_t> cuts{0, static_cast<int32_t>(T)};
      std::uniform_int_distribution<int32_t> at(1, static_cast<int32_t>(T) - 1);
      while (static_cast<int64_t>(cuts.size()) < N + 1) {
        const int32_t c = at(rng);
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      for (size_t i = 1; i < cuts.size(); ++i) cu.push_back(cu.back() + cuts[i] - cuts[i - 1]);
    }
  } else {
    for (size_t at = 0; at < spec.size();) {
      const size_t comma = spec.find(',', at);
      cu.push_back(cu.back() + std::atoi(spec.substr(at, comma - at).c_str()));
      at = comma == std::string::npos ? spec.size() : comma + 1;
    }
  }
  const int64_t n = static_cast<int64_t>(cu.size()) - 1, T = cu.back();
  // The graph's sequences: the documents, or with --windows the windows that hold them, the longer
  // documents then running in a second, unbiased call (as the trainer groups them:
  // loom::cuda::sdpa_windows).
  std::vector<int32_t> starts, lengths;
  loom::cuda::SdpaWindows windows;
  if (window > 0) {
    windows = loom::cuda::sdpa_windows(cu.data(), n, window);
    starts = windows.start;
    lengths = windows.length;
    max_seq = std::max(max_seq, window);
  } else {
    loom::cuda::sdpa_documents(cu.data(), n, starts, lengths);
  }
  if (longest_first && window > 0) {
    std::fprintf(stderr, "--longest-first orders documents, not windows\n");
    return 2;
  }
  if (longest_first) loom::cuda::longest_first(starts, lengths);
  const int64_t ns = static_cast<int64_t>(starts.size());
  int64_t longest = 0;
  for (int64_t i = 0; i < ns; ++i) longest = std::max<int64_t>(longest, lengths[i]);
  if (batch == 0) batch = ns;
  // A graph holds sequences of up to max_seq tokens: by default the longest rounded up to a power of
  // two from 128, as a caller bucketing graphs would.
  if (max_seq < longest) {
    max_seq = 128;
    while (max_seq < longest) max_seq *= 2;
  }
  // --dense: the graph of whole sequences (every document max_seq tokens, batch = their count).
  if (dense) {
    for (int64_t i = 0; i < ns; ++i)
      if (lengths[i] != longest) {
        std::fprintf(stderr, "--dense needs sequences of one length\n");
        return 2;
      }
    batch = ns;
    max_seq = longest;
  }
  const loom::cuda::SdpaShape shape{batch, max_seq, H, K, D, false, !dense, window > 0};
  std::printf("documents %lld, tokens %lld; %lld sequences, longest %lld; graph batch %lld max_seq %lld%s; "
              "heads %lld/%lld, dim %lld%s\n",
              (long long)n, (long long)T, (long long)ns, (long long)longest, (long long)batch, (long long)max_seq,
              window > 0 ? " with a bias" : "", (long long)H, (long long)K, (long long)D,
              longest_first ? "; longest first" : "");

  auto t0 = std::chrono::steady_clock::now();
  loom::cuda::SdpaGraph fwd(loom::cuda::SdpaGraph::Pass::kForward, shape);
  auto t1 = std::chrono::steady_clock::now();
  loom::cuda::SdpaGraph bwd(loom::cuda::SdpaGraph::Pass::kBackward, shape);
  auto t2 = std::chrono::steady_clock::now();
  std::printf("built forward in %.1f ms, backward in %.1f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
  // With --windows, the documents longer than a window: a second graph, as the trainer's.
  const int64_t nl = static_cast<int64_t>(windows.long_start.size());
  loom::cuda::SdpaShape long_shape{1, 128, H, K, D, false, true, false};
  while (long_shape.batch < nl) long_shape.batch *= 2;
  for (int64_t i = 0; i < nl; ++i)
    while (long_shape.max_seq < windows.long_length[static_cast<size_t>(i)]) long_shape.max_seq *= 2;
  std::unique_ptr<loom::cuda::SdpaGraph> long_fwd, long_bwd;
  if (nl > 0) {
    long_fwd = std::make_unique<loom::cuda::SdpaGraph>(loom::cuda::SdpaGraph::Pass::kForward, long_shape);
    long_bwd = std::make_unique<loom::cuda::SdpaGraph>(loom::cuda::SdpaGraph::Pass::kBackward, long_shape);
    std::printf("and %lld longer documents in a second graph: batch %lld max_seq %lld\n", (long long)nl,
                (long long)long_shape.batch, (long long)long_shape.max_seq);
  }

  const size_t qn = T * H * D, kn = T * K * D;
  const std::vector<uint16_t> hq = random_bf16(qn, rng), hk = random_bf16(kn, rng), hv = random_bf16(kn, rng),
                              hdo = random_bf16(qn, rng);
  Buf q(qn * 2), k(kn * 2), v(kn * 2), o(qn * 2), d_o(qn * 2), dq(qn * 2), dk(kn * 2), dv(kn * 2);
  Buf stats(T * H * 4);
  cuda_ok(cudaMemcpy(q.p, hq.data(), qn * 2, cudaMemcpyHostToDevice), "upload");
  cuda_ok(cudaMemcpy(k.p, hk.data(), kn * 2, cudaMemcpyHostToDevice), "upload");
  cuda_ok(cudaMemcpy(v.p, hv.data(), kn * 2, cudaMemcpyHostToDevice), "upload");
  cuda_ok(cudaMemcpy(d_o.p, hdo.data(), qn * 2, cudaMemcpyHostToDevice), "upload");
  std::vector<int64_t> words(static_cast<size_t>(loom::cuda::sdpa_layout_words(batch)));
  Buf layout_dev(words.size() * 8);
  loom::cuda::fill_sdpa_layout(starts.data(), lengths.data(), ns, T, shape, words.data());
  loom::cuda::SdpaLayout layout = loom::cuda::sdpa_layout(static_cast<const int64_t*>(layout_dev.p), shape, T);
  cuda_ok(cudaMemcpy(layout_dev.p, words.data(), words.size() * 8, cudaMemcpyHostToDevice), "upload layout");
  // The windows' bias [batch, 1, max_seq, max_seq]: 0 within a document, -inf across documents.
  Buf bias_dev(window > 0 ? static_cast<size_t>(batch * max_seq * max_seq * 2) : 16);
  if (window > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(batch * max_seq));
    loom::cuda::fill_window_documents(cu.data(), windows, shape, ids.data());
    std::vector<uint16_t> bias(static_cast<size_t>(batch * max_seq * max_seq), 0);
    for (int64_t w = 0; w < batch; ++w)
      for (int64_t i = 0; i < max_seq; ++i)
        for (int64_t j = 0; j < max_seq; ++j)
          if (ids[static_cast<size_t>(w * max_seq + i)] != ids[static_cast<size_t>(w * max_seq + j)])
            bias[static_cast<size_t>((w * max_seq + i) * max_seq + j)] = 0xff80;  // bf16 -inf
    cuda_ok(cudaMemcpy(bias_dev.p, bias.data(), bias.size() * 2, cudaMemcpyHostToDevice), "upload bias");
    layout.bias = bias_dev.p;
  }
  std::vector<int64_t> long_words(static_cast<size_t>(loom::cuda::sdpa_layout_words(long_shape.batch)));
  Buf long_layout_dev(long_words.size() * 8);
  loom::cuda::fill_sdpa_layout(windows.long_start.data(), windows.long_length.data(), nl, T, long_shape,
                               long_words.data());
  const loom::cuda::SdpaLayout long_layout =
      loom::cuda::sdpa_layout(static_cast<const int64_t*>(long_layout_dev.p), long_shape, T);
  cuda_ok(cudaMemcpy(long_layout_dev.p, long_words.data(), long_words.size() * 8, cudaMemcpyHostToDevice),
          "upload layout");
  size_t ws_bytes = std::max(fwd.workspace_bytes(T), bwd.workspace_bytes(T));
  if (nl > 0) ws_bytes = std::max({ws_bytes, long_fwd->workspace_bytes(T), long_bwd->workspace_bytes(T)});
  Buf ws(ws_bytes);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // A pass runs the graph's call, then with longer documents the second graph's.
  auto forward = [&] {
    ok(fwd.forward(layout, q.p, k.p, v.p, o.p, static_cast<float*>(stats.p), scale, ws.p, nullptr), "forward");
    if (nl > 0)
      ok(long_fwd->forward(long_layout, q.p, k.p, v.p, o.p, static_cast<float*>(stats.p), scale, ws.p, nullptr),
         "forward of the longer documents");
  };
  auto backward = [&] {
    ok(bwd.backward(layout, q.p, k.p, v.p, o.p, d_o.p, static_cast<const float*>(stats.p), dq.p, dk.p, dv.p, scale,
                    ws.p, nullptr),
       "backward");
    if (nl > 0)
      ok(long_bwd->backward(long_layout, q.p, k.p, v.p, o.p, d_o.p, static_cast<const float*>(stats.p), dq.p, dk.p,
                            dv.p, scale, ws.p, nullptr),
         "backward of the longer documents");
  };
  std::printf("workspace: forward %zu bytes, backward %zu bytes\n", fwd.workspace_bytes(T), bwd.workspace_bytes(T));
  cuda_ok(cudaMemset(o.p, 0xff, qn * 2), "poison");  // NaN-like bf16: rows left unwritten show
  cuda_ok(cudaMemset(dq.p, 0xff, qn * 2), "poison");
  cuda_ok(cudaMemset(dk.p, 0xff, kn * 2), "poison");
  cuda_ok(cudaMemset(dv.p, 0xff, kn * 2), "poison");
  cuda_ok(cudaMemset(ws.p, 0xff, ws.bytes), "poison");  // the backward's accumulator must not read old bytes
  forward();
  backward();
  cuda_ok(cudaDeviceSynchronize(), "run");

  int failed = 0;
  if (check) {
    auto conv = [](const std::vector<uint16_t>& x) {
      std::vector<double> d(x.size());
      for (size_t i = 0; i < x.size(); ++i) d[i] = from_bf16(x[i]);
      return d;
    };
    const std::vector<double> Q = conv(hq), Kk = conv(hk), V = conv(hv), dO = conv(hdo);
    std::vector<double> O(qn, 0), LSE(T * H, 0), dQ(qn, 0), dK(kn, 0), dV(kn, 0);
    const int64_t G = H / K;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t a = cu[s], len = cu[s + 1] - cu[s];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / G;
        std::vector<double> P(len * len, 0), dP(len * len, 0);
        for (int64_t i = 0; i < len; ++i) {
          const double* qi = &Q[((a + i) * H + h) * D];
          double m = -INFINITY;
          for (int64_t j = 0; j <= i; ++j) {
            const double* kj = &Kk[((a + j) * K + kh) * D];
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
            P[i * len + j] = dot * scale;
            m = std::max(m, P[i * len + j]);
          }
          double z = 0;
          for (int64_t j = 0; j <= i; ++j) z += (P[i * len + j] = std::exp(P[i * len + j] - m));
          for (int64_t j = 0; j <= i; ++j) P[i * len + j] /= z;
          LSE[(a + i) * H + h] = m + std::log(z);
          double* oi = &O[((a + i) * H + h) * D];
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t d = 0; d < D; ++d) oi[d] += P[i * len + j] * V[((a + j) * K + kh) * D + d];
        }
        for (int64_t i = 0; i < len; ++i) {
          const double* doi = &dO[((a + i) * H + h) * D];
          double rowsum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += doi[d] * V[((a + j) * K + kh) * D + d];
            dP[i * len + j] = dot;
            rowsum += P[i * len + j] * dot;
          }
          for (int64_t j = 0; j <= i; ++j) {
            const double ds = P[i * len + j] * (dP[i * len + j] - rowsum) * scale;
            for (int64_t d = 0; d < D; ++d) {
              dQ[((a + i) * H + h) * D + d] += ds * Kk[((a + j) * K + kh) * D + d];
              dK[((a + j) * K + kh) * D + d] += ds * Q[((a + i) * H + h) * D + d];
              dV[((a + j) * K + kh) * D + d] += P[i * len + j] * doi[d];
            }
          }
        }
      }
    }
    const double eo = rel(conv(download<uint16_t>(o, qn)), O);
    const std::vector<float> st = download<float>(stats, T * H);
    const double es = rel(std::vector<double>(st.begin(), st.end()), LSE);
    const double eq = rel(conv(download<uint16_t>(dq, qn)), dQ), ek = rel(conv(download<uint16_t>(dk, kn)), dK),
                 ev = rel(conv(download<uint16_t>(dv, kn)), dV);
    failed = !(eo < 1e-2 && es < 1e-3 && eq < 2e-2 && ek < 2e-2 && ev < 2e-2);
    std::printf("check against float64: out %.2e, lse %.2e, dq %.2e, dk %.2e, dv %.2e: %s\n", eo, es, eq, ek, ev,
                failed ? "FAILED" : "ok");
  }

  if (iters > 0) {
    double flops = 0;
    for (int64_t s = 0; s < n; ++s) {
      const double len = cu[s + 1] - cu[s];
      flops += 4.0 * len * (len + 1) / 2 * D * H;
    }
    cudaEvent_t e0, e1, e2;
    cuda_ok(cudaEventCreate(&e0), "event");
    cuda_ok(cudaEventCreate(&e1), "event");
    cuda_ok(cudaEventCreate(&e2), "event");
    cuda_ok(cudaEventRecord(e0), "record");
    for (int64_t i = 0; i < iters; ++i) forward();
    cuda_ok(cudaEventRecord(e1), "record");
    for (int64_t i = 0; i < iters; ++i) backward();
    cuda_ok(cudaEventRecord(e2), "record");
    cuda_ok(cudaEventSynchronize(e2), "sync");
    float f_ms = 0, b_ms = 0;
    cuda_ok(cudaEventElapsedTime(&f_ms, e0, e1), "elapsed");
    cuda_ok(cudaEventElapsedTime(&b_ms, e1, e2), "elapsed");
    f_ms /= iters;
    b_ms /= iters;
    std::printf("time: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f TFLOP/s), both %.3f ms\n", f_ms,
                flops / f_ms / 1e9, b_ms, 2.5 * flops / b_ms / 1e9, f_ms + b_ms);
  }
  return failed;
}
