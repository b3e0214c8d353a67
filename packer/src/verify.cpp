#include "loom/packer/verify.h"

#include "loom/error.h"
#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/packed_format.h"
#include "loom/shard_format.h"
#include "loom/sys.h"

namespace loom::packer {

uint64_t verify_bytes(const std::string& bin_path) {
  return sys::exists(bin_path) && !sys::is_directory(bin_path) ? sys::file_size(bin_path) : 0;
}

VerifyResult verify_shard(const std::string& bin_path, const VerifyOptions& options, Progress* progress) {
  VerifyResult r;
  r.path = bin_path;
  auto on_bytes = [&](uint64_t n) {
    if (progress) progress->add(n);
  };
  try {
    const ShardKind kind = detect_shard_kind(bin_path);
    r.kind = shard_kind_name(kind);
    switch (kind) {
      case ShardKind::kPacked: {
        PackedReader reader(bin_path);
        r.documents = reader.num_packs();
        r.tokens = reader.header().num_tokens;
        if (options.deep) reader.verify_deep(on_bytes, options.vocab_size);
        break;
      }
      case ShardKind::kInternlm: {
        InternlmReader reader(bin_path);
        r.documents = reader.num_docs();
        r.tokens = reader.num_tokens();
        if (options.deep) reader.verify_deep(options.vocab_size, on_bytes);
        break;
      }
      case ShardKind::kMegatron: {
        MegatronReader reader(bin_path);
        r.documents = reader.num_docs();
        r.tokens = reader.num_tokens();
        if (options.deep) reader.verify_deep(options.vocab_size, on_bytes);
        break;
      }
      case ShardKind::kLoom:
      case ShardKind::kUnknown: {
        // An unknown magic is reported by the loom reader ("bad magic: not a loom shard index").
        ShardReader reader(bin_path);
        r.kind = shard_kind_name(ShardKind::kLoom);
        r.documents = reader.num_docs();
        r.tokens = reader.num_tokens();
        if (options.deep) reader.verify_deep(on_bytes, options.vocab_size);
        break;
      }
    }
    r.ok = true;
  } catch (const Error& e) {
    r.ok = false;
    r.error = e.what();
  }
  return r;
}

}  // namespace loom::packer
