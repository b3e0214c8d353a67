// Shared inputs of the packer tests: shards built with ShardWriter, botchan.txt tokenized by
// Debian's python3-sentencepiece with internlm_v7.model, and running loom-pack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/shard_format.h"
#include "test_util.h"

namespace loom::test {

using Docs = std::vector<std::vector<uint32_t>>;

void write_shard(const std::string& bin_path, const Docs& docs, const TokenizerInfo& info);
Docs read_shard(const std::string& bin_path);
// botchan.txt as documents of 1 to 60 non-empty lines (a fixed cycle, so lengths vary from a few
// tokens to over 1000), bos + ids + eos, encoded by python sentencepiece (once per process).
const Docs& botchan_docs();
std::string internlm_model();
// vocab 103168, bos 1, eos 2, both added, fingerprint = xxh64 of internlm_v7.model.
TokenizerInfo internlm_info();
// Runs loom-pack with this argument string.
RunResult loom_pack(const std::string& args);
// XXH64 of a file, as 16 hex digits, by python3-xxhash (independent of loom's own).
std::string py_xxh64_hex(const std::string& path);

}  // namespace loom::test
