// The parallel encode of one input: a reader thread cuts documents into pieces (very long documents
// on whitespace under max_doc_bytes) and packs them into batches of about batch_bytes; N encoder
// threads encode batches; the calling thread writes them in input order, so the output is the same
// for any thread count. At most 4*N batches are in flight: memory stays flat however large the input.
// Line readers (txt --txt-doc line, jsonl) leave more to the encoder threads: the reader thread only
// cuts the decompressed input into blocks of about batch_bytes of whole lines; each encoder thread
// splits its block into lines, parses them (UTF-8 check and strip, or JSON), encodes the documents
// and serializes them as the shard stores them (ShardSink::serialize); the calling thread appends
// the bytes and reports bad records, numbered by the lines of the blocks before.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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

struct PipelineOptions {
  unsigned threads = 1;
  size_t max_doc_bytes = 1 << 20;
  size_t batch_bytes = 64 << 10;
  bool bos = true, eos = true;
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
};

// on_progress(file bytes consumed, tokens written so far) is called from the calling thread.
FileStats tokenize_documents(DocumentReader& reader, const SentencePieceModel& encoder, ShardSink& sink,
                             const PipelineOptions& options,
                             const std::function<void(uint64_t, uint64_t)>& on_progress);

}  // namespace loom::tokenize
