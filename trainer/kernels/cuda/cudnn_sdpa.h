// Causal attention over every document of a micro-batch in one cuDNN call, forward and backward,
// written in place into the packed [tokens, heads, head_dim] tensors: loom's own cuDNN graphs,
// built through cuDNN's backend API (no LibTorch, no cudnn-frontend).
//
// Why: LibTorch 2.11 reaches cuDNN's fused attention only through entries that allocate their own
// outputs, and its per-document (ragged) entry has wrong query gradients and builds a graph on every
// call. Calling cuDNN per document costs one launch per document and a copy of every output row
// into place. Here each graph takes the packed rows as cuDNN's ragged ("THD") layout: sequence i
// starts at element offset[i] of the packed tensor, and seq_len[i] says how many rows it has.
//
// Whole sequences (packs of one document) take a graph without the layout: cuDNN's dense kernel,
// which runs them about 1% faster in a training step than its ragged one.
//
// The graph is the one cuDNN's fused flash-attention engines match (the same operations, in the same
// order, as cudnn-frontend lowers its SDPA node to on cuDNN 9.19): Q K^T, scale, a padding mask from
// seq_len, a causal mask from the row and column indices, softmax with its log-sum-exp saved, then
// P V (with SdpaShape::bias, an additive bias after the scale); the backward recomputes P from the
// log-sum-exp. A graph fixes the number of sequences
// (`batch`) and the longest (`max_seq`); a call may use fewer of either: unused sequences have
// length 0 and start at the end of the tokens.
//
// Layouts (all contiguous, on the current device): q, o, do, dq [tokens, heads, head_dim]; k, v,
// dk, dv [tokens, kv_heads, head_dim]; stats (log-sum-exp, natural log) [tokens, heads] fp32.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace loom::cuda {

struct SdpaShape {
  int64_t batch = 0;    // sequences a call holds at most
  int64_t max_seq = 0;  // tokens of the longest
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool fp16 = false;   // else bf16
  bool ragged = true;  // false: `batch` sequences of exactly max_seq tokens, back to back (no layout)
  // An additive bias on the scores (SdpaLayout::bias), after the scale and before the masks: short
  // documents sharing one sequence (a window) kept apart by -inf across them (sdpa_windows below).
  bool bias = false;
  bool operator==(const SdpaShape& o) const {
    return batch == o.batch && max_seq == o.max_seq && heads == o.heads && kv_heads == o.kv_heads &&
           head_dim == o.head_dim && fp16 == o.fp16 && ragged == o.ragged && bias == o.bias;
  }
};

// Where the sequences lie, in device memory: seq_len [batch] int32; offsets [batch + 1] int64 in
// elements, each sequence's first row times heads * head_dim (q_offsets), kv_heads * head_dim
// (kv_offsets) and heads (stats_offsets). `tokens` = the rows of the packed tensors (the call's
// sequences may leave some to another call).
struct SdpaLayout {
  const int32_t* seq_len = nullptr;
  const int64_t* q_offsets = nullptr;
  const int64_t* kv_offsets = nullptr;
  const int64_t* stats_offsets = nullptr;
  int64_t tokens = 0;
  const void* bias = nullptr;  // with SdpaShape::bias: [batch, 1, max_seq, max_seq] in q's dtype
};

// A call's layout travels as one array of sdpa_layout_words(batch) int64 words, so one
// host-to-device copy carries it: the three offset arrays, then seq_len (int32 pairs), each
// starting 16-byte aligned. fill_sdpa_layout writes it for n <= batch sequences, sequence i being
// length[i] rows from row start[i] of the packed tensors (rows between sequences belong to another
// call); the graph's other sequences have length 0 and start at row `end`. The cu form takes
// sequences [cu[i], cu[i+1]) of cu[0..n], rows counted from cu[0]. sdpa_layout points into its
// device copy. Host code only (no cuDNN), so the CPU tests check it.
inline int64_t sdpa_layout_stride(int64_t batch) { return (batch + 2) / 2 * 2; }  // batch + 1 words, even

inline int64_t sdpa_layout_words(int64_t batch) {
  return 3 * sdpa_layout_stride(batch) + (batch + 3) / 4 * 2;  // batch int32 in whole 16-byte units
}

inline void fill_sdpa_layout(const int32_t* start, const int32_t* length, int64_t n, int64_t end,
                             const SdpaShape& shape, int64_t* words) {
  const int64_t b = shape.batch, w = sdpa_layout_stride(b);
  std::fill(words, words + sdpa_layout_words(b), int64_t{0});
  int32_t* seq = reinterpret_cast<int32_t*>(words + 3 * w);
  for (int64_t i = 0; i <= b; ++i) {
    const int64_t first = i < n ? start[i] : end;
    words[i] = first * shape.heads * shape.head_dim;
    words[w + i] = first * shape.kv_heads * shape.head_dim;
    words[2 * w + i] = first * shape.heads;
    if (i < b) seq[i] = i < n ? length[i] : 0;
  }
}

// The documents [cu[i], cu[i+1]) of cu[0..n] as sequences: their first rows (from cu[0]) and lengths.
inline void sdpa_documents(const int32_t* cu, int64_t n, std::vector<int32_t>& start, std::vector<int32_t>& length) {
  start.resize(static_cast<size_t>(n));
  length.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    start[static_cast<size_t>(i)] = cu[i] - cu[0];
    length[static_cast<size_t>(i)] = cu[i + 1] - cu[i];
  }
}

// Sequences (start[i], length[i]) reordered longest first, ties in their order. The layout's offsets
// let sequences come in any order, and cuDNN's ragged kernels take their tiles in layout order: long
// documents first keeps one from starting last (1.8-1.9% off the attention of packs of 2-3
// documents on the 1b shape, H100, bench/RESULTS.md).
inline void longest_first(std::vector<int32_t>& start, std::vector<int32_t>& length) {
  std::vector<size_t> order(start.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return length[a] > length[b]; });
  std::vector<int32_t> s(order.size()), l(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    s[i] = start[order[i]];
    l[i] = length[order[i]];
  }
  start.swap(s);
  length.swap(l);
}

inline void fill_sdpa_layout(const int32_t* cu, int64_t n, const SdpaShape& shape, int64_t* words) {
  std::vector<int32_t> start, length;
  sdpa_documents(cu, n, start, length);
  fill_sdpa_layout(start.data(), length.data(), n, cu[n] - cu[0], shape, words);
}

inline SdpaLayout sdpa_layout(const int64_t* device_words, const SdpaShape& shape, int64_t tokens) {
  const int64_t w = sdpa_layout_stride(shape.batch);
  SdpaLayout l;
  l.q_offsets = device_words;
  l.kv_offsets = device_words + w;
  l.stats_offsets = device_words + 2 * w;
  l.seq_len = reinterpret_cast<const int32_t*>(device_words + 3 * w);
  l.tokens = tokens;
  return l;
}

// Documents of tens of tokens each hold a 128-row tile of their own in cuDNN's kernels, as in
// FlashAttention-2's. Instead, short documents share sequences of up to `window` rows (windows),
// kept apart by an additive bias of -inf across documents (SdpaShape::bias); a longer document is a
// sequence of its own, in a second call without the bias. sdpa_windows splits the documents
// [cu[i], cu[i+1]) of cu[0..n] (rows counted from cu[0]) in order: a document of up to `window`
// rows joins the open window while it fits, else opens the next; a longer one closes it.
struct SdpaWindows {
  std::vector<int32_t> start, length;            // the windows: the biased call's sequences
  std::vector<int32_t> first_document;           // each window's first document (its index in cu)
  std::vector<int32_t> long_start, long_length;  // the longer documents: the plain call's sequences
};

inline SdpaWindows sdpa_windows(const int32_t* cu, int64_t n, int64_t window) {
  SdpaWindows w;
  bool open = false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t first = cu[i] - cu[0], len = cu[i + 1] - cu[i];
    if (len > window) {
      w.long_start.push_back(first);
      w.long_length.push_back(len);
      open = false;
    } else if (open && w.length.back() + len <= window) {
      w.length.back() += len;
    } else {
      w.start.push_back(first);
      w.length.push_back(len);
      w.first_document.push_back(static_cast<int32_t>(i));
      open = true;
    }
  }
  return w;
}

// The bias's source: for row r of window j, the document that row belongs to (its index in cu),
// in ids[j * shape.max_seq + r]; -1 past a window's end and in the graph's unused windows. The
// bias is 0 where a row's and a column's documents agree and -inf elsewhere.
inline void fill_window_documents(const int32_t* cu, const SdpaWindows& w, const SdpaShape& shape, int32_t* ids) {
  std::fill(ids, ids + shape.batch * shape.max_seq, int32_t{-1});
  for (size_t j = 0; j < w.start.size(); ++j) {
    int32_t doc = w.first_document[j];
    for (int32_t r = 0; r < w.length[j]; ++r) {
      while (cu[doc + 1] - cu[0] <= w.start[j] + r) ++doc;
      ids[static_cast<int64_t>(j) * shape.max_seq + r] = doc;
    }
  }
}

// One built graph and its execution plan. Building takes tens of milliseconds (cuDNN's heuristics
// and plan); callers keep them. Not thread-safe: one per thread (cuDNN handles are per thread).
class SdpaGraph {
 public:
  enum class Pass { kForward, kBackward };
  // Throws std::runtime_error with cuDNN's message when cuDNN has no engine for it.
  SdpaGraph(Pass pass, const SdpaShape& shape);
  ~SdpaGraph();
  SdpaGraph(const SdpaGraph&) = delete;
  SdpaGraph& operator=(const SdpaGraph&) = delete;

  const SdpaShape& shape() const;
  Pass pass() const;
  // Bytes of scratch a call over `tokens` tokens needs (the backward's fp32 query-gradient
  // accumulator and row sums live there too).
  size_t workspace_bytes(int64_t tokens) const;

  // Runs on `stream` (a cudaStream_t). Returns nullptr, or cuDNN's error text.
  const char* forward(const SdpaLayout& layout, const void* q, const void* k, const void* v, void* o, float* stats,
                      float scale, void* workspace, void* stream);
  const char* backward(const SdpaLayout& layout, const void* q, const void* k, const void* v, const void* o,
                       const void* d_o, const float* stats, void* dq, void* dk, void* dv, float scale,
                       void* workspace, void* stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::cuda
