// The one loop over a shard's documents in loom-pack, for a ShardReader or an InternlmReader: merge,
// split, convert and head visit documents through it (the copying stages through its checked form).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "loom/progress.h"
#include "loom/shard_format.h"

namespace loom::packer {

// Calls f(i, ids) for the first `limit` documents of r in order (all by default); ids holds
// document i's ids, one buffer reused from call to call.
template <typename Reader, typename F>
void for_each_doc(const Reader& r, F&& f, uint64_t limit = std::numeric_limits<uint64_t>::max()) {
  std::vector<uint32_t> ids;
  const uint64_t n = std::min(limit, r.num_docs());
  for (uint64_t i = 0; i < n; ++i) {
    ids.clear();
    r.read_doc(i, ids);
    f(i, ids);
  }
}

// for_each_doc over a loom shard that also checks it in the same pass (ShardStreamCheck: ids, the
// header's flags, the checksum). Throws after the last document when the .bin is not what its .meta
// says, so a caller that commits its output after this returns never publishes a bad copy.
template <typename F>
void for_each_doc_checked(const ShardReader& r, F&& f) {
  ShardStreamCheck check(r);
  for_each_doc(r, [&](uint64_t i, const std::vector<uint32_t>& ids) {
    f(i, ids);
    check.advance_to(r.offsets()[i + 1]);
  });
  check.finish();
}

// Appends every document of `from` to `to` in order, one progress step each.
template <typename Reader, typename Writer>
void copy_docs(const Reader& from, Writer& to, Progress& progress) {
  for_each_doc(from, [&](uint64_t, const std::vector<uint32_t>& ids) {
    to.add_doc(ids);
    progress.add(1);
  });
}

}  // namespace loom::packer
