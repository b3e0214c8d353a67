#include "loom/tokenize/shard_sink.h"

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/sys.h"

namespace loom::tokenize {

namespace {

// One document into out: its bytes as format(ids, n, bytes) writes them, its tokens and byte count.
template <typename Format>
void append_doc(SerializedDocs& out, const uint32_t* ids, size_t n, Format&& format) {
  const size_t at = out.bytes.size();
  format(ids, n, out.bytes);
  out.tokens.push_back(n);
  out.lengths.push_back(out.bytes.size() - at);
}

// A loom shard: ids as the dtype of the vocabulary (uint16 up to 65536 pieces, else uint32).
class LoomSink : public ShardSink {
 public:
  LoomSink(const std::string& bin_path, const TokenizerInfo& info, uint32_t encoder, uint64_t settings_xxh64)
      : w_(bin_path, info, encoder, settings_xxh64) {}
  void add_doc(const uint32_t* ids, size_t n) override { w_.add_doc(ids, n); }
  void serialize(const uint32_t* ids, size_t n, SerializedDocs& out) const override {
    append_doc(out, ids, n, [this](const uint32_t* i, size_t k, std::string& b) { w_.format_doc(i, k, b); });
  }
  void add_serialized(const SerializedDocs& d) override {
    w_.add_docs_raw(reinterpret_cast<const uint8_t*>(d.bytes.data()), d.tokens.data(), d.tokens.size());
  }
  uint64_t num_docs() const override { return w_.num_docs(); }
  void commit() override { w_.commit(); }

 private:
  ShardWriter w_;
};

const char* record_magic(ShardFormat f) {
  return f == ShardFormat::kMegatron ? "loom-tokenize megatron record 1" : "loom-tokenize internlm record 1";
}

std::string sidecar_record(ShardFormat f, uint64_t settings_xxh64, const std::string& bin_path) {
  return str(record_magic(f), "\nsettings_xxh64 ", hex64(settings_xxh64), "\nbin_xxh64 ", hex64(xxh64_file(bin_path)),
             f == ShardFormat::kMegatron ? "\nidx_xxh64 " : "\nmeta_xxh64 ",
             hex64(xxh64_file(index_path_for(f, bin_path))), "\n");
}

void write_sidecar(ShardFormat f, uint64_t settings_xxh64, const std::string& bin_path) {
  sys::AtomicFile record(settings_record_path(bin_path));
  record.write(sidecar_record(f, settings_xxh64, bin_path));
  record.commit();
}

// InternLM's pair, then its sidecar record (after the pair: a job killed in between leaves a pair
// without a matching record, which --resume writes again).
class InternlmSink : public ShardSink {
 public:
  InternlmSink(const std::string& bin_path, uint64_t settings_xxh64)
      : bin_path_(bin_path), settings_xxh64_(settings_xxh64), w_(bin_path) {}
  void add_doc(const uint32_t* ids, size_t n) override { w_.add_doc(ids, n); }
  void serialize(const uint32_t* ids, size_t n, SerializedDocs& out) const override {
    append_doc(out, ids, n, &InternlmWriter::format_doc);
  }
  void add_serialized(const SerializedDocs& d) override {
    w_.add_formatted(d.bytes.data(), d.tokens.data(), d.lengths.data(), d.tokens.size());
  }
  uint64_t num_docs() const override { return w_.num_docs(); }
  void commit() override {
    w_.commit();
    write_sidecar(ShardFormat::kInternlm, settings_xxh64_, bin_path_);
  }

 private:
  std::string bin_path_;
  uint64_t settings_xxh64_;
  InternlmWriter w_;
};

// A Megatron dataset (ids as Megatron's dtype for the tokenizer type's vocab_size), then the sidecar.
class MegatronSink : public ShardSink {
 public:
  MegatronSink(const std::string& bin_path, const TokenizerInfo& info, uint64_t settings_xxh64)
      : bin_path_(bin_path),
        settings_xxh64_(settings_xxh64),
        w_(bin_path, megatron_dtype_for_vocab(info.vocab_size), info.vocab_size) {}
  void add_doc(const uint32_t* ids, size_t n) override { w_.add_doc(ids, n); }
  void serialize(const uint32_t* ids, size_t n, SerializedDocs& out) const override {
    append_doc(out, ids, n, [this](const uint32_t* i, size_t k, std::string& b) { w_.format_doc(i, k, b); });
  }
  void add_serialized(const SerializedDocs& d) override {
    w_.add_formatted(d.bytes.data(), d.tokens.data(), d.tokens.size());
  }
  uint64_t num_docs() const override { return w_.num_docs(); }
  void commit() override {
    w_.commit();
    write_sidecar(ShardFormat::kMegatron, settings_xxh64_, bin_path_);
  }

 private:
  std::string bin_path_;
  uint64_t settings_xxh64_;
  MegatronWriter w_;
};

}  // namespace

std::string settings_record_path(const std::string& bin_path) { return bin_path + ".loom-settings"; }

const char* shard_format_name(ShardFormat f) {
  return f == ShardFormat::kLoom ? "loom" : f == ShardFormat::kInternlm ? "internlm" : "megatron";
}

std::string index_path_for(ShardFormat f, const std::string& bin_path) {
  return f == ShardFormat::kMegatron ? megatron_idx_path(bin_path) : meta_path_for(bin_path);
}

std::unique_ptr<ShardSink> make_shard_sink(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info,
                                           uint32_t encoder, uint64_t settings_xxh64) {
  if (format == ShardFormat::kLoom)
    return std::make_unique<LoomSink>(bin_path, info, encoder, settings_xxh64);
  if (format == ShardFormat::kMegatron) return std::make_unique<MegatronSink>(bin_path, info, settings_xxh64);
  return std::make_unique<InternlmSink>(bin_path, settings_xxh64);
}

bool shard_complete(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info, uint64_t settings_xxh64,
                    std::string& why_not) {
  if (!sys::exists(index_path_for(format, bin_path)) || !sys::exists(bin_path)) {
    why_not = "no complete shard";
    return false;
  }
  try {
    if (format != ShardFormat::kLoom) {
      if (format == ShardFormat::kInternlm) InternlmReader r(bin_path);
      else MegatronReader r(bin_path);
      const std::string record = settings_record_path(bin_path);
      if (!sys::exists(record)) {
        why_not = str("it has no record of its settings and checksums (", record, ")");
        return false;
      }
      const std::string text = sys::read_file(record);
      if (text.rfind(str(record_magic(format), "\nsettings_xxh64 ", hex64(settings_xxh64), "\n"), 0) != 0) {
        why_not = "it was written with other settings that change the output (" + record + ")";
        return false;
      }
      if (text != sidecar_record(format, settings_xxh64, bin_path)) {
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
