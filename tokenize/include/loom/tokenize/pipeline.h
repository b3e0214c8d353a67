// The parallel encode of one input: a reader thread cuts documents into pieces (very long documents
// on whitespace under max_doc_bytes) and packs them into batches of about batch_bytes; N encoder
// threads encode batches; the calling thread writes them in input order, so the output is the same
// for any thread count. At most 4*N to 16*N batches are in flight (16*N while they hold under 16 MiB
// of text), and written batches are reused with their buffers: memory stays flat however large the
// input, and the steady state allocates nothing per batch. Each thread hands back its finished
// batch and takes the next in one hold of the lock; the reader, once the window is full, waits for
// an eighth of it and refills that much, and the writer, once it waits, waits for a run of up to 8
// encoded batches: few wake-ups, each of which takes a core from an encoder when all are busy.
// Line readers (txt --txt-doc line, jsonl) leave more to the encoder threads: the reader thread only
// cuts the decompressed input into blocks of about batch_bytes of whole lines; each encoder thread
// splits its block into lines, parses them (UTF-8 check and strip, or JSON), encodes the documents
// and serializes them as the shard stores them (ShardSink::serialize); the calling thread appends
// the bytes and reports bad records, numbered by the lines of the blocks before. loom-tokenize runs
// the encoders of every input on one WorkerPool (below).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loom/spm/sentencepiece_model.h"
#include "loom/tokenize/document_reader.h"
#include "loom/tokenize/shard_sink.h"

namespace loom::tokenize {

enum class OnError { kFail, kSkip };

// How documents longer than max_doc_bytes are cut and their pieces encoded, as a number recorded in
// a shard's settings (tokenize_job.h's settings_text): a change that changes the ids bumps it, so
// --resume writes shards made the old way again.
inline constexpr int kCutRule = 2;  // 2: pieces after the first without the dummy prefix

// Strings that stand for one id each wherever they occur in a text (Megatron's
// SentencePieceTokenizer, loom/tokenize/megatron_tokenizer.h), in the order that breaks ties.
using SpecialPieces = std::vector<std::pair<std::string, uint32_t>>;

struct PipelineOptions {
  unsigned threads = 1;
  size_t max_doc_bytes = 1 << 20;
  size_t batch_bytes = 64 << 10;
  bool bos = true, eos = true;
  // The ids bos/eos put around a document; -1: the model's. Megatron's tokenizer types set them
  // and the three rules below (apply_megatron_rules); the defaults are loom's.
  int64_t bos_id = -1, eos_id = -1;
  bool eos_after_ids_only = false;  // eos only after a document that has ids (Megatron's --append-eod)
  bool keep_empty = false;          // an empty text is a document (of bos alone, or of no id), not skipped
  SpecialPieces specials;           // non-empty: encoded by encode_with_specials
  OnError on_error = OnError::kFail;
  size_t max_listed_errors = 10;
};

struct FileStats {
  uint64_t docs = 0, tokens = 0;
  uint64_t text_bytes = 0;      // bytes of document text encoded
  uint64_t bad = 0;             // bad records skipped (--on-error skip)
  uint64_t empty = 0;           // json/jsonl records whose text is "" (not written)
  std::vector<std::string> bad_examples;  // "FILE:LINE: what", the first max_listed_errors
  // CPU seconds of the pipeline's threads: the reading thread, the writing (calling) thread and the
  // encoder threads together. The first two run alone, so they bound the speed-up of more threads.
  double read_cpu_s = 0, write_cpu_s = 0, encode_cpu_s = 0;
  // Where the wall time went, in seconds from the start of the input's pipeline: when the first and
  // the last batch were encoded, the whole (wall_s); how long the encoder threads together had no
  // batch to encode (start, reader behind, window full, end) and the writer waited for the next one.
  double first_block_s = 0, last_block_s = 0, wall_s = 0, encode_wait_s = 0, write_wait_s = 0;
};

// Encoder threads that outlive one input: loom's encoder keeps its chunk cache per thread, so inputs
// after the first start with warm caches and no thread start-up (many small inputs).
class WorkerPool {
 public:
  // Throws loom::Error when the system refuses a thread.
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  unsigned size() const { return static_cast<unsigned>(threads_.size()); }
  // Runs task once on every thread of the pool, in the background; wait() returns when all have
  // returned. task must not throw. One task at a time.
  void start(std::function<void()> task);
  void wait();

 private:
  void loop();
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::function<void()> task_;
  uint64_t generation_ = 0;
  unsigned running_ = 0;
  bool quit_ = false;
};

// on_progress(file bytes consumed, tokens written so far) is called from the calling thread. With a
// pool (of options.threads threads) the encoders run on it; else the pipeline starts its own.
FileStats tokenize_documents(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink,
                             const PipelineOptions& options,
                             const std::function<void(uint64_t, uint64_t)>& on_progress, WorkerPool* pool = nullptr);

}  // namespace loom::tokenize
