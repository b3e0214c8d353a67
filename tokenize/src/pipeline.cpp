#include "loom/tokenize/pipeline.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "loom/error.h"
#include "loom/tokenize/line_reader.h"
#include "loom/tokenize/megatron_tokenizer.h"
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

// A thread about to wait on the pipeline's lock first delivers the wake-up it owes (`wake`), with
// the lock released so that the woken thread does not block on it at once.
void wake_before_sleeping(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, bool& wake) {
  if (!wake) return;
  lock.unlock();
  cv.notify_one();
  wake = false;
  lock.lock();
}

// A piece of a document: text[begin, begin+len) of its batch.
// One piece of a document's text, encoded as options say (the first piece, or a continuation).
void encode_piece(const SentencePieceModel& encoder, const PipelineOptions& o, std::string_view text, bool first,
                  std::vector<uint32_t>& out) {
  if (!o.specials.empty()) encode_with_specials(encoder, o.specials, text, !first, out);
  else if (first) encoder.encode(text, out);
  else encoder.encode_continuation(text, out);
}
// What goes before a document's ids and after them (ids: the document so far, bos included).
void begin_doc(const SentencePieceModel& encoder, const PipelineOptions& o, std::vector<uint32_t>& ids) {
  if (o.bos) ids.push_back(static_cast<uint32_t>(o.bos_id >= 0 ? o.bos_id : encoder.bos_id()));
}
void end_doc(const SentencePieceModel& encoder, const PipelineOptions& o, std::vector<uint32_t>& ids) {
  if (o.eos && !(o.eos_after_ids_only && ids.empty()))
    ids.push_back(static_cast<uint32_t>(o.eos_id >= 0 ? o.eos_id : encoder.eos_id()));
}

struct Piece {
  size_t begin, len;
  bool first, last;  // first/last piece of its document (bos/eos go around the whole document)
};

// A bad record of a line block: its first line (1-based, within the block) and what was wrong.
struct BadLine {
  uint64_t line;
  std::string error;
};

// Work for an encoder: pieces of documents the reading thread cut (text, pieces), or a block of whole
// lines no document spans (block) that the encoder itself turns into documents and serializes (out).
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

class alignas(64) Pipeline {
 public:
  Pipeline(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink, const PipelineOptions& options,
           WorkerPool* pool)
      : reader_(reader), encoder_(encoder), sink_(sink), opt_(options), pool_(pool),
        max_in_flight_(batches_in_flight(options)), refill_(std::max<size_t>(1, max_in_flight_ / 8)),
        write_run_(std::min<size_t>(8, max_in_flight_ / 4)),
        blocks_(reader.make_line_parser() != nullptr), t0_(Clock::now()), done_(max_in_flight_) {}

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
    stats_.first_block_s = first_block_s_;
    stats_.last_block_s = last_block_s_;
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
    auto batch = std::make_unique<Batch>();
    Document doc;
    while (reader_.next(doc)) {
      if (!doc.error.empty()) {
        report_bad(location(reader_.path(), doc) + doc.error);
        ++stats_.bad;
        continue;
      }
      if (doc.text.empty() && !opt_.keep_empty) {
        ++stats_.empty;
        continue;
      }
      stats_.text_bytes += doc.text.size();
      auto pieces = split_on_whitespace(doc.text, opt_.max_doc_bytes);
      if (pieces.empty()) pieces.emplace_back();  // an empty text kept as a document
      for (size_t i = 0; i < pieces.size(); ++i) {
        batch->pieces.push_back({batch->text.size(), pieces[i].size(), i == 0, i + 1 == pieces.size()});
        batch->text.append(pieces[i]);
        if (batch->text.size() >= opt_.batch_bytes) {
          batch->file_bytes = reader_.file_bytes_read();
          if (!push(batch)) return;
        }
      }
    }
    batch->file_bytes = reader_.file_bytes_read();
    if (!batch->pieces.empty() && !push(batch)) return;
    all_produced();
  }

  void produce_blocks() {
    auto batch = std::make_unique<Batch>();
    for (;;) {
      batch->is_block = true;
      if (!reader_.next_block(batch->block, opt_.batch_bytes)) break;
      batch->file_bytes = reader_.file_bytes_read();
      if (!push(batch)) return;
    }
    all_produced();
  }

  // What an encoder thread reads for every document, copied onto its own stack: the Pipeline lives
  // on the writing thread's stack beside data that thread writes all the time, and a cache line
  // shared with a writer would be fetched again by every encoder after each of its writes.
  struct EncoderView {
    const SentencePieceModel& encoder;
    const ShardSink& sink;
    const PipelineOptions opt;
  };

  // Encoder thread, a line block: lines -> documents -> ids -> the shard's bytes.
  void encode_block(const EncoderView& v, Batch& b, LineParser& parser, Document& doc, std::vector<uint32_t>& ids) {
    const PipelineOptions& opt = v.opt;
    bool failed = false;
    const auto take = [&] {
      if (!doc.error.empty()) {
        ++b.stats.bad;
        if (b.bad.size() < (opt.on_error == OnError::kFail ? 1 : opt.max_listed_errors)) {
          b.bad.push_back({doc.line, doc.error});
        }
        failed = opt.on_error == OnError::kFail;
        return;
      }
      if (doc.text.empty() && !opt.keep_empty) {
        ++b.stats.empty;
        return;
      }
      b.stats.text_bytes += doc.text.size();
      ids.clear();
      begin_doc(v.encoder, opt, ids);
      if (doc.text.size() <= opt.max_doc_bytes) {
        encode_piece(v.encoder, opt, doc.text, true, ids);
      } else {
        const auto pieces = split_on_whitespace(doc.text, opt.max_doc_bytes);
        for (size_t i = 0; i < pieces.size(); ++i) encode_piece(v.encoder, opt, pieces[i], i == 0, ids);
      }
      end_doc(v.encoder, opt, ids);
      v.sink.serialize(ids.data(), ids.size(), b.out);
      ++b.stats.docs;
      b.stats.tokens += ids.size();
    };
    for_each_line(b.block.bytes, [&](std::string_view line, size_t at, bool had_newline) {
      ++b.lines;
      if (failed || !parser.parse(line, had_newline, b.block.offset + at, b.lines, doc)) return;
      take();
    });
    // Called even after a failure, so that the parser starts the next block empty.
    if (parser.finish(doc) && !failed) take();
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

  // Queues batch for the encoders and leaves an empty one in its place (a written one with its
  // buffers, or a new one), in one hold of the lock; false when the pipeline is stopping. When the
  // window is full the reader sleeps until refill_ batches have been written, then cuts that many
  // in one go: one wake-up per refill_ batches, not one per batch (each wake-up takes a core from
  // an encoder when all are busy).
  bool push(std::unique_ptr<Batch>& batch) {
    {
      std::unique_lock<std::mutex> lock(m_);
      if (!stop_ && in_flight_ >= max_in_flight_) {
        reader_waiting_ = true;
        room_cv_.wait(lock, [&] { return stop_ || in_flight_ + refill_ <= max_in_flight_; });
        reader_waiting_ = false;
      }
      if (stop_) return false;
      batch->seq = next_seq_++;
      ++in_flight_;
      todo_.push_back(std::move(batch));
      if (!free_.empty()) {
        batch = std::move(free_.back());
        free_.pop_back();
      }
    }
    work_cv_.notify_one();
    if (!batch) batch = std::make_unique<Batch>();
    return true;
  }

  // Under m_: whether the writer, waiting for batch write_seq_, may go on: that batch and the
  // write_run_ - 1 after it are encoded, or the input has ended and every batch left is (or none
  // is left), or the pipeline stops. Waking the writer for a run of batches, not for each, saves
  // wake-ups as refill_ does for the reader.
  bool writer_may_go() const {
    if (stop_) return true;
    uint64_t end = write_seq_ + write_run_;
    if (produced_all_) end = std::min(end, next_seq_);
    if (write_seq_ >= end) return produced_all_;
    for (uint64_t s = write_seq_; s < end; ++s) {
      if (done_[s % max_in_flight_] == nullptr) return false;
    }
    return true;
  }

  // Encoder thread; waited: seconds it had no batch to encode (start, reader behind, window full,
  // end). Each hold of the lock hands back the batch just encoded and takes the next.
  void encode_loop(double& waited) {
    const EncoderView v{encoder_, sink_, opt_};
    std::unique_ptr<LineParser> parser = blocks_ ? reader_.make_line_parser() : nullptr;
    Document doc;
    std::vector<uint32_t> ids;
    std::unique_ptr<Batch> batch;  // encoded, not yet handed back
    double encoded_at = 0;
    for (;;) {
      bool wake_writer = false;
      {
        std::unique_lock<std::mutex> lock(m_);
        if (batch) {
          if (first_block_s_ == 0) first_block_s_ = encoded_at;
          last_block_s_ = std::max(last_block_s_, encoded_at);
          done_[batch->seq % max_in_flight_] = std::move(batch);
          wake_writer = writer_waiting_ && writer_may_go();
        }
        const auto ready = [&] { return stop_ || !todo_.empty() || produced_all_; };
        if (!ready()) {
          wake_before_sleeping(lock, done_cv_, wake_writer);
          const Clock::time_point w0 = Clock::now();
          work_cv_.wait(lock, ready);
          waited += seconds_since(w0);
        }
        if (!stop_ && !todo_.empty()) {
          batch = std::move(todo_.front());
          todo_.pop_front();
        }
      }
      if (wake_writer) done_cv_.notify_one();
      if (!batch) return;  // stop, or nothing left
      if (batch->is_block) encode_block(v, *batch, *parser, doc, ids);
      for (const Piece& p : batch->pieces) {
        const std::string_view text = std::string_view(batch->text).substr(p.begin, p.len);
        encode_piece(v.encoder, v.opt, text, p.first, batch->ids);
        batch->piece_ids_end.push_back(batch->ids.size());
      }
      encoded_at = seconds_since(t0_);
    }
  }

  // Calling thread: batches in sequence order; a document may span batches. Each hold of the lock
  // hands back the batch just written (emptied, for reuse) and takes the next.
  void write_loop(const std::function<void(uint64_t, uint64_t)>& on_progress) {
    std::vector<uint32_t> doc;
    std::unique_ptr<Batch> written;
    bool written_back = false;  // a batch was written (written holds it unless it was too large to keep)
    for (uint64_t seq = 0;; ++seq) {
      std::unique_ptr<Batch> batch;
      bool wake_reader = false;
      {
        std::unique_lock<std::mutex> lock(m_);
        if (written_back) {
          --in_flight_;
          if (written) free_.push_back(std::move(written));
          wake_reader = reader_waiting_ && in_flight_ + refill_ <= max_in_flight_;
          written_back = false;
        }
        write_seq_ = seq;
        std::unique_ptr<Batch>& slot = done_[seq % max_in_flight_];
        if (!stop_ && slot == nullptr && !(produced_all_ && seq == next_seq_)) {
          wake_before_sleeping(lock, room_cv_, wake_reader);
          const Clock::time_point w0 = Clock::now();
          writer_waiting_ = true;
          done_cv_.wait(lock, [&] { return writer_may_go(); });
          writer_waiting_ = false;
          stats_.write_wait_s += seconds_since(w0);
        }
        if (!stop_) batch = std::move(slot);
      }
      if (wake_reader) room_cv_.notify_one();
      if (!batch) return;  // stop, or everything written
      if (batch->is_block) write_block(*batch);
      size_t id_begin = 0;
      for (size_t i = 0; i < batch->pieces.size(); ++i) {
        const Piece& p = batch->pieces[i];
        if (p.first) {
          doc.clear();
          begin_doc(encoder_, opt_, doc);
        }
        doc.insert(doc.end(), batch->ids.begin() + static_cast<ptrdiff_t>(id_begin),
                   batch->ids.begin() + static_cast<ptrdiff_t>(batch->piece_ids_end[i]));
        id_begin = batch->piece_ids_end[i];
        if (p.last) {
          end_doc(encoder_, opt_, doc);
          sink_.add_doc(doc.data(), doc.size());
          ++stats_.docs;
          stats_.tokens += doc.size();
        }
      }
      on_progress(batch->file_bytes, stats_.tokens);
      // Kept for reuse unless a huge document made its buffers much larger than a batch needs.
      if (batch->capacity_bytes() <= 8 * opt_.batch_bytes + (size_t{4} << 20)) {
        batch->reset();
        written = std::move(batch);
      } else {
        batch.reset();
      }
      written_back = true;
    }
  }

  // Set by the constructor, then only read.
  DocumentReader& reader_;
  const SentencePieceModel& encoder_;
  ShardSink& sink_;
  const PipelineOptions opt_;
  WorkerPool* const pool_;  // runs the encoders when set
  const size_t max_in_flight_;
  const size_t refill_;         // the reader, once the window is full, waits for this much room
  const size_t write_run_;      // the writer, once it waits, waits for this many batches in a row
  const bool blocks_;           // the reader hands out line blocks
  const Clock::time_point t0_;

  // Shared, under m_; on cache lines of their own (alignas), apart from the fields above.
  alignas(64) std::mutex m_;
  std::condition_variable work_cv_;  // encoders: a batch to encode, the end or stop
  std::condition_variable room_cv_;  // reader: room for refill_ batches, or stop
  std::condition_variable done_cv_;  // writer: writer_may_go()
  std::deque<std::unique_ptr<Batch>> todo_;
  std::vector<std::unique_ptr<Batch>> done_;   // encoded batches by seq % max_in_flight_ (in flight: distinct)
  std::vector<std::unique_ptr<Batch>> free_;   // written batches, emptied, buffers kept (the reader's next)
  uint64_t write_seq_ = 0;      // the batch the writer writes next
  uint64_t next_seq_ = 0;
  size_t in_flight_ = 0;
  bool reader_waiting_ = false; // the reader waits for room (see push)
  bool writer_waiting_ = false; // the writer waits for a run of batches (see writer_may_go)
  bool produced_all_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  double first_block_s_ = 0, last_block_s_ = 0;  // when the first and the last batch were encoded

  alignas(64) uint64_t lines_before_ = 0;   // lines of the blocks written so far (writing thread)
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
