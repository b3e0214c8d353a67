#include "loom/tokenize/shard_sink.h"

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/internlm_format.h"
#include "loom/sys.h"

namespace loom::tokenize {

namespace {

// A loom shard: ids as the dtype of the vocabulary (uint16 up to 65536 pieces, else uint32).
class LoomSink : public ShardSink {
 public:
  LoomSink(const std::string& bin_path, const TokenizerInfo& info, uint32_t encoder, uint64_t settings_xxh64)
      : w_(bin_path, info, encoder, settings_xxh64) {}
  void add_doc(const uint32_t* ids, size_t n) override { w_.add_doc(ids, n); }
  void serialize(const uint32_t* ids, size_t n, SerializedDocs& out) const override {
    const size_t at = out.bytes.size();
    w_.format_doc(ids, n, out.bytes);
    out.tokens.push_back(n);
    out.lengths.push_back(out.bytes.size() - at);
  }
  void add_serialized(const SerializedDocs& d) override {
    w_.add_docs_raw(reinterpret_cast<const uint8_t*>(d.bytes.data()), d.tokens.data(), d.tokens.size());
  }
  uint64_t num_docs() const override { return w_.num_docs(); }
  void commit() override { w_.commit(); }

 private:
  ShardWriter w_;
};

constexpr const char* kInternlmRecordMagic = "loom-tokenize internlm record 1";

std::string internlm_record(uint64_t settings_xxh64, const std::string& bin_path) {
  return str(kInternlmRecordMagic, "\nsettings_xxh64 ", hex64(settings_xxh64), "\nbin_xxh64 ", hex64(xxh64_file(bin_path)),
             "\nmeta_xxh64 ", hex64(xxh64_file(meta_path_for(bin_path))), "\n");
}

// InternLM's pair, then its sidecar record (after the pair: a job killed in between leaves a pair
// without a matching record, which --resume writes again).
class InternlmSink : public ShardSink {
 public:
  InternlmSink(const std::string& bin_path, uint64_t settings_xxh64)
      : bin_path_(bin_path), settings_xxh64_(settings_xxh64), w_(bin_path) {}
  void add_doc(const uint32_t* ids, size_t n) override { w_.add_doc(ids, n); }
  void serialize(const uint32_t* ids, size_t n, SerializedDocs& out) const override {
    const size_t at = out.bytes.size();
    InternlmWriter::format_doc(ids, n, out.bytes);
    out.tokens.push_back(n);
    out.lengths.push_back(out.bytes.size() - at);
  }
  void add_serialized(const SerializedDocs& d) override {
    w_.add_formatted(d.bytes.data(), d.tokens.data(), d.lengths.data(), d.tokens.size());
  }
  uint64_t num_docs() const override { return w_.num_docs(); }
  void commit() override {
    w_.commit();
    sys::AtomicFile record(internlm_record_path(bin_path_));
    record.write(internlm_record(settings_xxh64_, bin_path_));
    record.commit();
  }

 private:
  std::string bin_path_;
  uint64_t settings_xxh64_;
  InternlmWriter w_;
};

}  // namespace

std::string internlm_record_path(const std::string& bin_path) { return bin_path + ".loom-settings"; }

const char* shard_format_name(ShardFormat f) { return f == ShardFormat::kLoom ? "loom" : "internlm"; }

std::unique_ptr<ShardSink> make_shard_sink(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info,
                                           uint32_t encoder, uint64_t settings_xxh64) {
  if (format == ShardFormat::kLoom)
    return std::make_unique<LoomSink>(bin_path, info, encoder, settings_xxh64);
  return std::make_unique<InternlmSink>(bin_path, settings_xxh64);
}

bool shard_complete(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info, uint64_t settings_xxh64,
                    std::string& why_not) {
  if (!sys::exists(meta_path_for(bin_path)) || !sys::exists(bin_path)) {
    why_not = "no complete shard";
    return false;
  }
  try {
    if (format == ShardFormat::kInternlm) {
      InternlmReader r(bin_path);
      const std::string record = internlm_record_path(bin_path);
      if (!sys::exists(record)) {
        why_not = str("it has no record of its settings and checksums (", record, ")");
        return false;
      }
      const std::string text = sys::read_file(record);
      if (text.rfind(str(kInternlmRecordMagic, "\nsettings_xxh64 ", hex64(settings_xxh64), "\n"), 0) != 0) {
        why_not = "it was written with other settings that change the output (" + record + ")";
        return false;
      }
      if (text != internlm_record(settings_xxh64, bin_path)) {
        why_not = str("its files do not match the checksums of ", record, " (damaged or changed)");
        return false;
      }
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
    if (r.header().settings_xxh64 == 0) {
      why_not = "it records no settings (written by an older loom-tokenize), so they cannot be compared";
      return false;
    }
    if (r.header().settings_xxh64 != settings_xxh64) {
      why_not = "it was written with other settings that change the output (--text-key, --raw-records, --txt-doc, "
                "--max-doc-bytes, --encoder, ...)";
      return false;
    }
    try {
      r.verify_deep();
    } catch (const Error& e) {
      why_not = str("it is damaged: ", e.what());
      return false;
    }
    return true;
  } catch (const Error& e) {
    why_not = e.what();
    return false;
  }
}

}  // namespace loom::tokenize
