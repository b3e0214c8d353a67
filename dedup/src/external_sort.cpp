#include "loom/dedup/external_sort.h"

#include <algorithm>
#include <climits>

#include "loom/error.h"

namespace loom::dedup {

namespace {
constexpr size_t kStreamPairs = size_t{1} << 14;  // 256 KiB read buffer per run

// The end of a decimal number at name[pos] as str() writes one (digits, no leading zero), its value
// in *value; npos if there is none or it exceeds max.
size_t decimal_end(const std::string& name, size_t pos, uint64_t max, uint64_t* value) {
  size_t end = pos;
  uint64_t v = 0;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') {
    const uint64_t digit = static_cast<uint64_t>(name[end++] - '0');
    if (v > (max - digit) / 10) return std::string::npos;
    v = v * 10 + digit;
  }
  if (end == pos || (name[pos] == '0' && end - pos > 1)) return std::string::npos;
  *value = v;
  return end;
}

// Removes "<prefix>.runN.tmp.<host>.<pid>" of this host whose process no longer runs, for any N: the
// runs of a killed sorter, which AtomicFile's own clean-up reaches only up to the runs this one spills.
void remove_stale_runs(const std::string& prefix) {
  const std::string dir = sys::dirname(prefix);
  const std::string folder = dir.empty() ? "." : dir;
  if (!sys::is_directory(folder)) return;  // the first spill reports a missing folder properly
  const std::string run = sys::basename(prefix) + ".run", tmp = ".tmp." + sys::hostname() + ".";
  for (const std::string& name : sys::list_dir(folder)) {
    if (name.compare(0, run.size(), run) != 0) continue;
    uint64_t n = 0, pid = 0;
    size_t at = decimal_end(name, run.size(), UINT64_MAX, &n);
    if (at == std::string::npos || name.compare(at, tmp.size(), tmp) != 0) continue;
    at = decimal_end(name, at + tmp.size(), INT_MAX, &pid);
    if (at != name.size() || pid == 0 || sys::process_alive(static_cast<long>(pid))) continue;
    const std::string path = dir.empty() ? name : dir + "/" + name;
    if (!sys::is_symlink(path) && !sys::is_directory(path)) sys::remove_file(path);
  }
}
}  // namespace

PairSorter::PairSorter(std::string run_prefix, uint64_t memory_bytes, bool unique)
    : prefix_(std::move(run_prefix)), capacity_(std::max<uint64_t>(memory_bytes / sizeof(Pair), 1024)), unique_(unique) {
  remove_stale_runs(prefix_);
}

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
  std::vector<PairStream> streams;
  streams.reserve(runs_.size());
  for (const auto& r : runs_) streams.emplace_back(r->temp_path(), 0, r->bytes_written() / sizeof(Pair));
  {
    PairMerge merge(std::move(streams));
    std::vector<Pair> block;
    bool have_last = false;
    Pair last{};
    for (; !merge.done(); merge.next()) {
      const Pair p = merge.head();
      if (unique_ && have_last && p == last) continue;
      block.push_back(p);
      last = p, have_last = true;
      if (block.size() == kStreamPairs) out.add_many(block.data(), block.size()), block.clear();
    }
    out.add_many(block.data(), block.size());
  }  // the runs' descriptors closed before they are removed
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

namespace {
// The heap's order: the stream whose head is larger comes later.
struct LaterHead {
  const std::vector<PairStream>* streams;
  bool operator()(size_t a, size_t b) const { return (*streams)[b].head() < (*streams)[a].head(); }
};
}  // namespace

PairMerge::PairMerge(std::vector<PairStream> streams) : streams_(std::move(streams)) {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (!streams_[i].done()) heap_.push_back(i);
  std::make_heap(heap_.begin(), heap_.end(), LaterHead{&streams_});
}

void PairMerge::next() {
  const LaterHead later{&streams_};
  std::pop_heap(heap_.begin(), heap_.end(), later);
  PairStream& s = streams_[heap_.back()];
  s.next();
  if (s.done()) heap_.pop_back();
  else std::push_heap(heap_.begin(), heap_.end(), later);
}

}  // namespace loom::dedup
