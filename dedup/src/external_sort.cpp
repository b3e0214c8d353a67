#include "loom/dedup/external_sort.h"

#include <algorithm>
#include <queue>

#include "loom/error.h"

namespace loom::dedup {

namespace {
constexpr size_t kStreamPairs = size_t{1} << 14;  // 256 KiB read buffer per run
}

PairSorter::PairSorter(std::string run_prefix, uint64_t memory_bytes, bool unique)
    : prefix_(std::move(run_prefix)), capacity_(std::max<uint64_t>(memory_bytes / sizeof(Pair), 1024)), unique_(unique) {}

PairSorter::~PairSorter() = default;  // the AtomicFiles remove their temporaries

void PairSorter::spill() {
  std::sort(buf_.begin(), buf_.end());
  if (unique_) buf_.erase(std::unique(buf_.begin(), buf_.end()), buf_.end());
  auto run = std::make_unique<sys::AtomicFile>(str(prefix_, ".run", runs_.size()));
  run->write_unbuffered(buf_.data(), buf_.size() * sizeof(Pair));
  run->seal();
  runs_.push_back(std::move(run));
  buf_.clear();
}

void PairSorter::finish(WorkWriter& out) {
  std::sort(buf_.begin(), buf_.end());
  if (unique_) buf_.erase(std::unique(buf_.begin(), buf_.end()), buf_.end());
  if (runs_.empty()) {
    out.add_many(buf_.data(), buf_.size());
    std::vector<Pair>().swap(buf_);
    return;
  }
  if (!buf_.empty()) spill();
  std::vector<std::unique_ptr<PairStream>> streams;
  for (const auto& r : runs_)
    streams.push_back(std::make_unique<PairStream>(r->temp_path(), 0, r->bytes_written() / sizeof(Pair)));
  auto later = [&](size_t a, size_t b) { return streams[b]->head() < streams[a]->head(); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
  for (size_t i = 0; i < streams.size(); ++i)
    if (!streams[i]->done()) heap.push(i);
  std::vector<Pair> block;
  bool have_last = false;
  Pair last{};
  while (!heap.empty()) {
    const size_t i = heap.top();
    heap.pop();
    const Pair p = streams[i]->head();
    streams[i]->next();
    if (!streams[i]->done()) heap.push(i);
    if (unique_ && have_last && p == last) continue;
    block.push_back(p);
    last = p, have_last = true;
    if (block.size() == kStreamPairs) out.add_many(block.data(), block.size()), block.clear();
  }
  out.add_many(block.data(), block.size());
  streams.clear();
  for (auto& r : runs_) r->abandon();
  runs_.clear();
}

PairStream::PairStream(const std::string& path, uint64_t offset, uint64_t count)
    : file_(sys::File::open_read(path)), offset_(offset), count_(count) {
  fill();
}

void PairStream::next() {
  ++pos_;
  if (pos_ < count_ && pos_ - buf_begin_ >= buf_.size()) fill();
}

void PairStream::fill() {
  buf_begin_ = pos_;
  const uint64_t n = std::min<uint64_t>(kStreamPairs, count_ - pos_);
  buf_.resize(n);
  if (n) file_.pread_exact(buf_.data(), n * sizeof(Pair), offset_ + pos_ * sizeof(Pair));
}

}  // namespace loom::dedup
