#include "coherence/diff.hpp"

#include "common/check.hpp"

#include <cstring>

namespace mdsm::coherence {

namespace {

inline std::uint64_t load64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t load32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct run {
  std::uint32_t offset;
  std::uint32_t length;
};

// Calls f(run) for every run, validating against a unit of `len` bytes.
template <class F>
void for_each_run(std::span<const std::byte> encoded, std::size_t len, F&& f) {
  std::size_t at = 0;
  std::uint64_t last_end = 0;
  while (at < encoded.size()) {
    if (encoded.size() - at < 8) detail::fail(MDSM_ERR_MALFORMED, "diff: truncated run header");
    run r;
    std::memcpy(&r, encoded.data() + at, 8);
    at += 8;
    if (r.length == 0 || r.length % 4 != 0 || r.offset % 4 != 0)
      detail::fail(MDSM_ERR_MALFORMED, "diff: run not word aligned");
    if (r.offset < last_end || std::uint64_t{r.offset} + r.length > len)
      detail::fail(MDSM_ERR_MALFORMED, "diff: run outside the unit or out of order");
    if (encoded.size() - at < r.length) detail::fail(MDSM_ERR_MALFORMED, "diff: truncated run data");
    f(r, encoded.data() + at);
    at += r.length;
    last_end = std::uint64_t{r.offset} + r.length;
  }
}

}  // namespace

std::vector<std::byte> make_diff(const std::byte* page, const std::byte* twin, std::size_t len) {
  MDSM_ASSERT(len % 8 == 0, "unit size must be a multiple of 8");
  std::vector<std::byte> out;
  std::size_t i = 0;  // byte offset, advanced in 8-byte steps through equal regions
  while (i < len) {
    // Skip equal memory 32 bytes at a time, then 8 at a time.
    while (i + 32 <= len && ((load64(page + i) ^ load64(twin + i)) | (load64(page + i + 8) ^ load64(twin + i + 8)) |
                             (load64(page + i + 16) ^ load64(twin + i + 16)) |
                             (load64(page + i + 24) ^ load64(twin + i + 24))) == 0)
      i += 32;
    while (i < len && load64(page + i) == load64(twin + i)) i += 8;
    if (i >= len) break;
    // First changed 4-byte word at i or i + 4.
    std::size_t start = load32(page + i) != load32(twin + i) ? i : i + 4;
    std::size_t end = start + 4;
    while (end < len && load32(page + end) != load32(twin + end)) end += 4;
    const run r{static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(end - start)};
    const std::size_t at = out.size();
    out.resize(at + 8 + r.length);
    std::memcpy(out.data() + at, &r, 8);
    std::memcpy(out.data() + at + 8, page + start, r.length);
    // The word at `end` is unchanged (or end == len). Resume at the 8-byte step holding the word
    // after it: when end is 8-aligned that step also holds the unchanged word, which the
    // first-changed-word test above then skips.
    i = (end + 4) & ~std::size_t{7};
  }
  return out;
}

void apply_diff(std::byte* page, std::size_t len, std::span<const std::byte> encoded) {
  for_each_run(encoded, len, [](const run&, const std::byte*) {});  // validate everything first
  for_each_run(encoded, len, [&](const run& r, const std::byte* data) { std::memcpy(page + r.offset, data, r.length); });
}

std::size_t diff_runs(std::span<const std::byte> encoded, std::size_t len) {
  std::size_t n = 0;
  for_each_run(encoded, len, [&](const run&, const std::byte*) { ++n; });
  return n;
}

}  // namespace mdsm::coherence
