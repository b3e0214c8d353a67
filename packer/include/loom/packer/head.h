// `loom-pack head`: decodes the first documents of a shard (loom or InternLM), a Megatron-LM
// dataset or the segments of the first packs of a packed shard, for a look before a long run.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace loom {
class SentencePieceModel;
}

namespace loom::packer {

// Prints "== document I (N tokens) ==\nTEXT\n" per document, or per packed segment
// "== pack P segment S: document D, tokens [A, B)[, ends document] ==\nTEXT\n".
// Warns (log) when the shard's tokenizer fingerprint is not the model's. In a Megatron dataset an
// id past the model's pieces (SentencePieceTokenizer's <EOD> and the like) prints as "[id N]".
void print_head(const std::string& bin_path, const SentencePieceModel& model, uint64_t n, std::ostream& out);

}  // namespace loom::packer
