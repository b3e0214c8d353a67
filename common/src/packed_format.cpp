#include "loom/packed_format.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "loom/error.h"
#include "token_scan.h"

namespace loom {

const char* pack_strategy_name(PackStrategy s) {
  switch (s) {
    case PackStrategy::kConcat: return "concat";
    case PackStrategy::kBestfit: return "bestfit";
  }
  return "unknown";
}

// ---- PackedWriter ----

PackedWriter::PackedWriter(const std::string& bin_path, const TokenizerInfo& info, uint32_t seq_len,
                           PackStrategy strategy, uint64_t seed)
    : bin_path_(bin_path), info_(info), seq_len_(seq_len),
      pad_id_(info.eos_id >= 0 ? static_cast<uint32_t>(info.eos_id) : 0), strategy_(strategy), seed_(seed),
      bin_(bin_path, dtype_bytes_for_vocab(info.vocab_size)) {
  LOOM_CHECK(seq_len > 0, bin_path, ": seq_len must be positive");
  pack_.resize(seq_len);
}

uint32_t PackedWriter::check_segments(size_t n, const PackedSegment* segs, size_t num_segs) const {
  LOOM_ASSERT(n <= seq_len_, "pack of ", n, " tokens > seq_len ", seq_len_);
  uint32_t covered = 0, prev_end = 0;
  for (size_t i = 0; i < num_segs; ++i) {
    LOOM_ASSERT(segs[i].length > 0 && segs[i].start >= prev_end && segs[i].start + segs[i].length <= n,
                "bad segment ", i, " of pack ", num_packs());
    prev_end = segs[i].start + segs[i].length;
    covered += segs[i].length;
  }
  return covered;
}

void PackedWriter::add_packs_raw(const uint8_t* bytes, size_t n, const PackedSegment* segs, const size_t* seg_ends) {
  add_index(n, segs, seg_ends);
  bin_.write_raw(bytes, n * seq_len_);
}

void PackedWriter::add_index(size_t n, const PackedSegment* segs, const size_t* seg_ends) {
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i ? seg_ends[i - 1] : 0;
    num_tokens_ += check_segments(seq_len_, segs + b, seg_ends[i] - b);
    seg_offsets_.push_back(seg_offsets_.back() + (seg_ends[i] - b));
  }
  const size_t num_segs = n ? seg_ends[n - 1] : 0;
  if (index_open_) {
    bin_.append_meta(segs, num_segs * sizeof(PackedSegment));
    index_hash_.update(segs, num_segs * sizeof(PackedSegment));
  } else {
    segments_.insert(segments_.end(), segs, segs + num_segs);
  }
}

void PackedWriter::open_index(const std::vector<uint64_t>& seg_offsets) {
  LOOM_ASSERT(!index_open_ && num_packs() == 0 && !seg_offsets.empty() && seg_offsets[0] == 0,
              bin_path_, ": index opened after packs were added, or twice");
  const size_t bytes = seg_offsets.size() * sizeof(uint64_t);
  bin_.open_meta(sizeof(PackedHeader));
  bin_.append_meta(seg_offsets.data(), bytes);
  index_hash_.update(seg_offsets.data(), bytes);
  declared_offsets_xxh64_ = xxh64(seg_offsets.data(), bytes);
  declared_packs_ = seg_offsets.size() - 1;
  index_open_ = true;
}

void PackedWriter::add_pack(const uint32_t* tokens, size_t n, const PackedSegment* segs, size_t num_segs) {
  LOOM_ASSERT(!index_open_, bin_path_, ": add_pack with the index streamed (open_index)");
  const uint32_t covered = check_segments(n, segs, num_segs);
  for (size_t i = 0; i < n; ++i)
    LOOM_CHECK(tokens[i] < info_.vocab_size, bin_path_, ": pack ", num_packs(), ": token id ", tokens[i],
               " >= vocab size ", info_.vocab_size);
  std::copy(tokens, tokens + n, pack_.begin());
  std::fill(pack_.begin() + static_cast<std::ptrdiff_t>(n), pack_.end(), pad_id_);
  // Positions inside the pack that no segment covers are padding too.
  if (covered != n) {
    std::vector<uint8_t> in_seg(n, 0);
    for (size_t i = 0; i < num_segs; ++i) std::fill_n(in_seg.begin() + segs[i].start, segs[i].length, 1);
    for (size_t i = 0; i < n; ++i)
      if (!in_seg[i]) pack_[i] = pad_id_;
  }
  bin_.write(pack_.data(), pack_.size());
  segments_.insert(segments_.end(), segs, segs + num_segs);
  seg_offsets_.push_back(segments_.size());
  num_tokens_ += covered;
}

void PackedWriter::set_output_set(uint64_t set_id, uint32_t shard_index, uint32_t shard_count) {
  LOOM_ASSERT(set_id != 0 && shard_index < shard_count, bin_path_, ": bad output set ", set_id, " shard ", shard_index,
              " of ", shard_count);
  set_id_ = set_id;
  shard_index_ = shard_index;
  shard_count_ = shard_count;
}

void PackedWriter::commit(uint64_t num_source_docs) {
  seal(num_source_docs);
  publish();
}

void PackedWriter::seal(uint64_t num_source_docs) {
  LOOM_CHECK(num_packs() > 0, bin_path_, ": no packs to write (an empty packed shard is not written)");
  LOOM_ASSERT(bin_.bytes_written() == num_packs() * seq_len_ * bin_.dtype_bytes(), bin_path_, ": ",
              bin_.bytes_written(), " bytes of packs for an index of ", num_packs(), " packs");
  PackedHeader h{};
  detail::fill_loom_header(h, kPackedMagic, kPackedVersion, bin_.dtype_bytes(), info_);
  h.seq_len = seq_len_;
  h.pad_id = pad_id_;
  h.strategy = static_cast<uint32_t>(strategy_);
  h.num_packs = num_packs();
  h.num_segments = index_open_ ? seg_offsets_.back() : segments_.size();
  h.num_tokens = num_tokens_;
  h.num_source_docs = num_source_docs;
  h.bin_xxh64 = bin_.digest();
  h.seed = seed_;
  h.set_id = set_id_;
  h.shard_index = shard_index_;
  h.shard_count = shard_count_;
  if (index_open_) {
    LOOM_ASSERT(num_packs() == declared_packs_ &&
                    xxh64(seg_offsets_.data(), seg_offsets_.size() * sizeof(uint64_t)) == declared_offsets_xxh64_,
                bin_path_, ": the packs added differ from the offsets open_index() wrote");
    h.index_xxh64 = index_hash_.digest();
    bin_.seal_streamed(&h, sizeof(h));
  } else {
    const size_t offsets_bytes = seg_offsets_.size() * sizeof(uint64_t);
    const size_t segments_bytes = segments_.size() * sizeof(PackedSegment);
    Xxh64 ih;
    ih.update(seg_offsets_.data(), offsets_bytes);
    ih.update(segments_.data(), segments_bytes);
    h.index_xxh64 = ih.digest();
    bin_.seal({{&h, sizeof(h)}, {seg_offsets_.data(), offsets_bytes}, {segments_.data(), segments_bytes}});
  }
  // The segments are on disk now; a pack run holding many sealed files need not keep them.
  std::vector<PackedSegment>().swap(segments_);
  std::vector<uint32_t>().swap(pack_);
}

// ---- PackedReader ----

PackedReader::PackedReader(const std::string& bin_path) {
  const std::string meta_path = meta_path_for(bin_path);
  meta_ = sys::MappedFile(meta_path);
  detail::read_loom_header(meta_, kPackedMagic, "loom packed shard index", kPackedVersion, &header_, sizeof(header_));
  const PackedHeader& h = header_;
  LOOM_CHECK(h.seq_len > 0, meta_path, ": seq_len is 0");
  detail::check_tokenizer_fields(meta_path, h.vocab_size, h.bos_id, h.eos_id, h.flags);
  LOOM_CHECK(h.pad_id < h.vocab_size, meta_path, ": pad_id ", h.pad_id, " >= vocab size ", h.vocab_size);
  LOOM_CHECK(h.strategy <= 1, meta_path, ": unknown strategy ", h.strategy, ", expected 0 (concat) or 1 (bestfit)");
  LOOM_CHECK(h.num_packs > 0, meta_path, ": empty shard: it has no packs");
  // Every size from the header's counts is overflow-checked before it is trusted: a forged count
  // whose byte size wraps would otherwise "match" a small file.
  uint64_t offsets_bytes = 0, segments_bytes = 0, index_bytes = 0, want_meta = 0, want_bin = 0;
  LOOM_CHECK(!__builtin_add_overflow(h.num_packs, 1, &offsets_bytes) &&
                 !__builtin_mul_overflow(offsets_bytes, sizeof(uint64_t), &offsets_bytes) &&
                 !__builtin_mul_overflow(h.num_segments, sizeof(PackedSegment), &segments_bytes) &&
                 !__builtin_add_overflow(offsets_bytes, segments_bytes, &index_bytes) &&
                 !__builtin_add_overflow(index_bytes, sizeof(PackedHeader), &want_meta),
             meta_path, ": num_packs ", h.num_packs, " and num_segments ", h.num_segments,
             ": the index's size does not fit 64 bits (a forged or corrupted header)");
  LOOM_CHECK(!__builtin_mul_overflow(h.num_packs, uint64_t{h.seq_len}, &want_bin) &&
                 !__builtin_mul_overflow(want_bin, uint64_t{h.dtype_bytes}, &want_bin),
             meta_path, ": num_packs ", h.num_packs, " x seq_len ", h.seq_len, " x dtype_bytes ", h.dtype_bytes,
             " does not fit 64 bits (a forged or corrupted header)");
  LOOM_CHECK(meta_.size() == want_meta, meta_path, ": truncated .meta: ", meta_.size(), " bytes, expected ",
             want_meta, " for ", h.num_packs, " packs and ", h.num_segments, " segments");
  seg_offsets_ = reinterpret_cast<const uint64_t*>(meta_.data() + sizeof(PackedHeader));
  segments_ = reinterpret_cast<const PackedSegment*>(meta_.data() + sizeof(PackedHeader) + offsets_bytes);
  const uint64_t got = xxh64(seg_offsets_, index_bytes);
  LOOM_CHECK(got == h.index_xxh64, meta_path, ": index checksum mismatch: xxh64 ", hex64(got), ", header says ",
             hex64(h.index_xxh64));

  bin_ = sys::MappedFile(bin_path);
  // Names the header fields the size comes from: a wrong seq_len or num_packs shows here.
  LOOM_CHECK(bin_.size() == want_bin, bin_path, ": ", bin_.size() < want_bin ? "truncated .bin" : ".bin too long", ": ",
             bin_.size(), " bytes, expected ", want_bin, " = num_packs ", h.num_packs, " x seq_len ", h.seq_len, " x ",
             h.dtype_bytes, " bytes (uint", h.dtype_bytes * 8, ")");

  LOOM_CHECK(seg_offsets_[0] == 0, meta_path, ": seg_offsets[0] is ", seg_offsets_[0], ", expected 0");
  uint64_t tokens = 0;
  for (uint64_t p = 0; p < h.num_packs; ++p) {
    const uint64_t at = sizeof(PackedHeader) + (p + 1) * sizeof(uint64_t);
    LOOM_CHECK(seg_offsets_[p + 1] >= seg_offsets_[p], meta_path, ": seg_offsets out of order: pack ", p,
               " (byte offset ", at, ") ends at segment ", seg_offsets_[p + 1], ", before it starts at ",
               seg_offsets_[p]);
    LOOM_CHECK(seg_offsets_[p + 1] <= h.num_segments, meta_path, ": seg_offsets past the end: pack ", p,
               " (byte offset ", at, ") ends at segment ", seg_offsets_[p + 1], ", but there are ", h.num_segments,
               " segments");
    uint64_t prev_end = 0;
    for (uint64_t s = seg_offsets_[p]; s < seg_offsets_[p + 1]; ++s) {
      const PackedSegment& g = segments_[s];
      const uint64_t sat = reinterpret_cast<const uint8_t*>(&g) - meta_.data();
      LOOM_CHECK(g.length > 0 && g.start >= prev_end && uint64_t{g.start} + g.length <= h.seq_len, meta_path,
                 ": segments[", s, "] of pack ", p, " (byte offset ", sat, "): start ", g.start, ", length ", g.length,
                 ": a segment must be non-empty, after the previous one and inside the pack's seq_len ", h.seq_len,
                 " tokens");
      LOOM_CHECK(g.doc < h.num_source_docs, meta_path, ": segments[", s, "] of pack ", p, " (byte offset ", sat,
                 "): doc ", g.doc, " >= num_source_docs ", h.num_source_docs);
      LOOM_CHECK((g.seg_flags & ~kSegEndsDoc) == 0, meta_path, ": segments[", s, "] of pack ", p, " (byte offset ",
                 sat, "): seg_flags ", g.seg_flags, " has bits other than 0 (ends its document)");
      prev_end = g.start + g.length;
      tokens += g.length;
    }
  }
  LOOM_CHECK(seg_offsets_[h.num_packs] == h.num_segments, meta_path, ": seg_offsets[", h.num_packs, "] is ",
             seg_offsets_[h.num_packs], ", expected num_segments ", h.num_segments);
  LOOM_CHECK(tokens == h.num_tokens, meta_path, ": segments cover ", tokens, " tokens, the header's num_tokens is ",
             h.num_tokens);
}

TokenizerInfo PackedReader::tokenizer() const { return detail::tokenizer_of(header_); }

void check_same_tokenizer(const PackedReader& a, const PackedReader& b) {
  std::vector<std::string> differences;
  if (a.header().pad_id != b.header().pad_id)
    differences.push_back(str("pad_id ", b.header().pad_id, " vs ", a.header().pad_id));
  detail::check_same_tokenizer(a.tokenizer(), a.bin_path(), b.tokenizer(), b.bin_path(), std::move(differences));
}

void PackedReader::read_pack(uint64_t p, std::vector<uint32_t>& out) const {
  LOOM_ASSERT(p < num_packs(), "pack ", p, " of ", num_packs());
  out.resize(header_.seq_len);
  const uint64_t base = p * header_.seq_len;
  for (uint32_t i = 0; i < header_.seq_len; ++i) out[i] = detail::load_id(bin_.data(), header_.dtype_bytes, base + i);
}

void PackedReader::verify_range(uint64_t begin, uint64_t end, uint32_t id_limit) const {
  const uint32_t limit = id_limit && id_limit < header_.vocab_size ? id_limit : header_.vocab_size;
  const uint64_t t = detail::first_id_at_or_above(bin_.data(), header_.dtype_bytes, begin, end, limit);
  if (t == end) return;
  LOOM_FAIL(bin_path(), ": token id ", detail::load_id(bin_.data(), header_.dtype_bytes, t), " >= ",
            limit == header_.vocab_size ? "vocab size " : "--vocab-size ", limit, " in pack ", t / header_.seq_len, " at byte offset ", t * header_.dtype_bytes,
            " (token ", t, ")");
}

}  // namespace loom
