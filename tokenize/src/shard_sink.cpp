#include "loom/tokenize/shard_sink.h"

#include "loom/error.h"
#include "loom/internlm_format.h"
#include "loom/sys.h"

namespace loom::tokenize {

namespace {

// A format's writer behind the ShardSink interface.
template <typename Writer>
class WriterSink : public ShardSink {
 public:
  template <typename... Args>
  explicit WriterSink(const Args&... args) : w_(args...) {}
  void add_doc(const uint32_t* ids, size_t n) override { w_.add_doc(ids, n); }
  uint64_t num_docs() const override { return w_.num_docs(); }
  void commit() override { w_.commit(); }

 private:
  Writer w_;
};

}  // namespace

const char* shard_format_name(ShardFormat f) { return f == ShardFormat::kLoom ? "loom" : "internlm"; }

std::unique_ptr<ShardSink> make_shard_sink(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info,
                                           uint32_t encoder) {
  if (format == ShardFormat::kLoom) return std::make_unique<WriterSink<ShardWriter>>(bin_path, info, encoder);
  return std::make_unique<WriterSink<InternlmWriter>>(bin_path);
}

bool shard_complete(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info, std::string& why_not) {
  if (!sys::exists(meta_path_for(bin_path)) || !sys::exists(bin_path)) {
    why_not = "no complete shard";
    return false;
  }
  try {
    if (format == ShardFormat::kInternlm) {
      InternlmReader r(bin_path);
      return true;
    }
    ShardReader r(bin_path);
    if (r.header().model_fingerprint != info.model_fingerprint) {
      why_not = "it was written with another model";
      return false;
    }
    if (r.header().flags != info.flags) {
      why_not = "it was written with other --bos/--eos settings";
      return false;
    }
    return true;
  } catch (const Error& e) {
    why_not = e.what();
    return false;
  }
}

}  // namespace loom::tokenize
