// Sorting more pairs of u64 than memory holds: pairs are buffered up to a budget, each full buffer
// is sorted and spilled to a run file beside the output, and finish() merges the runs (PairMerge)
// into a work file. Memory: the budget, plus one read buffer per run. Run N of a sorter whose
// prefix is P is the sys::AtomicFile temporary "P.runN.tmp.<host>.<pid>": a killed process leaves
// such files, and the next sorter of the same prefix on the same host removes every one whose
// process no longer runs, whatever its number (regular files of exactly that name, in P's folder;
// never a link), before it spills.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/dedup/work_file.h"
#include "loom/sys.h"

namespace loom::dedup {

struct Pair {
  uint64_t first, second;
  bool operator<(const Pair& o) const { return first < o.first || (first == o.first && second < o.second); }
  bool operator==(const Pair& o) const { return first == o.first && second == o.second; }
};
static_assert(sizeof(Pair) == 16, "a pair record is 16 bytes on disk");

class PairSorter {
 public:
  // run_prefix: the path the run files are named after (the output's path); memory_bytes: the
  // buffer's budget. unique: equal pairs are written once.
  PairSorter(std::string run_prefix, uint64_t memory_bytes, bool unique);
  ~PairSorter();
  PairSorter(const PairSorter&) = delete;
  PairSorter& operator=(const PairSorter&) = delete;
  void add(uint64_t first, uint64_t second) {
    buf_.push_back(Pair{first, second});
    if (buf_.size() >= capacity_) spill();
  }
  uint64_t runs() const { return runs_.size(); }
  // Every pair added, in order, to out; the runs are removed.
  void finish(WorkWriter& out);

 private:
  void spill();
  std::string prefix_;
  size_t capacity_;
  bool unique_;
  std::vector<Pair> buf_;
  std::vector<std::unique_ptr<sys::AtomicFile>> runs_;
};

// Reads a sorted run of pairs front to back through a small buffer.
class PairStream {
 public:
  PairStream(const std::string& path, uint64_t offset, uint64_t count);
  bool done() const { return pos_ >= count_; }
  const Pair& head() const { return buf_[pos_ - buf_begin_]; }
  void next();

 private:
  void fill();
  sys::File file_;
  uint64_t offset_, count_, pos_ = 0, buf_begin_ = 0;
  std::vector<Pair> buf_;
};

// The k-way merge of sorted PairStreams (a min-heap of the streams by their heads): head() is the
// smallest pair not passed yet, next() passes it; equal pairs of several streams each come out.
class PairMerge {
 public:
  explicit PairMerge(std::vector<PairStream> streams);
  bool done() const { return heap_.empty(); }
  const Pair& head() const { return streams_[heap_.front()].head(); }
  void next();

 private:
  std::vector<PairStream> streams_;
  std::vector<size_t> heap_;  // the streams not done
};

}  // namespace loom::dedup
