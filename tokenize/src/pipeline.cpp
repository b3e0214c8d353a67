#include "loom/tokenize/pipeline.h"

#include <time.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
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
};

class Pipeline {
 public:
  Pipeline(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink, const PipelineOptions& options,
           WorkerPool* pool)
      : reader_(reader), encoder_(encoder), sink_(sink), opt_(options), pool_(pool),
        max_in_flight_(4 * static_cast<size_t>(options.threads)), blocks_(reader.make_line_parser() != nullptr) {}

  FileStats run(const std::function<void(uint64_t, uint64_t)>& on_progress) {
    std::vector<std::thread> threads;
    try {
      threads.emplace_back([this] {
        guarded([this] { produce(); });
        stats_.read_cpu_s = thread_cpu_s();
      });
      auto encoder = [this] {
        const double cpu0 = thread_cpu_s();
        guarded([this] { encode_loop(); });
        const double cpu = thread_cpu_s() - cpu0;
        std::lock_guard<std::mutex> lock(m_);
        stats_.encode_cpu_s += cpu;
      };
      if (pool_) pool_->start(encoder);
      for (unsigned i = 0; !pool_ && i < opt_.threads; ++i) threads.emplace_back(encoder);
    } catch (const std::system_error& e) {
      // The system refused a thread (limits, memory): stop and join the ones already running.
      {
        std::lock_guard<std::mutex> lock(m_);
        stop_ = true;
      }
      cv_.notify_all();
      for (auto& t : threads) t.join();
      LOOM_FAIL("cannot start ", opt_.threads + 1, " threads (", e.what(), "; started ", threads.size(),
                "); try a smaller --threads");
    }
    const double cpu0 = thread_cpu_s();
    guarded([&] { write_loop(on_progress); });
    stats_.write_cpu_s = thread_cpu_s() - cpu0;
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
    if (pool_) pool_->wait();
    if (error_) std::rethrow_exception(error_);
    return stats_;
  }

 private:
  template <typename F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!error_) error_ = std::current_exception();
      stop_ = true;
      cv_.notify_all();
    }
  }

  // Reader thread: documents -> pieces -> batches, in order; for line readers, blocks of whole lines.
  void produce() {
    if (blocks_) return produce_blocks();
    auto batch = std::make_unique<Batch>();
    Document doc;
    while (reader_.next(doc)) {
      if (!doc.error.empty()) {
        const std::string msg = location(reader_.path(), doc) + doc.error;
        if (opt_.on_error == OnError::kFail) {
          LOOM_FAIL(msg, " (--on-error fail stops here; --on-error skip would skip this record)");
        }
        ++stats_.bad;
        if (stats_.bad_examples.size() < opt_.max_listed_errors) stats_.bad_examples.push_back(msg);
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
          batch = std::make_unique<Batch>();
        }
      }
    }
    batch->file_bytes = reader_.file_bytes_read();
    if (!batch->pieces.empty() && !push(std::move(batch))) return;
    std::lock_guard<std::mutex> lock(m_);
    produced_all_ = true;
    cv_.notify_all();
  }

  void produce_blocks() {
    for (;;) {
      auto batch = std::make_unique<Batch>();
      batch->is_block = true;
      if (!reader_.next_block(batch->block, opt_.batch_bytes)) break;
      batch->file_bytes = reader_.file_bytes_read();
      if (!push(std::move(batch))) return;
    }
    std::lock_guard<std::mutex> lock(m_);
    produced_all_ = true;
    cv_.notify_all();
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
    std::string().swap(b.block.bytes);  // the text is no longer needed while the batch waits
  }

  // Writing thread, a line block: its bad records in input order, then its bytes.
  void write_block(const Batch& b) {
    for (const BadLine& bad : b.bad) {
      const std::string msg = str(reader_.path(), ":", lines_before_ + bad.line, ": ", bad.error);
      if (opt_.on_error == OnError::kFail) {
        LOOM_FAIL(msg, " (--on-error fail stops here; --on-error skip would skip this record)");
      }
      if (stats_.bad_examples.size() < opt_.max_listed_errors) stats_.bad_examples.push_back(msg);
    }
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
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
    if (stop_) return false;
    batch->seq = next_seq_++;
    ++in_flight_;
    todo_.push_back(std::move(batch));
    cv_.notify_all();
    return true;
  }

  void encode_loop() {
    std::unique_ptr<LineParser> parser = blocks_ ? reader_.make_line_parser() : nullptr;
    Document doc;
    std::vector<uint32_t> ids;
    for (;;) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || !todo_.empty() || produced_all_; });
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
      std::lock_guard<std::mutex> lock(m_);
      done_[batch->seq] = std::move(batch);
      cv_.notify_all();
    }
  }

  // Calling thread: batches in sequence order; a document may span batches.
  void write_loop(const std::function<void(uint64_t, uint64_t)>& on_progress) {
    std::vector<uint32_t> doc;
    for (uint64_t seq = 0;; ++seq) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || done_.count(seq) > 0 || (produced_all_ && seq == next_seq_); });
        if (stop_) return;
        if (done_.count(seq) == 0) break;  // everything written
        batch = std::move(done_[seq]);
        done_.erase(seq);
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
      {
        std::lock_guard<std::mutex> lock(m_);
        --in_flight_;
      }
      cv_.notify_all();
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
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Batch>> todo_;
  std::map<uint64_t, std::unique_ptr<Batch>> done_;
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
