// Differential: loom's exact encoder (loom/spm_encoder.h) against libsentencepiece on arbitrary
// text, for every SentencePiece model of the repository (tests/data: InternLM's BPE model and the
// 1k unigram model; data_samples: the 2k unigram model). Both go through the one loader,
// loom::SentencePieceModel: EncoderChoice::kLoom encodes with loom's SpmEncoder, kSentencePiece
// with SentencePieceProcessor::Encode. The ids of encode() (a whole document) and of
// encode_continuation() (a piece cut out of a longer document, --max-doc-bytes) must be equal id for
// id; a difference aborts with the model, the text's bytes and both id lists.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/spm/sentencepiece_model.h"

#ifndef LOOM_SOURCE_DIR
#error "LOOM_SOURCE_DIR: the repository root, where the models are"
#endif

namespace {

struct Pair {
  std::string path;
  std::unique_ptr<loom::SentencePieceModel> loom, spm;
};

std::vector<Pair>& models() {
  static std::vector<Pair> all = [] {
    std::vector<Pair> v;
    for (const char* rel : {"/tests/data/internlm_v7.model", "/tests/data/spm_test_unigram_1k.model",
                            "/data_samples/spm_2k.model"}) {
      Pair p;
      p.path = std::string(LOOM_SOURCE_DIR) + rel;
      p.loom = std::make_unique<loom::SentencePieceModel>(p.path, loom::EncoderChoice::kLoom);
      p.spm = std::make_unique<loom::SentencePieceModel>(p.path, loom::EncoderChoice::kSentencePiece);
      v.push_back(std::move(p));
    }
    return v;
  }();
  return all;
}

std::string ids_text(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

[[noreturn]] void mismatch(const char* what, const std::string& model, std::string_view text,
                           const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::fprintf(stderr, "fuzz_spm_diff: %s differs for %s on %zu bytes:", what, model.c_str(), text.size());
  for (unsigned char c : text) std::fprintf(stderr, " %02x", c);
  std::fprintf(stderr, "\n  loom:          %s\n  sentencepiece: %s\n", ids_text(a).c_str(), ids_text(b).c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<uint32_t> a, b;
  for (const Pair& m : models()) {
    a.clear(), b.clear();
    m.loom->encode(text, a);
    m.spm->encode(text, b);
    if (a != b) mismatch("encode", m.path, text, a, b);
    a.clear(), b.clear();
    m.loom->encode_continuation(text, a);
    m.spm->encode_continuation(text, b);
    if (a != b) mismatch("encode_continuation", m.path, text, a, b);
  }
  return 0;
}
