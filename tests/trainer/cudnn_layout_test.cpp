// The layout loom's cuDNN attention graphs read (kernels/cuda/cudnn_sdpa.h): element offsets of
// every document in q, k/v and the log-sum-exp, and the documents' lengths, in one array of int64
// words whose parts start 16-byte aligned. Host code, checked here against offsets computed by hand
// and, for random documents, against the rows the packed tensors give each document.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/cudnn_sdpa.h"

using loom::cuda::SdpaShape;

TEST_CASE("the cuDNN layout of three documents, one empty, in a graph of four") {
  const std::vector<int32_t> cu{0, 5, 5, 12};
  const SdpaShape shape{4, 16, 3, 1, 8, false, true, false};
  REQUIRE(loom::cuda::sdpa_layout_words(4) == 3 * 6 + 2);
  std::vector<int64_t> words(static_cast<size_t>(loom::cuda::sdpa_layout_words(4)), -1);
  loom::cuda::fill_sdpa_layout(cu.data(), 3, shape, words.data());
  const loom::cuda::SdpaLayout l = loom::cuda::sdpa_layout(words.data(), shape, 12);
  CHECK(l.tokens == 12);
  // q, o, dq rows hold 3 heads of 8; k, v rows 1 head of 8; the log-sum-exp rows 3 values.
  CHECK(std::vector<int64_t>(l.q_offsets, l.q_offsets + 5) == std::vector<int64_t>{0, 120, 120, 288, 288});
  CHECK(std::vector<int64_t>(l.kv_offsets, l.kv_offsets + 5) == std::vector<int64_t>{0, 40, 40, 96, 96});
  CHECK(std::vector<int64_t>(l.stats_offsets, l.stats_offsets + 5) == std::vector<int64_t>{0, 15, 15, 36, 36});
  CHECK(std::vector<int32_t>(l.seq_len, l.seq_len + 4) == std::vector<int32_t>{5, 0, 7, 0});
  // Each part starts 16 bytes after the array's start times a whole number.
  const auto at = [&](const void* p) {
    return reinterpret_cast<const char*>(p) - reinterpret_cast<const char*>(words.data());
  };
  CHECK(at(l.kv_offsets) % 16 == 0);
  CHECK(at(l.stats_offsets) % 16 == 0);
  CHECK(at(l.seq_len) % 16 == 0);
  CHECK(at(l.seq_len + 4) <= static_cast<std::ptrdiff_t>(words.size() * sizeof(int64_t)));
  CHECK(words[5] == 0);  // the padding word after the five q offsets is written, not left as it was
}

TEST_CASE("the cuDNN layout of random documents gives each document its own rows") {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 200; ++round) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    int64_t batch = 1;
    while (batch < n) batch *= 2;
    batch *= 1 + static_cast<int64_t>(rng() % 2);  // sometimes room to spare
    // A slice of a longer cu_seqlens: the layout counts from its first entry.
    std::vector<int32_t> cu{static_cast<int32_t>(rng() % 100)};
    for (int64_t i = 0; i < n; ++i) cu.push_back(cu.back() + static_cast<int32_t>(rng() % 300));
    const int64_t H = 1 + static_cast<int64_t>(rng() % 8), K = 1 + static_cast<int64_t>(rng() % 4), D = 64;
    const SdpaShape shape{batch, 4096, H, K, D, false, true, false};
    std::vector<int64_t> words(static_cast<size_t>(loom::cuda::sdpa_layout_words(batch)));
    loom::cuda::fill_sdpa_layout(cu.data(), n, shape, words.data());
    const int64_t tokens = cu.back() - cu.front();
    const loom::cuda::SdpaLayout l = loom::cuda::sdpa_layout(words.data(), shape, tokens);
    int64_t seen = 0;
    for (int64_t i = 0; i < batch; ++i) {
      INFO("round " << round << ", document " << i << " of " << n << " in a graph of " << batch);
      const int64_t first = i < n ? cu[static_cast<size_t>(i)] - cu.front() : tokens;
      const int64_t len = i < n ? cu[static_cast<size_t>(i) + 1] - cu[static_cast<size_t>(i)] : 0;
      REQUIRE(l.seq_len[i] == len);
      REQUIRE(l.q_offsets[i] == first * H * D);
      REQUIRE(l.kv_offsets[i] == first * K * D);
      REQUIRE(l.stats_offsets[i] == first * H);
      REQUIRE(l.q_offsets[i + 1] - l.q_offsets[i] == len * H * D);
      seen += l.seq_len[i];
    }
    CHECK(seen == tokens);
    CHECK(l.q_offsets[batch] == tokens * H * D);
  }
}
