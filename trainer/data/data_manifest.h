// What a run trains on, as its checkpoints record it (state.json's "data" object): the packs'
// seq_len, the tokenizer, and per named dataset its weight and shards (file name, packs, XXH64 of
// the .bin). A resume compares the checkpoint's record with the data it is given: another tokenizer
// is refused (the one tokenizer check, shard_format.h); other datasets, shards or weights are named
// in one warning, with what the sampler does about them (sampler.h: the stream goes on at
// consumed_samples over the new epoch's order).
//
//   "data": {"seq_len": 4096, "tokenizer": {"vocab_size": 103168, "bos_id": 1, "eos_id": 2,
//            "flags": 3, "model_fingerprint": "9f0c..."},
//            "mixture": "scaled",
//            "datasets": [{"name": "web", "weight": 1, "shards": [{"file": "part0.bin",
//                           "packs": 1200, "bin_xxh64": "00af..."}]}]}
// (a record without "mixture", written before loom had data.mixture, is "scaled")
#pragma once

#include <string>
#include <vector>

#include "dataset.h"

namespace loom {

struct DataManifest {
  struct Shard {
    std::string file;  // the file name within its dataset's folder
    uint64_t packs = 0;
    uint64_t bin_xxh64 = 0;
  };
  struct Dataset {
    std::string name;
    double weight = 1;
    std::vector<Shard> shards;
  };
  int64_t seq_len = 0;
  TokenizerInfo tokenizer;
  std::string mixture = "scaled";  // data.mixture
  std::vector<Dataset> datasets;

  std::string to_json() const;
  // Throws loom::Error naming `where` for malformed JSON or missing fields.
  static DataManifest from_json(const std::string& json, const std::string& where);
};

DataManifest manifest_of(const TrainData& data, int64_t seq_len);

// What differs from `saved` (the checkpoint's, named `where`) to `now`, one phrase each ("dataset
// web: 2 shards added, weight 1 -> 2", "datasets added: code"); empty when the same. Throws
// loom::Error when the tokenizers differ.
std::vector<std::string> data_changes(const DataManifest& saved, const DataManifest& now, const std::string& where);

}  // namespace loom
