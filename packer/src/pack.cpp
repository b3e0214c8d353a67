#include "loom/packer/pack.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

namespace {
// The inputs' ShardStreamChecks driven by one frontier over all their tokens in input order,
// advanced by the tokens each pack takes. concat consumes the inputs in exactly that order, so the
// check reads what was just copied, and pages behind it are dropped from the mapping (the resident
// set stays flat on inputs larger than RAM). bestfit copies in plan order (random access); the
// check is then a sequential sweep at the same pace.
class InputsCheck {
 public:
  InputsCheck(const ShardSet& inputs, bool release_behind) : inputs_(inputs), release_behind_(release_behind) {
    for (size_t s = 0; s < inputs.size(); ++s) {
      checks_.emplace_back(inputs.shard(s));
      if (release_behind) inputs.shard(s).bin().advise_sequential();
    }
  }
  void advance(uint64_t tokens) {
    frontier_ += tokens;
    while (cur_ < checks_.size()) {
      const ShardReader& r = inputs_.shard(cur_);
      const uint64_t local = frontier_ - start_;
      if (local < r.num_tokens()) {
        checks_[cur_].advance_to(local);
        release(false);
        return;
      }
      checks_[cur_].finish();
      release(true);
      start_ += r.num_tokens();
      ++cur_;
      released_ = 0;
    }
  }
  // Checks whatever the packs did not reach (nothing, unless the plan skipped tokens).
  void finish() {
    advance(0);
    for (; cur_ < checks_.size(); ++cur_) checks_[cur_].finish();
  }

 private:
  void release(bool all) {
    if (!release_behind_) return;
    constexpr uint64_t kReleaseBytes = uint64_t{64} << 20;
    const ShardReader& r = inputs_.shard(cur_);
    const uint64_t done = checks_[cur_].done() * r.dtype_bytes();
    if (all || done >= released_ + kReleaseBytes) {
      r.bin().advise_done(released_, done - released_);
      released_ = done;
    }
  }
  const ShardSet& inputs_;
  bool release_behind_;
  std::vector<ShardStreamCheck> checks_;
  size_t cur_ = 0;
  uint64_t start_ = 0, frontier_ = 0, released_ = 0;
};

// Fills ids [from, n) of a raw pack with pad_id.
void fill_padding(uint8_t* pack, uint32_t dtype_bytes, uint32_t from, uint32_t n, uint32_t pad_id) {
  if (dtype_bytes == 2) std::fill(reinterpret_cast<uint16_t*>(pack) + from, reinterpret_cast<uint16_t*>(pack) + n, static_cast<uint16_t>(pad_id));
  else std::fill(reinterpret_cast<uint32_t*>(pack) + from, reinterpret_cast<uint32_t*>(pack) + n, pad_id);
}
}  // namespace

std::string pack_scratch_dir(const PackOptions& o) { return o.output_dir + "/.internlm-as-loom"; }

void check_pack_spares_inputs(const std::vector<std::string>& files, const PackOptions& o) {
  const std::string scratch = pack_scratch_dir(o);
  for (const std::string& f : files)
    LOOM_CHECK(!sys::path_inside(f, scratch), "the input ", f, " lies in ", scratch,
               ", the scratch folder that pack empties (its output folder's): move the input out of it");
  // Only existing files can be inputs: those among the names a run of any size could write.
  std::vector<std::string> outputs = {o.output_dir + "/" + o.name + ".bin", o.output_dir + "/" + o.name + ".bin.meta"};
  const std::string dir = sys::canonical_path(o.output_dir);  // "new/../out" lists out/ before new/ is made
  if (sys::is_directory(dir)) {
    const std::string prefix = o.name + "-";
    for (const std::string& entry : sys::list_dir(dir)) {
      if (entry.rfind(prefix, 0) != 0) continue;
      const size_t digits = entry.find_first_not_of("0123456789", prefix.size());
      if (digits == std::string::npos || digits - prefix.size() < 5) continue;
      const std::string tail = entry.substr(digits);
      if (tail == ".bin" || tail == ".bin.meta") outputs.push_back(dir + "/" + entry);
    }
  }
  sys::check_outputs_spare_inputs(files, outputs);
}

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
  PackReport rep;
  rep.outputs = pack_output_paths(o, plan.num_packs());
  std::vector<std::string> bins, outputs;
  for (size_t s = 0; s < inputs.size(); ++s) bins.push_back(inputs.shard(s).bin_path());
  for (const std::string& out : rep.outputs) outputs.insert(outputs.end(), {out, meta_path_for(out)});
  sys::check_outputs_spare_inputs(shard_files(bins), outputs);
  sys::make_dirs(o.output_dir);
  const uint64_t per_file = rep.outputs.size() == 1 ? plan.num_packs() : o.max_packs_per_shard;
  const uint32_t dtype = inputs.dtype_bytes();
  Progress progress("pack", plan.num_packs() * plan.seq_len * dtype);
  // Packs are assembled as raw bytes straight from the inputs' mmaps (no widening to uint32); the
  // ids are checked against the vocab by `check`, on the inputs, before anything is published.
  InputsCheck check(inputs, o.strategy == PackStrategy::kConcat);
  // Packs are gathered a batch (~1 MiB) at a time and written with one call.
  const uint64_t pack_bytes = uint64_t{plan.seq_len} * dtype;
  const uint64_t batch = std::max<uint64_t>(1, (uint64_t{1} << 20) / pack_bytes);
  std::vector<uint8_t> packs(batch * pack_bytes);
  std::vector<PackedSegment> segs;
  std::vector<size_t> seg_ends;
  // Outputs are sealed as they fill and renamed into place only after every input passed its check.
  std::vector<std::unique_ptr<PackedWriter>> writers;
  uint64_t p = 0;
  for (const std::string& out : rep.outputs) {
    writers.push_back(std::make_unique<PackedWriter>(out, inputs.tokenizer(), plan.seq_len, o.strategy, o.seed));
    PackedWriter& writer = *writers.back();
    for (const uint64_t end = std::min(plan.num_packs(), p + per_file); p < end;) {
      segs.clear();
      seg_ends.clear();
      uint64_t taken = 0;
      for (const uint64_t stop = std::min(end, p + batch); p < stop; ++p) {
        uint8_t* pack = packs.data() + seg_ends.size() * pack_bytes;
        uint32_t used = 0;
        for (uint64_t s = plan.pack_offsets[p]; s < plan.pack_offsets[p + 1]; ++s) {
          const PlannedSegment& g = plan.segments[s];
          const auto [shard, local] = inputs.locate(g.doc);
          const ShardReader& r = inputs.shard(shard);
          LOOM_ASSERT(uint64_t{g.doc_pos} + g.length <= r.doc_len(local) && used + g.length <= plan.seq_len,
                      "segment past its document or pack");
          segs.push_back({g.doc, used, g.length, g.doc_pos, g.ends_doc ? kSegEndsDoc : 0});
          std::memcpy(pack + uint64_t{used} * dtype, r.token_bytes() + (r.offsets()[local] + g.doc_pos) * dtype,
                      uint64_t{g.length} * dtype);
          used += g.length;
        }
        fill_padding(pack, dtype, used, plan.seq_len, writer.pad_id());
        seg_ends.push_back(segs.size());
        taken += used;
      }
      writer.add_packs_raw(packs.data(), seg_ends.size(), segs.data(), seg_ends.data());
      check.advance(taken);
      progress.add(seg_ends.size() * pack_bytes);
    }
    writer.seal(inputs.num_docs());
  }
  check.finish();
  for (size_t i = 0; i < writers.size(); ++i) {
    writers[i]->publish();
    log::info("pack: wrote ", rep.outputs[i], " (", writers[i]->num_packs(), " packs)");
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
