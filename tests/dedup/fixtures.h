// Shared inputs of the loom-dedup tests: documents of botchan.txt tokenized with internlm_v7.model
// (loom's SentencePiece loader), shards written with common's writers, and running loom-dedup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/shard_format.h"
#include "test_util.h"

namespace loom::test {

using Docs = std::vector<std::vector<uint32_t>>;

std::string internlm_model();
TokenizerInfo internlm_info();  // bos and eos added
// botchan.txt's non-empty lines in groups of 1 to 12 (a fixed cycle), each bos + ids + eos.
const Docs& botchan_docs();
// The text of each of botchan_docs() (its lines joined by newlines).
const std::vector<std::string>& botchan_texts();
// The longest line of botchan_texts()[doc] (at least 13 tokens: an evaluation item it contains).
std::string longest_line(size_t doc);
// The ids of text (no bos/eos).
std::vector<uint32_t> encode(const std::string& text);
void write_shard(const std::string& bin_path, const Docs& docs);
Docs read_shard(const std::string& bin_path);
// doc with every `every`-th token from `offset` replaced by another id (a near copy).
std::vector<uint32_t> perturb(const std::vector<uint32_t>& doc, size_t every, size_t offset = 3);
// The exact Jaccard of two documents' 5-gram sets (loom's definition, minhash.h).
double jaccard5(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b);
RunResult loom_dedup(const std::string& args);
// The lines of a text file.
std::vector<std::string> lines_of(const std::string& path);

}  // namespace loom::test
