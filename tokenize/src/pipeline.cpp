#include "loom/tokenize/pipeline.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "loom/error.h"
#include "loom/tokenize/line_reader.h"
#include "loom/tokenize/text.h"

namespace loom::tokenize {

namespace {

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A piece of a document: text[begin, begin+len) of its batch.
struct Piece {
  size_t begin, len;
  bool first, last;  // first/last piece of its document (bos/eos go around the whole document)
};

// A bad record of a line block: its line (1-based, within the block) and what was wrong.
struct BadLine {
  uint64_t line;
  std::string error;
};

// Work for an encoder: pieces of documents the reading thread cut (text, pieces), or a block of whole
// lines (lines_block) that the encoder itself turns into documents and serializes (out).
struct Batch {
  uint64_t seq = 0;
  uint64_t file_bytes = 0;      // input consumed when the batch was cut
  // Pieces:
  std::string text;
  std::vector<Piece> pieces;
  std::vector<uint32_t> ids;    // filled by an encoder: every piece's ids back to back
  std::vector<size_t> piece_ids_end;
  // A line block:
  bool is_block = false;
  LineBlock block;
  SerializedDocs out;           // its documents, as the shard stores them
  uint64_t lines = 0;           // lines in the block
  FileStats stats;              // docs, tokens, text_bytes, empty, bad of the block
  std::vector<BadLine> bad;     // the first max_listed_errors bad records (the first only, --on-error fail)

  // Empties it for the next use, keeping the buffers' memory (no allocation per batch, no page
  // faults, no frees across threads in the steady state).
  void reset() {
    seq = file_bytes = 0;
    text.clear();
    pieces.clear();
    ids.clear();
    piece_ids_end.clear();
    is_block = false;
    block.bytes.clear();
    block.offset = 0;
    out.clear();
    lines = 0;
    stats = FileStats();
    bad.clear();
  }
  size_t capacity_bytes() const {
    return text.capacity() + pieces.capacity() * sizeof(Piece) + ids.capacity() * sizeof(uint32_t) +
           piece_ids_end.capacity() * sizeof(size_t) + block.bytes.capacity() + out.bytes.capacity() +
           (out.tokens.capacity() + out.lengths.capacity()) * sizeof(uint64_t);
  }
};

// Batches in flight: at least 4 per encoder thread, and up to 16 per thread while they hold less than
// 16 MiB of text, so that the in-order writer does not stall the encoders when one of them is
// descheduled for a while holding the oldest batch (more threads than cores: reader + writer + N).
size_t batches_in_flight(const PipelineOptions& o) {
  const size_t threads = o.threads;
  const size_t by_bytes = (size_t{16} << 20) / std::max<size_t>(o.batch_bytes, 1);
  return std::max(4 * threads, std::min(16 * threads, by_bytes));
}

class Pipeline {
 public:
  Pipeline(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink, const PipelineOptions& options,
           WorkerPool* pool)
      : reader_(reader), encoder_(encoder), sink_(sink), opt_(options), pool_(pool),
        max_in_flight_(batches_in_flight(options)), blocks_(reader.make_line_parser() != nullptr),
        done_(max_in_flight_), t0_(Clock::now()) {}

  FileStats run(const std::function<void(uint64_t, uint64_t)>& on_progress) {
    std::vector<std::thread> threads;
    threads.reserve(opt_.threads + 1);  // emplace_back then throws only std::system_error (caught below)
    try {
      threads.emplace_back([this] {
        guarded([this] { produce(); });
        stats_.read_cpu_s = thread_cpu_s();
      });
      auto encoder = [this] {
        const double cpu0 = thread_cpu_s();
        double waited = 0;
        guarded([&] { encode_loop(waited); });
        const double cpu = thread_cpu_s() - cpu0;
        std::lock_guard<std::mutex> lock(m_);
        stats_.encode_cpu_s += cpu;
        stats_.encode_wait_s += waited;
      };
      if (pool_) pool_->start(encoder);
      for (unsigned i = 0; !pool_ && i < opt_.threads; ++i) threads.emplace_back(encoder);
    } catch (const std::system_error& e) {
      // The system refused a thread (limits, memory): stop and join the ones already running.
      stop();
      for (auto& t : threads) t.join();
      LOOM_FAIL("cannot start ", opt_.threads + 1, " threads (", e.what(), "; started ", threads.size(),
                "); try a smaller --threads");
    }
    const double cpu0 = thread_cpu_s();
    guarded([&] { write_loop(on_progress); });
    stats_.write_cpu_s = thread_cpu_s() - cpu0;
    stop();
    for (auto& t : threads) t.join();
    if (pool_) pool_->wait();
    if (error_) std::rethrow_exception(error_);
    stats_.wall_s = seconds_since(t0_);
    return stats_;
  }

 private:
  template <typename F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
      }
      stop();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    wake_all();
  }
  void wake_all() {
    work_cv_.notify_all();
    room_cv_.notify_all();
    done_cv_.notify_all();
  }

  // An empty batch: a written one with its buffers, or a new one.
  std::unique_ptr<Batch> new_batch() {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (!free_.empty()) {
        std::unique_ptr<Batch> b = std::move(free_.back());
        free_.pop_back();
        return b;
      }
    }
    return std::make_unique<Batch>();
  }
  void all_produced() {
    {
      std::lock_guard<std::mutex> lock(m_);
      produced_all_ = true;
    }
    wake_all();
  }

  // A bad record, in input order: the end with --on-error fail, else listed (up to
  // max_listed_errors; the caller counts it).
  void report_bad(const std::string& msg) {
    if (opt_.on_error == OnError::kFail)
      LOOM_FAIL(msg, " (--on-error fail stops here; --on-error skip would skip this record)");
    if (stats_.bad_examples.size() < opt_.max_listed_errors) stats_.bad_examples.push_back(msg);
  }

  // Reader thread: documents -> pieces -> batches, in order; for line readers, blocks of whole lines.
  void produce() {
    if (blocks_) return produce_blocks();
    auto batch = new_batch();
    Document doc;
    while (reader_.next(doc)) {
      if (!doc.error.empty()) {
        report_bad(location(reader_.path(), doc) + doc.error);
        ++stats_.bad;
        continue;
      }
      if (doc.text.empty()) {
        ++stats_.empty;
        continue;
      }
      stats_.text_bytes += doc.text.size();
      const auto pieces = split_on_whitespace(doc.text, opt_.max_doc_bytes);
      for (size_t i = 0; i < pieces.size(); ++i) {
        batch->pieces.push_back({batch->text.size(), pieces[i].size(), i == 0, i + 1 == pieces.size()});
        batch->text.append(pieces[i]);
        if (batch->text.size() >= opt_.batch_bytes) {
          batch->file_bytes = reader_.file_bytes_read();
          if (!push(std::move(batch))) return;
          batch = new_batch();
        }
      }
    }
    batch->file_bytes = reader_.file_bytes_read();
    if (!batch->pieces.empty() && !push(std::move(batch))) return;
    all_produced();
  }

  void produce_blocks() {
    for (;;) {
      auto batch = new_batch();
      batch->is_block = true;
      if (!reader_.next_block(batch->block, opt_.batch_bytes)) break;
      batch->file_bytes = reader_.file_bytes_read();
      if (!push(std::move(batch))) return;
    }
    all_produced();
  }

  // Encoder thread, a line block: lines -> documents -> ids -> the shard's bytes.
  void encode_block(Batch& b, LineParser& parser, Document& doc, std::vector<uint32_t>& ids) {
    bool failed = false;
    for_each_line(b.block.bytes, [&](std::string_view line, size_t at, bool had_newline) {
      ++b.lines;
      if (failed || !parser.parse(line, had_newline, b.block.offset + at, doc)) return;
      if (!doc.error.empty()) {
        ++b.stats.bad;
        if (b.bad.size() < (opt_.on_error == OnError::kFail ? 1 : opt_.max_listed_errors)) {
          b.bad.push_back({b.lines, doc.error});
        }
        failed = opt_.on_error == OnError::kFail;
        return;
      }
      if (doc.text.empty()) {
        ++b.stats.empty;
        return;
      }
      b.stats.text_bytes += doc.text.size();
      ids.clear();
      if (opt_.bos) ids.push_back(static_cast<uint32_t>(encoder_.bos_id()));
      if (doc.text.size() <= opt_.max_doc_bytes) {
        encoder_.encode(doc.text, ids);
      } else {
        const auto pieces = split_on_whitespace(doc.text, opt_.max_doc_bytes);
        for (size_t i = 0; i < pieces.size(); ++i) {
          if (i == 0) encoder_.encode(pieces[i], ids);
          else encoder_.encode_continuation(pieces[i], ids);
        }
      }
      if (opt_.eos) ids.push_back(static_cast<uint32_t>(encoder_.eos_id()));
      sink_.serialize(ids.data(), ids.size(), b.out);
      ++b.stats.docs;
      b.stats.tokens += ids.size();
    });
  }

  // Writing thread, a line block: its bad records in input order, then its bytes.
  void write_block(const Batch& b) {
    for (const BadLine& bad : b.bad) report_bad(str(reader_.path(), ":", lines_before_ + bad.line, ": ", bad.error));
    if (!b.out.tokens.empty()) sink_.add_serialized(b.out);
    lines_before_ += b.lines;
    stats_.docs += b.stats.docs;
    stats_.tokens += b.stats.tokens;
    stats_.text_bytes += b.stats.text_bytes;
    stats_.bad += b.stats.bad;
    stats_.empty += b.stats.empty;
  }

  // Waits for room; false when the pipeline is stopping.
  bool push(std::unique_ptr<Batch> batch) {
    {
      std::unique_lock<std::mutex> lock(m_);
      room_cv_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
      if (stop_) return false;
      batch->seq = next_seq_++;
      ++in_flight_;
      todo_.push_back(std::move(batch));
    }
    work_cv_.notify_one();
    return true;
  }

  // Encoder thread; waited: seconds it had no batch to encode (start, reader behind, window full, end).
  void encode_loop(double& waited) {
    std::unique_ptr<LineParser> parser = blocks_ ? reader_.make_line_parser() : nullptr;
    Document doc;
    std::vector<uint32_t> ids;
    for (;;) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(m_);
        const auto ready = [&] { return stop_ || !todo_.empty() || produced_all_; };
        if (!ready()) {
          const Clock::time_point w0 = Clock::now();
          work_cv_.wait(lock, ready);
          waited += seconds_since(w0);
        }
        if (stop_ || todo_.empty()) return;
        batch = std::move(todo_.front());
        todo_.pop_front();
      }
      if (batch->is_block) encode_block(*batch, *parser, doc, ids);
      for (const Piece& p : batch->pieces) {
        const std::string_view text = std::string_view(batch->text).substr(p.begin, p.len);
        if (p.first) encoder_.encode(text, batch->ids);
        else encoder_.encode_continuation(text, batch->ids);
        batch->piece_ids_end.push_back(batch->ids.size());
      }
      bool next_to_write = false;
      {
        const double at = seconds_since(t0_);
        std::lock_guard<std::mutex> lock(m_);
        if (stats_.first_block_s == 0) stats_.first_block_s = at;
        stats_.last_block_s = std::max(stats_.last_block_s, at);
        next_to_write = batch->seq == write_seq_;
        done_[batch->seq % max_in_flight_] = std::move(batch);
      }
      if (next_to_write) done_cv_.notify_one();
    }
  }

  // Calling thread: batches in sequence order; a document may span batches.
  void write_loop(const std::function<void(uint64_t, uint64_t)>& on_progress) {
    std::vector<uint32_t> doc;
    for (uint64_t seq = 0;; ++seq) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(m_);
        write_seq_ = seq;
        std::unique_ptr<Batch>& slot = done_[seq % max_in_flight_];
        const auto ready = [&] { return stop_ || slot != nullptr || (produced_all_ && seq == next_seq_); };
        if (!ready()) {
          const Clock::time_point w0 = Clock::now();
          done_cv_.wait(lock, ready);
          stats_.write_wait_s += seconds_since(w0);
        }
        if (stop_) return;
        if (slot == nullptr) break;  // everything written
        batch = std::move(slot);
      }
      if (batch->is_block) write_block(*batch);
      size_t id_begin = 0;
      for (size_t i = 0; i < batch->pieces.size(); ++i) {
        const Piece& p = batch->pieces[i];
        if (p.first) {
          doc.clear();
          if (opt_.bos) doc.push_back(static_cast<uint32_t>(encoder_.bos_id()));
        }
        doc.insert(doc.end(), batch->ids.begin() + static_cast<ptrdiff_t>(id_begin),
                   batch->ids.begin() + static_cast<ptrdiff_t>(batch->piece_ids_end[i]));
        id_begin = batch->piece_ids_end[i];
        if (p.last) {
          if (opt_.eos) doc.push_back(static_cast<uint32_t>(encoder_.eos_id()));
          sink_.add_doc(doc.data(), doc.size());
          ++stats_.docs;
          stats_.tokens += doc.size();
        }
      }
      on_progress(batch->file_bytes, stats_.tokens);
      // Kept for reuse unless a huge document made its buffers much larger than a batch needs.
      const bool keep = batch->capacity_bytes() <= 8 * opt_.batch_bytes + (size_t{4} << 20);
      if (keep) batch->reset();
      else batch.reset();
      {
        std::lock_guard<std::mutex> lock(m_);
        --in_flight_;
        if (keep) free_.push_back(std::move(batch));
      }
      room_cv_.notify_one();
    }
  }

  DocumentReader& reader_;
  const SentencePieceModel& encoder_;
  ShardSink& sink_;
  PipelineOptions opt_;
  WorkerPool* pool_;  // runs the encoders when set
  const size_t max_in_flight_;
  const bool blocks_;           // the reader hands out line blocks
  uint64_t lines_before_ = 0;   // lines of the blocks written so far (writing thread)

  std::mutex m_;
  std::condition_variable work_cv_;  // encoders: a batch to encode, the end or stop
  std::condition_variable room_cv_;  // reader: fewer than max_in_flight_ batches in flight, or stop
  std::condition_variable done_cv_;  // writer: batch write_seq_ encoded, the end or stop
  std::deque<std::unique_ptr<Batch>> todo_;
  std::vector<std::unique_ptr<Batch>> done_;   // encoded batches by seq % max_in_flight_ (in flight: distinct)
  std::vector<std::unique_ptr<Batch>> free_;   // written batches, emptied, buffers kept
  uint64_t write_seq_ = 0;      // the batch the writer writes next
  const Clock::time_point t0_;
  uint64_t next_seq_ = 0;
  size_t in_flight_ = 0;
  bool produced_all_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  // Written by the reader thread (bad, empty, text_bytes, bad_examples) and the writer (docs,
  // tokens): disjoint fields, read after join. With line blocks the writer writes them all.
  FileStats stats_;
};

}  // namespace

WorkerPool::WorkerPool(unsigned threads) {
  LOOM_CHECK(threads >= 1, "--threads must be at least 1");
  threads_.reserve(threads);  // emplace_back then throws only std::system_error (caught below)
  try {
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  } catch (const std::system_error& e) {
    const size_t started = threads_.size();
    {
      std::lock_guard<std::mutex> lock(m_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    LOOM_FAIL("cannot start ", threads, " encoder threads (", e.what(), "; started ", started,
              "); try a smaller --threads");
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    quit_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::start(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(m_);
  LOOM_ASSERT(running_ == 0, "WorkerPool::start while a task runs");
  task_ = std::move(task);
  running_ = size();
  ++generation_;
  cv_.notify_all();
}

void WorkerPool::wait() {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return running_ == 0; });
}

void WorkerPool::loop() {
  uint64_t seen = 0;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      task = task_;
    }
    task();
    std::lock_guard<std::mutex> lock(m_);
    if (--running_ == 0) cv_.notify_all();
  }
}

FileStats tokenize_documents(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink,
                             const PipelineOptions& options,
                             const std::function<void(uint64_t, uint64_t)>& on_progress, WorkerPool* pool) {
  LOOM_CHECK(options.threads >= 1, "--threads must be at least 1");
  LOOM_CHECK(options.max_doc_bytes >= 64, "--max-doc-bytes must be at least 64, got ", options.max_doc_bytes);
  LOOM_ASSERT(!pool || pool->size() == options.threads, "a pool of ", pool->size(), " threads for ", options.threads);
  Pipeline p(reader, encoder, sink, options, pool);
  return p.run(on_progress);
}

}  // namespace loom::tokenize
