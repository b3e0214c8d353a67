#include "loom/packer/pack.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

namespace {
// Appends n ids of a raw little-endian token buffer, widened to uint32.
void append_ids(const uint8_t* bytes, uint32_t dtype_bytes, uint64_t begin, uint32_t n, std::vector<uint32_t>& out) {
  if (dtype_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(bytes) + begin;
    out.insert(out.end(), p, p + n);
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(bytes) + begin;
    out.insert(out.end(), p, p + n);
  }
}
}  // namespace

std::vector<std::string> pack_output_paths(const PackOptions& o, uint64_t num_packs) {
  if (o.max_packs_per_shard == 0 || num_packs <= o.max_packs_per_shard) return {o.output_dir + "/" + o.name + ".bin"};
  std::vector<std::string> paths;
  const uint64_t files = (num_packs + o.max_packs_per_shard - 1) / o.max_packs_per_shard;
  for (uint64_t i = 0; i < files; ++i) {
    char num[32];
    std::snprintf(num, sizeof(num), "-%05llu", static_cast<unsigned long long>(i));
    paths.push_back(o.output_dir + "/" + o.name + num + ".bin");
  }
  return paths;
}

PackReport write_packs(const ShardSet& inputs, const PackPlan& plan, const PackOptions& o) {
  LOOM_CHECK(plan.num_packs() > 0, "nothing to pack: the inputs hold no token");
  sys::make_dirs(o.output_dir);
  PackReport rep;
  rep.outputs = pack_output_paths(o, plan.num_packs());
  const uint64_t per_file = rep.outputs.size() == 1 ? plan.num_packs() : o.max_packs_per_shard;
  const uint32_t dtype = inputs.dtype_bytes();
  Progress progress("pack", plan.num_packs() * plan.seq_len * dtype);
  std::vector<uint32_t> tokens;
  std::vector<PackedSegment> segs;
  // concat reads each input front to back: pages behind the read position are dropped from the
  // mapping as it goes, so the resident set stays flat on inputs larger than RAM.
  const bool sequential = o.strategy == PackStrategy::kConcat;
  constexpr uint64_t kReleaseBytes = uint64_t{64} << 20;
  std::vector<uint64_t> released(inputs.size(), 0);
  if (sequential)
    for (size_t s = 0; s < inputs.size(); ++s) inputs.shard(s).bin().advise_sequential();
  uint64_t p = 0;
  for (const std::string& out : rep.outputs) {
    PackedWriter writer(out, inputs.tokenizer(), plan.seq_len, o.strategy, o.seed);
    for (uint64_t end = std::min(plan.num_packs(), p + per_file); p < end; ++p) {
      tokens.clear();
      segs.clear();
      for (uint64_t s = plan.pack_offsets[p]; s < plan.pack_offsets[p + 1]; ++s) {
        const PlannedSegment& g = plan.segments[s];
        const auto [shard, local] = inputs.locate(g.doc);
        const ShardReader& r = inputs.shard(shard);
        LOOM_ASSERT(uint64_t{g.doc_pos} + g.length <= r.doc_len(local), "segment past its document");
        segs.push_back({g.doc, static_cast<uint32_t>(tokens.size()), g.length, g.doc_pos, g.ends_doc ? kSegEndsDoc : 0});
        append_ids(r.token_bytes(), dtype, r.offsets()[local] + g.doc_pos, g.length, tokens);
        const uint64_t read_to = (r.offsets()[local] + g.doc_pos) * dtype;
        if (sequential && read_to >= released[shard] + kReleaseBytes) {
          r.bin().advise_done(released[shard], read_to - released[shard]);
          released[shard] = read_to;
        }
      }
      writer.add_pack(tokens, segs);
      progress.add(uint64_t{plan.seq_len} * dtype);
    }
    writer.commit(inputs.num_docs());
    log::info("pack: wrote ", out, " (", writer.num_packs(), " packs)");
  }
  progress.finish();
  rep.packs = plan.num_packs();
  rep.tokens = plan.num_tokens;
  rep.padding_tokens = plan.padding_tokens();
  rep.documents = plan.nonempty_docs;
  rep.truncated_docs = plan.truncated_docs;
  rep.padding_fraction = plan.padding_fraction();
  rep.truncated_fraction = plan.truncated_fraction();
  return rep;
}

PackReport pack_shards(const ShardSet& inputs, const PackOptions& o) {
  const PackPlan plan = plan_packs(inputs.doc_lengths(), o.seq_len, o.strategy, o.seed);
  log::info("pack: ", pack_strategy_name(o.strategy), " plan: ", plan.num_packs(), " packs of ", o.seq_len,
            " tokens from ", inputs.num_docs(), " documents");
  return write_packs(inputs, plan, o);
}

}  // namespace loom::packer
