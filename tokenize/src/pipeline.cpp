#include "loom/tokenize/pipeline.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "loom/error.h"
#include "loom/tokenize/text.h"

namespace loom::tokenize {

namespace {

// A piece of a document: text[begin, begin+len) of its batch.
struct Piece {
  size_t begin, len;
  bool first, last;  // first/last piece of its document (bos/eos go around the whole document)
};

struct Batch {
  uint64_t seq = 0;
  std::string text;
  std::vector<Piece> pieces;
  uint64_t file_bytes = 0;      // input consumed when the batch was cut
  std::vector<uint32_t> ids;    // filled by an encoder: every piece's ids back to back
  std::vector<size_t> piece_ids_end;
};

class Pipeline {
 public:
  Pipeline(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink, const PipelineOptions& options)
      : reader_(reader), encoder_(encoder), sink_(sink), opt_(options),
        max_in_flight_(4 * static_cast<size_t>(options.threads)) {}

  FileStats run(const std::function<void(uint64_t, uint64_t)>& on_progress) {
    std::vector<std::thread> threads;
    try {
      threads.emplace_back([this] { guarded([this] { produce(); }); });
      for (unsigned i = 0; i < opt_.threads; ++i) threads.emplace_back([this] { guarded([this] { encode_loop(); }); });
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
    guarded([&] { write_loop(on_progress); });
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
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

  // Reader thread: documents -> pieces -> batches, in order.
  void produce() {
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
    for (;;) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || !todo_.empty() || produced_all_; });
        if (stop_ || todo_.empty()) return;
        batch = std::move(todo_.front());
        todo_.pop_front();
      }
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
  const size_t max_in_flight_;

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
  // tokens): disjoint fields, read after join.
  FileStats stats_;
};

}  // namespace

FileStats tokenize_documents(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink,
                             const PipelineOptions& options,
                             const std::function<void(uint64_t, uint64_t)>& on_progress) {
  LOOM_CHECK(options.threads >= 1, "--threads must be at least 1");
  LOOM_CHECK(options.max_doc_bytes >= 64, "--max-doc-bytes must be at least 64, got ", options.max_doc_bytes);
  Pipeline p(reader, encoder, sink, options);
  return p.run(on_progress);
}

}  // namespace loom::tokenize
