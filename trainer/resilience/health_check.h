// Health checks (InternLM's empty_cache_and_diag): find the slow rank before it costs a day.
//
//   every monitor.diag_every steps   step_time_report(): per-rank step time min / median / max, the
//                                    slowest rank, and the ranks slower than
//                                    monitor.diag_outlier_ratio x the median;
//   at start-up                      startup_probe(): a fixed fp32 matmul timed `reps` times on each
//                                    rank (median kept) and, with several ranks, an all-reduce timed
//                                    the same way; both gathered to every rank and judged as above.
//
// The statistics are pure functions of the per-rank times (step_time_stats), so they are tested
// without a communicator; comm == nullptr (or world 1) means one rank. All ranks must call the
// gathering functions together (they are collectives).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace loom {

class Communicator;

struct RankTimeStats {
  std::vector<double> per_rank;  // seconds, index = rank
  double min = 0, median = 0, max = 0;
  int slowest_rank = 0;          // the lowest rank among equal maxima
  std::vector<int> outliers;     // ranks with time > outlier_ratio * median, ascending
};

// Median of an even count = mean of the two middle values. Throws on an empty input.
RankTimeStats rank_time_stats(const std::vector<double>& per_rank, double outlier_ratio);
// "step time min 0.101 / median 0.104 / max 0.180 s, slowest rank 3; outliers (> 1.5x median): 3".
std::string describe(const RankTimeStats& s, const std::string& what, double outlier_ratio);

// Every rank's `my_seconds` (one all-gather of a float64 on comm's device), then the statistics.
std::vector<double> gather_rank_times(Communicator* comm, double my_seconds);
RankTimeStats step_time_report(Communicator* comm, double my_seconds, double outlier_ratio);

struct ProbeOptions {
  int64_t matmul_n = 1024;  // [n, n] x [n, n] fp32 (use a smaller n on a CPU)
  int64_t allreduce_numel = 1 << 22;  // fp32 elements (16 MiB)
  int reps = 5;                // timed repetitions after one untimed warm-up; the median is kept
  double outlier_ratio = 1.5;  // monitor.diag_outlier_ratio
};

struct ProbeResult {
  RankTimeStats matmul;     // seconds per matmul, by rank
  RankTimeStats allreduce;  // seconds per all-reduce, by rank (empty per_rank with one rank)
  double matmul_tflops = 0; // this rank's, from its median
};

// Times the probes on `device` (a read-back ends each repetition, so device work is included).
ProbeResult startup_probe(Communicator* comm, const torch::Device& device, const ProbeOptions& o);

}  // namespace loom
