#include "loom/packer/pack.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/count_text.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

namespace {
// The inputs' ShardStreamChecks driven by one frontier over all their tokens in input order,
// advanced by the tokens each pack takes. concat consumes the inputs in exactly that order, so the
// check reads what was just copied, and pages behind it are dropped from the mapping (the resident
// set stays flat on inputs larger than RAM). bestfit copies in plan order (random access); the
// check is then a sequential sweep at the same pace.
class InputsCheck {
 public:
  InputsCheck(const ShardSet& inputs, bool release_behind) : inputs_(inputs), release_behind_(release_behind) {
    for (size_t s = 0; s < inputs.size(); ++s) {
      checks_.emplace_back(inputs.shard(s));
      if (release_behind) inputs.shard(s).bin().advise_sequential();
    }
  }
  void advance(uint64_t tokens) {
    frontier_ += tokens;
    while (cur_ < checks_.size()) {
      const ShardReader& r = inputs_.shard(cur_);
      const uint64_t local = frontier_ - start_;
      if (local < r.num_tokens()) {
        checks_[cur_].advance_to(local);
        release(false);
        return;
      }
      checks_[cur_].finish();
      release(true);
      start_ += r.num_tokens();
      ++cur_;
      released_ = 0;
    }
  }
  // Shard s's check, finished when the frontier passed its end.
  const ShardStreamCheck& shard_check(size_t s) const { return checks_[s]; }
  // Checks whatever the packs did not reach (nothing, unless the plan skipped tokens).
  void finish() {
    advance(0);
    for (; cur_ < checks_.size(); ++cur_) checks_[cur_].finish();
  }

 private:
  void release(bool all) {
    if (!release_behind_) return;
    constexpr uint64_t kReleaseBytes = uint64_t{64} << 20;
    const ShardReader& r = inputs_.shard(cur_);
    const uint64_t done = checks_[cur_].done() * r.dtype_bytes();
    if (all || done >= released_ + kReleaseBytes) {
      r.bin().advise_done(released_, done - released_);
      released_ = done;
    }
  }
  const ShardSet& inputs_;
  bool release_behind_;
  std::vector<ShardStreamCheck> checks_;
  size_t cur_ = 0;
  uint64_t start_ = 0, frontier_ = 0, released_ = 0;
};

// Runs f on a second thread, so that the inputs' check (hashing every byte) overlaps the copying;
// join() rethrows what f threw. Destroyed unjoined (the copying threw), it waits for f.
class Worker {
 public:
  template <typename F>
  explicit Worker(F f) : thread_([this, f]() mutable {
      try {
        f();
      } catch (...) {
        error_ = std::current_exception();
      }
    }) {}
  ~Worker() {
    if (thread_.joinable()) thread_.join();
  }
  void join() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::thread thread_;
};

// The global position of a plan segment's first token, through its document's offsets; asserts
// that the segment lies inside its document (the plan's own invariant).
[[maybe_unused]] uint64_t segment_start(const ShardSet& inputs, const PlannedSegment& g) {
  const auto [shard, local] = inputs.locate(g.doc);
  const ShardReader& r = inputs.shard(shard);
  LOOM_ASSERT(uint64_t{g.doc_pos} + g.length <= r.doc_len(local), "segment past its document");
  return inputs.first_token(shard) + r.offsets()[local] + g.doc_pos;
}

// The bytes of bestfit plan segment s, at its segment_src. segment_start's check is a debug
// build's only: in plan order the offsets are read at random, a cache miss per segment.
const uint8_t* segment_bytes(const ShardSet& inputs, const PackPlan& plan, uint64_t s) {
  const PlannedSegment& g = plan.segments[s];
  LOOM_DASSERT(segment_start(inputs, g) == plan.segment_src[s], "segment not at its document's tokens");
  return inputs.token_span(plan.segment_src[s], g.length);
}

// bestfit's check of the inputs (hash, ids, bos/eos): a sequential sweep on its own thread, which
// needs no plan, so it starts before one is made. join() rethrows what it found; destroyed
// unjoined (planning or packing threw), it stops at the next piece instead of reading on.
class Sweep {
 public:
  explicit Sweep(const ShardSet& inputs)
      : worker_([this, &inputs] {
          // L2-sized pieces: each is read from memory once (ShardStreamCheck scans it twice).
          const uint64_t kPiece = (uint64_t{128} << 10) / inputs.dtype_bytes();
          InputsCheck check(inputs, false);
          for (uint64_t t = 0; t < inputs.num_tokens(); t += kPiece) {
            if (stop_.load(std::memory_order_relaxed)) return;
            check.advance(std::min(kPiece, inputs.num_tokens() - t));
          }
          check.finish();
        }) {}
  ~Sweep() { stop_ = true; }  // before worker_'s destructor joins
  void join() { worker_.join(); }

 private:
  std::atomic<bool> stop_{false};
  Worker worker_;
};

// Fills ids [from, n) of a raw pack with pad_id.
void fill_padding(uint8_t* pack, uint32_t dtype_bytes, uint32_t from, uint32_t n, uint32_t pad_id) {
  if (dtype_bytes == 2) std::fill(reinterpret_cast<uint16_t*>(pack) + from, reinterpret_cast<uint16_t*>(pack) + n, static_cast<uint16_t>(pad_id));
  else std::fill(reinterpret_cast<uint32_t*>(pack) + from, reinterpret_cast<uint32_t*>(pack) + n, pad_id);
}

// One batch of bestfit's packs [first, last) of the plan: its index (segs, and seg_ends per pack)
// and the packs' bytes gathered from the inputs and padded.
void gather_batch(const ShardSet& inputs, const PackPlan& pl, uint64_t first, uint64_t last, uint8_t* packs,
                  uint32_t pad_id, std::vector<PackedSegment>& segs, std::vector<size_t>& seg_ends) {
  constexpr uint64_t kPrefetchAhead = 8;
  const uint32_t dtype = inputs.dtype_bytes();
  const uint64_t pack_bytes = uint64_t{pl.seq_len} * dtype;
  segs.clear();
  seg_ends.clear();
  for (uint64_t p = first; p < last; ++p) {
    uint8_t* pack = packs + (p - first) * pack_bytes;
    uint32_t used = 0;
    for (uint64_t s = pl.pack_offsets[p]; s < pl.pack_offsets[p + 1]; ++s) {
      const PlannedSegment& g = pl.segments[s];
      LOOM_ASSERT(used + g.length <= pl.seq_len, "segment past its pack");
      segs.push_back({g.doc, used, g.length, g.doc_pos, g.ends_doc ? kSegEndsDoc : 0});
      // Short segments are read at random places of the inputs: ask for one further on now, so
      // its cache misses overlap this copy. Its position is in the plan, read in order.
      if (s + kPrefetchAhead < pl.segments.size()) {
        const uint8_t* src = segment_bytes(inputs, pl, s + kPrefetchAhead);
        __builtin_prefetch(src);
        __builtin_prefetch(src + 64);
      }
      std::memcpy(pack + uint64_t{used} * dtype, segment_bytes(inputs, pl, s), uint64_t{g.length} * dtype);
      used += g.length;
    }
    fill_padding(pack, dtype, used, pl.seq_len, pad_id);
    seg_ends.push_back(segs.size());
  }
}

// bestfit's packs of one output file, batch by batch in file order: `threads` gatherers fill a ring
// of batches ahead (every pack has seq_len ids, so a batch's bytes need nothing of the batches
// before it), this thread adds each batch's index and hashes it in order, and a writer thread
// writes the batches hashed, in order. A slot is gathered into again once its batch is written. A
// failure on any thread stops the others; the first to happen is rethrown.
class GatherRing {
 public:
  GatherRing(const ShardSet& inputs, const PackPlan& pl, uint64_t first, uint64_t last, uint64_t batch,
             size_t threads, PackedWriter& writer, Progress& progress)
      : inputs_(inputs), pl_(pl), first_(first), last_(last), batch_(batch),
        batches_((last - first + batch - 1) / batch), writer_(writer), progress_(progress),
        slots_(threads + 2) {
    const uint64_t bytes = batch * uint64_t{pl.seq_len} * inputs.dtype_bytes();
    for (Slot& slot : slots_) slot.packs.resize(bytes);
    try {
      for (size_t w = 0; w < threads; ++w)
        workers_.push_back(std::make_unique<Worker>([this, w, threads] { gather_from(w, threads); }));
      workers_.push_back(std::make_unique<Worker>([this] { write_all(); }));
    } catch (...) {
      stop();  // the threads started leave, and workers_ joins them as the constructor unwinds
      throw;
    }
  }
  GatherRing(const GatherRing&) = delete;
  GatherRing& operator=(const GatherRing&) = delete;
  ~GatherRing() { stop(); }  // a throw on this thread: the others leave, the Workers join

  // Runs the ring to the end on this thread; rethrows what any thread threw.
  void run() {
    try {
      for (uint64_t b = 0; b < batches_; ++b) {
        Slot& slot = slots_[b % slots_.size()];
        {
          std::unique_lock<std::mutex> lock(mu_);
          changed_.wait(lock, [&] { return slot.batch == b || failed_; });
          if (failed_) break;
        }
        const uint64_t n = slot.seg_ends.size();
        writer_.add_index(n, slot.segs.data(), slot.seg_ends.data());
        writer_.hash_raw(slot.packs.data(), n * pl_.seq_len);
        {
          std::lock_guard<std::mutex> lock(mu_);
          hashed_ = b + 1;
          changed_.notify_all();
        }
        progress_.add(n * uint64_t{pl_.seq_len} * inputs_.dtype_bytes());
      }
    } catch (...) {
      stop();
      throw;
    }
    for (auto& w : workers_) w->join();  // their failures are in first_error_, by fail()
    if (first_error_) std::rethrow_exception(first_error_);
    LOOM_ASSERT(written_ == batches_, "the ring stopped at batch ", written_, " of ", batches_, " with no failure");
  }

 private:
  struct Slot {
    std::vector<uint8_t> packs;
    std::vector<PackedSegment> segs;
    std::vector<size_t> seg_ends;
    uint64_t batch = UINT64_MAX;  // the batch gathered into it, once complete
  };

  void stop() {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = failed_ || written_ < batches_;
    changed_.notify_all();
  }
  // A thread's failure, from its catch block (it then ends): the first one is what run() rethrows.
  void fail() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_error_) first_error_ = std::current_exception();
    failed_ = true;
    changed_.notify_all();
  }

  // Batches w, w + threads, ...: each into its slot once that slot's previous batch is written.
  void gather_from(size_t w, size_t threads) {
    try {
      for (uint64_t b = w; b < batches_; b += threads) {
        Slot& slot = slots_[b % slots_.size()];
        {
          std::unique_lock<std::mutex> lock(mu_);
          changed_.wait(lock, [&] { return b < written_ + slots_.size() || failed_; });
          if (failed_) return;
        }
        const uint64_t from = first_ + b * batch_, to = std::min(last_, from + batch_);
        gather_batch(inputs_, pl_, from, to, slot.packs.data(), writer_.pad_id(), slot.segs, slot.seg_ends);
        std::lock_guard<std::mutex> lock(mu_);
        slot.batch = b;
        changed_.notify_all();
      }
    } catch (...) {
      fail();
    }
  }

  // Every batch, in order, once hashed.
  void write_all() {
    try {
      for (uint64_t b = 0; b < batches_; ++b) {
        const Slot& slot = slots_[b % slots_.size()];
        {
          std::unique_lock<std::mutex> lock(mu_);
          changed_.wait(lock, [&] { return b < hashed_ || failed_; });
          if (failed_) return;
        }
        writer_.write_unhashed(slot.packs.data(), slot.seg_ends.size() * pl_.seq_len);
        std::lock_guard<std::mutex> lock(mu_);
        written_ = b + 1;
        changed_.notify_all();
      }
    } catch (...) {
      fail();
    }
  }

  const ShardSet& inputs_;
  const PackPlan& pl_;
  const uint64_t first_, last_, batch_, batches_;
  PackedWriter& writer_;
  Progress& progress_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable changed_;
  uint64_t hashed_ = 0, written_ = 0;  // batches indexed and hashed, and written, in order
  bool failed_ = false;
  std::exception_ptr first_error_;
  std::vector<std::unique_ptr<Worker>> workers_;  // the gatherers, then the writer; last: joined before the slots go
};
}  // namespace

std::string pack_scratch_parent(const PackOptions& o) { return o.output_dir; }

std::vector<std::string> output_set_files(const PackOptions& o) {
  std::vector<std::string> files;
  const std::string dir = sys::canonical_path(o.output_dir);  // "new/../out" lists out/ before new/ is made
  if (!sys::is_directory(dir)) return files;
  const std::string prefix = o.name + "-";
  for (const std::string& entry : sys::list_dir(dir)) {
    std::string tail = entry.substr(std::min(entry.size(), o.name.size()));
    if (entry.rfind(prefix, 0) == 0) {
      const size_t digits = entry.find_first_not_of("0123456789", prefix.size());
      if (digits == std::string::npos || digits - prefix.size() < 5) continue;
      tail = entry.substr(digits);
    } else if (entry.rfind(o.name, 0) != 0) {
      continue;
    }
    if (tail == ".bin" || tail == ".bin.meta") files.push_back(dir + "/" + entry);
  }
  return files;
}

void check_pack_spares_inputs(const std::vector<std::string>& files, const PackOptions& o) {
  // Only existing files can be inputs: those among the names a run of any size could write.
  std::vector<std::string> outputs = {o.output_dir + "/" + o.name + ".bin", o.output_dir + "/" + o.name + ".bin.meta"};
  for (std::string& f : output_set_files(o)) outputs.push_back(std::move(f));
  sys::check_outputs_spare_inputs(files, outputs);
}

uint64_t output_set_id(const ShardSet& inputs, const PackOptions& o, uint64_t num_files) {
  Xxh64 h;
  const auto add = [&h](uint64_t v) { h.update(&v, sizeof(v)); };
  for (uint64_t v : {uint64_t{kPackedVersion}, uint64_t{o.seq_len}, static_cast<uint64_t>(o.strategy), o.seed,
                     o.max_packs_per_shard, num_files, uint64_t{o.name.size()}})
    add(v);
  h.update(o.name.data(), o.name.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ShardHeader& sh = inputs.shard(i).header();
    for (uint64_t v : {sh.num_docs, sh.num_tokens, sh.bin_xxh64, sh.offsets_xxh64}) add(v);
  }
  const uint64_t id = h.digest();
  return id ? id : 1;  // 0 means "not recorded"
}

std::vector<std::string> pack_output_paths(const PackOptions& o, uint64_t num_packs) {
  if (o.max_packs_per_shard == 0 || num_packs <= o.max_packs_per_shard) return {o.output_dir + "/" + o.name + ".bin"};
  std::vector<std::string> paths;
  const uint64_t files = (num_packs + o.max_packs_per_shard - 1) / o.max_packs_per_shard;
  for (uint64_t i = 0; i < files; ++i) {
    char num[32];
    std::snprintf(num, sizeof(num), "-%05llu", static_cast<unsigned long long>(i));
    paths.push_back(o.output_dir + "/" + o.name + num + ".bin");
  }
  return paths;
}

namespace {
// Packs [p, end) of a concat plan into writer's .bin: the global tokens [p*L, end*L) that exist,
// copied from the input files, then the last pack's padding.
// The second thread then runs `then` (the index), which touches nothing the copying does: with one
// hash pass it is done before the copy is.
template <typename F>
void copy_concat(const ShardSet& inputs, const std::vector<sys::File>& sources, uint64_t L, uint64_t num_tokens,
                 uint64_t p, uint64_t end, PackedWriter& writer, InputsCheck& check, Progress& progress, F&& then) {
  const uint64_t t0 = p * L, t1 = std::min(end * L, num_tokens);
  const uint32_t dtype = inputs.dtype_bytes();
  // Calls f(shard, first local token, count) over [t0, t1) in pieces of at most `piece` tokens.
  auto pieces = [&](uint64_t piece, auto&& f) {
    uint64_t start = 0;
    for (size_t s = 0; s < inputs.size(); ++s) {
      const uint64_t n = inputs.shard(s).num_tokens();
      const uint64_t b = std::max(t0, start), e = std::min(t1, start + n);
      for (uint64_t at = b; at < e; at += piece) f(s, at - start, std::min(piece, e - at));
      start += n;
    }
  };
  {
    // Small pieces: each is hashed twice (the output, then the input's check) while in cache. A
    // file that begins with a whole input has that input's hash as its own so far: hashed once.
    uint64_t start = 0;
    size_t whole = inputs.size();
    for (size_t s = 0; s < inputs.size() && start <= t0; start += inputs.shard(s++).num_tokens())
      if (start == t0 && t1 - t0 >= inputs.shard(s).num_tokens() && inputs.shard(s).num_tokens() > 0) whole = s;
    Worker hash([&] {
      pieces(uint64_t{1} << 16, [&](size_t s, uint64_t local, uint64_t n) {
        if (s != whole) writer.hash_raw(inputs.shard(s).token_bytes() + local * dtype, n);
        check.advance(n);
        if (s == whole && local + n == inputs.shard(s).num_tokens()) writer.hash_as(check.shard_check(s).hash());
      });
      then();
    });
    pieces(uint64_t{16} << 20, [&](size_t s, uint64_t local, uint64_t n) {
      writer.copy_raw(sources[s], local * dtype, n);
      progress.add(n * dtype);
    });
    hash.join();
  }
  const uint64_t pad = end * L - t1;
  if (pad > 0) {
    std::vector<uint8_t> ids(pad * dtype);
    fill_padding(ids.data(), dtype, 0, static_cast<uint32_t>(pad), writer.pad_id());
    writer.write_raw(ids.data(), pad);
    progress.add(pad * dtype);
  }
}
}  // namespace

namespace {
// What write_packs needs of the plan before the packs' contents: their number and tokens.
struct PlanShape {
  uint32_t seq_len;
  uint64_t num_packs, num_tokens;
};

// The report's totals (as PackPlan's; num_packs > 0).
void fill_totals(PackReport& rep, const PlanShape& shape, uint64_t documents, uint64_t truncated_docs) {
  rep.packs = shape.num_packs;
  rep.tokens = shape.num_tokens;
  rep.padding_tokens = shape.num_packs * shape.seq_len - shape.num_tokens;
  rep.documents = documents;
  rep.truncated_docs = truncated_docs;
  rep.padding_fraction = fraction(rep.padding_tokens, shape.num_packs * shape.seq_len);
  rep.truncated_fraction = fraction(truncated_docs, documents);
}

// concat's index of the packs [p, end) of one file, on the hashing thread once the file's bytes
// are hashed. The cut is walked twice over the packs, file after file (made on the first file):
// `counts` gives each file's segment counts before its index (and the report's totals),
// `segments` the index itself.
struct ConcatIndex {
  std::vector<uint64_t> lens;
  std::optional<ConcatCut> counts, segments;

  void write(const ShardSet& inputs, const PlanShape& shape, uint64_t p, uint64_t end, uint64_t batch,
             PackedWriter& writer) {
    if (!counts) {
      lens = inputs.doc_lengths();
      counts.emplace(lens, shape.seq_len);
      segments.emplace(lens, shape.seq_len);
    }
    std::vector<uint64_t> offsets(end - p + 1);
    for (uint64_t q = p; q < end; ++q) {
      const uint64_t n = counts->next_pack([](auto...) {});
      LOOM_ASSERT(n > 0, "concat's cut ends at pack ", q, " of ", shape.num_packs);
      offsets[q - p + 1] = offsets[q - p] + n;
    }
    writer.open_index(offsets);
    writer.reserve(end - p, 0);
    std::vector<PackedSegment> segs;  // a batch's index
    std::vector<size_t> seg_ends;
    for (; p < end; p = std::min(end, p + batch)) {
      segs.clear();
      seg_ends.clear();
      for (uint64_t q = p; q < std::min(end, p + batch); ++q) {
        uint32_t used = 0;
        segments->next_pack([&](uint64_t d, uint32_t pos, uint32_t len, bool ends) {
          segs.push_back({d, used, len, pos, ends ? kSegEndsDoc : 0});
          used += len;
        });
        seg_ends.push_back(segs.size());
      }
      writer.add_index(seg_ends.size(), segs.data(), seg_ends.data());
    }
  }
};

// The output set of a run (pack.h): its files' writers, sealed as they fill, published together.
class OutputSet {
 public:
  OutputSet(const ShardSet& inputs, const PlanShape& shape, const PackOptions& o)
      : o_(o), paths_(pack_output_paths(o, shape.num_packs)),
        set_id_(output_set_id(inputs, o, paths_.size())) {
    std::vector<std::string> bins, outputs;
    for (size_t s = 0; s < inputs.size(); ++s) bins.push_back(inputs.shard(s).bin_path());
    for (const std::string& out : paths_) outputs.insert(outputs.end(), {out, meta_path_for(out)});
    sys::check_outputs_spare_inputs(shard_files(bins), outputs);
    sys::make_dirs(o.output_dir);
  }
  const std::vector<std::string>& paths() const { return paths_; }
  // The next file's writer (files in order).
  PackedWriter& next(const ShardSet& inputs, const PlanShape& shape) {
    const size_t i = writers_.size();
    writers_.push_back(std::make_unique<PackedWriter>(paths_[i], inputs.tokenizer(), shape.seq_len, o_.strategy, o_.seed));
    writers_.back()->set_output_set(set_id_, static_cast<uint32_t>(i), static_cast<uint32_t>(paths_.size()));
    return *writers_.back();
  }
  // Every file sealed: the previous set's files this one does not overwrite go (each .meta before
  // its .bin), then the new files are renamed into place.
  void publish() {
    LOOM_ASSERT(writers_.size() == paths_.size(), writers_.size(), " of ", paths_.size(), " files written");
    std::vector<std::string> kept;
    for (const std::string& p : paths_) kept.insert(kept.end(), {sys::canonical_path(p), sys::canonical_path(meta_path_for(p))});
    std::vector<std::string> stale = output_set_files(o_);
    std::sort(stale.begin(), stale.end(), [](const std::string& a, const std::string& b) { return a > b; });
    for (const std::string& f : stale) {
      if (std::find(kept.begin(), kept.end(), f) != kept.end()) continue;
      sys::remove_file(f);
      log::info("pack: removed ", f, " of the previous output set of '", o_.name, "'");
    }
    for (size_t i = 0; i < writers_.size(); ++i) {
      writers_[i]->publish();
      log::info("pack: wrote ", paths_[i], " (", writers_[i]->num_packs(), " packs)");
    }
    sys::fsync_dir(o_.output_dir);
  }

 private:
  const PackOptions& o_;
  std::vector<std::string> paths_;
  uint64_t set_id_;
  std::vector<std::unique_ptr<PackedWriter>> writers_;
};

// bestfit's packs [p, end) of the plan into writer, its index streamed to the .meta.
void write_bestfit_file(const ShardSet& inputs, const PackPlan& plan, uint64_t p, uint64_t end, uint64_t batch,
                        size_t gatherers, PackedWriter& writer, Progress& progress) {
  std::vector<uint64_t> offsets(end - p + 1);
  for (uint64_t q = p; q <= end; ++q) offsets[q - p] = plan.pack_offsets[q] - plan.pack_offsets[p];
  writer.open_index(offsets);
  writer.reserve(end - p, 0);
  GatherRing(inputs, plan, p, end, batch, gatherers, writer, progress).run();
  writer.seal(inputs.num_docs());
}

// bestfit writes plan's packs; concat (plan unused, may be null) needs no plan: its index is
// concat's cut walked from the inputs' lengths (ConcatCut) a batch of packs at a time, so no
// segment per document is kept. bestfit's Sweep comes started (while the plan was made), or
// starts here.
PackReport write_packs_of(const ShardSet& inputs, const PlanShape& shape, const PackPlan* plan, const PackOptions& o,
                          std::unique_ptr<Sweep> sweep = nullptr) {
  LOOM_CHECK(shape.num_packs > 0, "nothing to pack: the inputs hold no token");
  OutputSet set(inputs, shape, o);
  PackReport rep;
  rep.outputs = set.paths();
  const uint64_t per_file = rep.outputs.size() == 1 ? shape.num_packs : o.max_packs_per_shard;
  const uint32_t dtype = inputs.dtype_bytes();
  Progress progress("pack", shape.num_packs * shape.seq_len * dtype);
  // Packs are assembled as raw bytes straight from the inputs (no widening to uint32); the ids are
  // checked against the vocab by `check`, on the inputs, before anything is published.
  const bool concat = o.strategy == PackStrategy::kConcat;
  std::optional<InputsCheck> check;
  if (concat) check.emplace(inputs, true);
  // concat's .bin is the inputs' token bytes back to back, cut every seq_len tokens, and the last
  // pack padded: copied file to file in the kernel, while a second thread hashes the same bytes
  // through the mappings (the output's checksum, then the inputs' check), then writes the index.
  // bestfit gathers its packs from the mappings on several threads (GatherRing) and checks the
  // inputs on another, a sequential sweep.
  std::vector<sys::File> sources;
  if (concat) {
    LOOM_ASSERT(shape.num_tokens == inputs.num_tokens(), "concat plans every token");
    for (size_t s = 0; s < inputs.size(); ++s) sources.push_back(sys::File::open_read(inputs.shard(s).bin_path()));
  } else {
    LOOM_ASSERT(plan && plan->num_packs() == shape.num_packs && plan->num_tokens == shape.num_tokens &&
                    plan->seq_len == shape.seq_len,
                "the plan does not have the packs it was written for");
  }
  if (!concat && !sweep) sweep = std::make_unique<Sweep>(inputs);
  // Packs are gathered a batch (~1 MiB) at a time and written with one call.
  const uint64_t batch = std::max<uint64_t>(1, (uint64_t{1} << 20) / (uint64_t{shape.seq_len} * dtype));
  // bestfit's gatherers: the cores left beside the inputs' sweep, this thread and the writer's.
  const size_t cores = o.threads ? o.threads : std::thread::hardware_concurrency();
  const size_t gatherers = std::clamp<size_t>(cores, 4, 9) - 3;
  ConcatIndex index;
  // Every pack's segment count is known before its segments: the index goes to the .meta batch by
  // batch (for concat while the .bin is still being copied), and sealing writes only the header.
  for (uint64_t p = 0; p < shape.num_packs;) {
    PackedWriter& writer = set.next(inputs, shape);
    const uint64_t end = std::min(shape.num_packs, p + per_file);
    if (concat) {
      copy_concat(inputs, sources, shape.seq_len, shape.num_tokens, p, end, writer, *check, progress,
                  [&, p] { index.write(inputs, shape, p, end, batch, writer); });
      writer.seal(inputs.num_docs());
    } else {
      write_bestfit_file(inputs, *plan, p, end, batch, gatherers, writer, progress);
    }
    p = end;
  }
  // Outputs are published only after every input passed its check.
  if (sweep) sweep->join();
  else check->finish();
  set.publish();
  progress.finish();
  if (concat) {
    LOOM_ASSERT(index.counts->next_pack([](auto...) {}) == 0 && index.counts->num_tokens() == shape.num_tokens,
                "concat's cut has more than ", shape.num_packs, " packs or other than ", shape.num_tokens, " tokens");
    fill_totals(rep, shape, index.counts->nonempty_docs(), index.counts->truncated_docs());
  } else {
    fill_totals(rep, shape, plan->nonempty_docs, plan->truncated_docs);
  }
  return rep;
}
}  // namespace

PackReport write_packs(const ShardSet& inputs, const PackPlan& plan, const PackOptions& o) {
  // A concat plan is plan_concat's of these inputs (pack.h): its index is walked again from their
  // lengths, the same cut.
  if (o.strategy == PackStrategy::kConcat)
    LOOM_CHECK(plan.num_tokens == inputs.num_tokens() && plan.seq_len > 0 &&
                   plan.num_packs() == (plan.num_tokens + plan.seq_len - 1) / plan.seq_len &&
                   plan.pack_offsets.back() == plan.segments.size() && plan.segment_src.empty(),
               "write_packs: not plan_concat's plan of these inputs");
  else
    LOOM_CHECK(plan.segment_src.size() == plan.segments.size() && plan.pack_offsets.back() == plan.segments.size(),
               "write_packs: a bestfit plan needs every segment's source position (plan_bestfit's)");
  return write_packs_of(inputs, {plan.seq_len, plan.num_packs(), plan.num_tokens}, &plan, o);
}

PackReport pack_shards(const ShardSet& inputs, const PackOptions& o) {
  if (o.strategy == PackStrategy::kConcat) {
    // concat's .bin is the inputs' tokens back to back, cut every seq_len: its copy needs only the
    // number of packs, and its index is walked from the lengths while the copy runs; no plan.
    LOOM_CHECK(o.seq_len > 0, "--seq-len must be positive");
    const uint64_t tokens = inputs.num_tokens(), packs = (tokens + o.seq_len - 1) / o.seq_len;
    log::info("pack: ", pack_strategy_name(o.strategy), " plan: ", counted(packs, "pack"), " of ", o.seq_len,
              " tokens from ", counted(inputs.num_docs(), "document"));
    return write_packs_of(inputs, {o.seq_len, packs, tokens}, nullptr, o);
  }
  auto sweep = std::make_unique<Sweep>(inputs);
  const auto t0 = std::chrono::steady_clock::now();
  const PackPlan plan = plan_packs(inputs.doc_lengths(), o.seq_len, o.strategy, o.seed);
  const std::chrono::duration<double> planned = std::chrono::steady_clock::now() - t0;
  log::info("pack: ", pack_strategy_name(o.strategy), " plan: ", counted(plan.num_packs(), "pack"), " of ", o.seq_len,
            " tokens from ", counted(inputs.num_docs(), "document"), " in ", format_number(planned.count(), 2), " s");
  return write_packs_of(inputs, {plan.seq_len, plan.num_packs(), plan.num_tokens}, &plan, o, std::move(sweep));
}

}  // namespace loom::packer
