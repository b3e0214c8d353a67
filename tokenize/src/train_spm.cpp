#include "loom/tokenize/train_spm.h"

#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <system_error>
#include <unordered_map>

#include "loom/error.h"
#include "loom/fd.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "loom/tokenize/text.h"

namespace loom::tokenize {

namespace {

// SentencePiece's trainer writes hundreds of lines to stderr: while it runs, stderr (fd 2) goes to
// a log file instead, and comes back at the end of the scope on every path.
class StderrToFile {
 public:
  explicit StderrToFile(const std::string& path) {
    std::fflush(stderr);
    sys::Fd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    LOOM_CHECK(file.valid(), path, ": ", sys::errno_text("open", errno));
    saved_ = sys::Fd(::dup(STDERR_FILENO));
    LOOM_CHECK(saved_.valid(), "stderr: ", sys::errno_text("dup", errno));
    LOOM_CHECK(::dup2(file.get(), STDERR_FILENO) >= 0, "stderr: ", sys::errno_text("dup2", errno));
  }
  ~StderrToFile() {
    std::cerr.flush();
    std::fflush(stderr);
    ::dup2(saved_.get(), STDERR_FILENO);  // the original stderr: nothing useful to do if this fails
  }
  StderrToFile(const StderrToFile&) = delete;
  StderrToFile& operator=(const StderrToFile&) = delete;

 private:
  sys::Fd saved_;
};

// Documents of every input in order, cut under max_sentence_length (SentencePiece drops longer
// sentences). An exception cannot cross the trainer, so it is kept and rethrown after Train().
class DocumentIterator : public sentencepiece::SentenceIterator {
 public:
  DocumentIterator(const TrainSpmOptions& opt, TrainSpmSummary& sum) : opt_(opt), sum_(sum) { Next(); }

  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (!error_) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, "loom: reading the inputs failed");
  }
  void Next() override {
    try {
      done_ = !advance();
    } catch (...) {
      error_ = std::current_exception();
      done_ = true;
    }
  }
  std::exception_ptr error() const { return error_; }
  // Warnings found while stderr went to the log file: logged after.
  const std::vector<std::string>& held_warnings() const { return held_warnings_; }

 private:
  bool advance() {
    for (;;) {
      if (piece_ < pieces_.size()) {
        value_.assign(pieces_[piece_++]);
        return true;
      }
      if (!reader_) {
        if (input_ == opt_.inputs.size()) return false;
        reader_ = make_document_reader(opt_.inputs[input_++], opt_.reader);
      }
      if (!reader_->next(doc_)) {
        reader_.reset();
        continue;
      }
      if (!doc_.error.empty()) {
        const std::string msg = location(reader_->path(), doc_) + doc_.error;
        if (opt_.on_error == OnError::kFail) LOOM_FAIL(msg, " (--on-error skip would skip this record)");
        if (sum_.bad++ < 10) held_warnings_.push_back("skipped " + msg);
        continue;
      }
      if (doc_.text.empty()) continue;
      ++sum_.docs;
      sum_.bytes += doc_.text.size();
      pieces_ = split_on_whitespace(doc_.text, opt_.max_sentence_length);
      piece_ = 0;
    }
  }

  const TrainSpmOptions& opt_;
  TrainSpmSummary& sum_;
  size_t input_ = 0;
  std::unique_ptr<DocumentReader> reader_;
  Document doc_;
  std::vector<std::string_view> pieces_;
  size_t piece_ = 0;
  std::string value_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::string> held_warnings_;
};

}  // namespace

TrainSpmSummary run_train_spm(const TrainSpmOptions& opt) {
  LOOM_CHECK(!opt.inputs.empty(), "no INPUT files given");
  LOOM_CHECK(opt.vocab_size > 0, "--vocab-size is required (a positive number)");
  LOOM_CHECK(!opt.model_prefix.empty(), "--model-prefix is required");
  LOOM_CHECK(opt.max_sentence_length >= 64, "--max-sentence-length must be at least 64");
  for (const std::string& in : opt.inputs) {
    input_format_for(in);
    LOOM_CHECK(sys::exists(in) && !sys::is_directory(in), in, ": no such input file");
  }
  // The model and SentencePiece's log are written over: neither may be an input.
  sys::check_outputs_spare_inputs(opt.inputs, {opt.model_prefix + ".model", opt.model_prefix + ".train.log"});
  const std::string dir = sys::dirname(opt.model_prefix);
  if (!dir.empty() && dir != ".") sys::make_dirs(dir);

  TrainSpmSummary sum;
  sum.model_path = opt.model_prefix + ".model";
  // Trainer flags by name (the map API needs no protobuf headers). Unset ones keep SentencePiece's
  // defaults; the files it would write itself are not written because the model comes back serialized.
  const std::unordered_map<std::string, std::string> kwargs = {
      {"vocab_size", std::to_string(opt.vocab_size)},
      {"model_type", opt.model_type},
      {"character_coverage", std::to_string(opt.character_coverage)},
      {"normalization_rule_name", opt.normalization},
      {"byte_fallback", opt.byte_fallback ? "true" : "false"},
      {"max_sentence_length", std::to_string(opt.max_sentence_length)},
      {"input_sentence_size", std::to_string(opt.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(opt.threads)},
  };
  const std::string train_log = opt.model_prefix + ".train.log";
  log::info("training the SentencePiece model; its own log goes to ", train_log);
  std::string serialized;
  sentencepiece::util::Status status;
  std::exception_ptr error;
  std::vector<std::string> warnings;
  {
    StderrToFile quiet(train_log);
    DocumentIterator it(opt, sum);
    try {
      status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &serialized);
    } catch (const std::system_error& e) {
      // SentencePiece starts --threads threads of its own; the system may refuse them.
      error = std::make_exception_ptr(
          Error(str("SentencePiece training could not start its threads (", e.what(), "); try a smaller --threads")));
    }
    if (!error) error = it.error();
    warnings = it.held_warnings();
  }
  for (const std::string& w : warnings) log::warn(w);
  if (error) {
    sys::remove_file(train_log);  // loom's own error (the inputs, the threads): the log has nothing on it
    std::rethrow_exception(error);
  }
  LOOM_CHECK(status.ok(), "SentencePiece training failed: ", status.ToString(), " (its log: ", train_log, ")");
  LOOM_CHECK(sum.docs > 0, "no documents to train on");
  sys::AtomicFile out(sum.model_path);
  out.write(serialized);
  out.commit();
  return sum;
}

}  // namespace loom::tokenize
