// The layout loom's cuDNN attention graphs read (kernels/cuda/cudnn_sdpa.h): element offsets of
// every document in q, k/v and the log-sum-exp, and the documents' lengths, in one array of int64
// words whose parts start 16-byte aligned. Host code, checked here against offsets computed by hand
// and, for random documents, against the rows the packed tensors give each document; sequences
// reordered longest first; then short documents grouped into windows (sdpa_windows) and the
// document of each window's row.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
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

TEST_CASE("the cuDNN layout of sequences with other calls' rows between them") {
  const std::vector<int32_t> start{0, 30, 300}, length{30, 0, 30};
  const SdpaShape shape{4, 256, 2, 1, 8, false, true, true};
  std::vector<int64_t> words(static_cast<size_t>(loom::cuda::sdpa_layout_words(4)), -1);
  loom::cuda::fill_sdpa_layout(start.data(), length.data(), 3, 600, shape, words.data());
  const loom::cuda::SdpaLayout l = loom::cuda::sdpa_layout(words.data(), shape, 600);
  CHECK(std::vector<int64_t>(l.q_offsets, l.q_offsets + 5) == std::vector<int64_t>{0, 480, 4800, 9600, 9600});
  CHECK(std::vector<int64_t>(l.kv_offsets, l.kv_offsets + 5) == std::vector<int64_t>{0, 240, 2400, 4800, 4800});
  CHECK(std::vector<int64_t>(l.stats_offsets, l.stats_offsets + 5) == std::vector<int64_t>{0, 60, 600, 1200, 1200});
  CHECK(std::vector<int32_t>(l.seq_len, l.seq_len + 4) == std::vector<int32_t>{30, 0, 30, 0});
}

TEST_CASE("sequences longest first keep their rows, ties in pack order") {
  std::vector<int32_t> start{0, 5, 12, 12, 40, 41}, length{5, 7, 0, 28, 1, 28};
  loom::cuda::longest_first(start, length);
  CHECK(start == std::vector<int32_t>{12, 41, 5, 0, 40, 12});
  CHECK(length == std::vector<int32_t>{28, 28, 7, 5, 1, 0});
  // Random documents: the same (start, length) pairs, lengths never rising.
  std::mt19937_64 rng(5);
  for (int round = 0; round < 100; ++round) {
    const int64_t n = static_cast<int64_t>(rng() % 50);
    std::vector<int32_t> cu{0};
    for (int64_t i = 0; i < n; ++i) cu.push_back(cu.back() + static_cast<int32_t>(rng() % 200));
    std::vector<int32_t> s, l;
    loom::cuda::sdpa_documents(cu.data(), n, s, l);
    std::vector<std::pair<int32_t, int32_t>> before;
    for (size_t i = 0; i < s.size(); ++i) before.emplace_back(s[i], l[i]);
    loom::cuda::longest_first(s, l);
    std::vector<std::pair<int32_t, int32_t>> after;
    for (size_t i = 0; i < s.size(); ++i) after.emplace_back(s[i], l[i]);
    INFO("round " << round);
    CHECK(std::is_sorted(l.begin(), l.end(), [](int32_t a, int32_t b) { return a > b; }));
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    CHECK(after == before);
  }
}

TEST_CASE("short documents share windows, longer ones keep their own sequence") {
  // Documents of 10, 20, 270, 10, 10, 10, 270 and 0 tokens, windows of up to 64, from row 5 on.
  const std::vector<int32_t> cu{5, 15, 35, 305, 315, 325, 335, 605, 605};
  const loom::cuda::SdpaWindows w = loom::cuda::sdpa_windows(cu.data(), 8, 64);
  CHECK(w.start == std::vector<int32_t>{0, 300, 600});
  CHECK(w.length == std::vector<int32_t>{30, 30, 0});
  CHECK(w.first_document == std::vector<int32_t>{0, 3, 7});
  CHECK(w.long_start == std::vector<int32_t>{30, 330});
  CHECK(w.long_length == std::vector<int32_t>{270, 270});
  const SdpaShape shape{4, 64, 2, 1, 8, false, true, true};
  std::vector<int32_t> ids(4 * 64, 7);
  loom::cuda::fill_window_documents(cu.data(), w, shape, ids.data());
  for (int r = 0; r < 64; ++r) {
    INFO("row " << r);
    CHECK(ids[static_cast<size_t>(r)] == (r < 10 ? 0 : r < 30 ? 1 : -1));
    CHECK(ids[static_cast<size_t>(64 + r)] == (r < 10 ? 3 : r < 20 ? 4 : r < 30 ? 5 : -1));
    CHECK(ids[static_cast<size_t>(128 + r)] == -1);  // the empty document's window
    CHECK(ids[static_cast<size_t>(192 + r)] == -1);  // the graph's unused window
  }
}

TEST_CASE("windows of random documents: every row once, windows full, documents whole") {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 300; ++round) {
    const int64_t window = int64_t{128} << (rng() % 3), n = 1 + static_cast<int64_t>(rng() % 80);
    std::vector<int32_t> cu{static_cast<int32_t>(rng() % 50)};
    for (int64_t i = 0; i < n; ++i) {
      const int32_t len = rng() % 4 == 0 ? static_cast<int32_t>(rng() % 1000) : static_cast<int32_t>(rng() % 40);
      cu.push_back(cu.back() + len);
    }
    const int32_t tokens = cu.back() - cu.front();
    const loom::cuda::SdpaWindows w = loom::cuda::sdpa_windows(cu.data(), n, window);
    INFO("round " << round << ": " << n << " documents, windows of " << window);
    std::vector<int> covered(static_cast<size_t>(tokens), 0);
    for (size_t j = 0; j < w.long_start.size(); ++j) {
      REQUIRE(w.long_length[j] > window);
      for (int32_t r = 0; r < w.long_length[j]; ++r) ++covered[static_cast<size_t>(w.long_start[j] + r)];
    }
    SdpaShape shape{1, window, 1, 1, 8, false, true, true};
    while (shape.batch < static_cast<int64_t>(w.start.size())) shape.batch *= 2;
    std::vector<int32_t> ids(static_cast<size_t>(shape.batch * window));
    loom::cuda::fill_window_documents(cu.data(), w, shape, ids.data());
    for (size_t j = 0; j < w.start.size(); ++j) {
      REQUIRE(w.length[j] <= window);
      // A window starts at its first document and ends at a document's end.
      const int32_t first = w.first_document[j];
      REQUIRE(cu[static_cast<size_t>(first)] - cu.front() == w.start[j]);
      REQUIRE(std::find(cu.begin(), cu.end(), cu.front() + w.start[j] + w.length[j]) != cu.end());
      // The next window was opened because the document after this one did not fit.
      const int32_t end = w.start[j] + w.length[j];
      if (j + 1 < w.start.size() && w.start[j + 1] == end) {
        const int32_t next = w.first_document[j + 1];
        REQUIRE(w.length[j] + cu[static_cast<size_t>(next) + 1] - cu[static_cast<size_t>(next)] > window);
      }
      for (int32_t r = 0; r < w.length[j]; ++r) {
        const int32_t row = w.start[j] + r, doc = ids[j * static_cast<size_t>(window) + static_cast<size_t>(r)];
        ++covered[static_cast<size_t>(row)];
        REQUIRE(doc >= 0);
        REQUIRE(cu[static_cast<size_t>(doc)] - cu.front() <= row);
        REQUIRE(row < cu[static_cast<size_t>(doc) + 1] - cu.front());
      }
    }
    for (int32_t row = 0; row < tokens; ++row) REQUIRE(covered[static_cast<size_t>(row)] == 1);
  }
}
