// Diffs: the words of a coherence unit that changed since its twin was made, run-length encoded.
//
// Granularity is the 4-byte word, so two ranks writing neighbouring ints of one page merge
// correctly (writers of different bytes within one word do not; as in TreadMarks, such a
// program has a data race at word granularity).
//
// Encoding: a sequence of runs, each `u32 byte_offset, u32 byte_length, byte_length bytes`,
// offsets increasing, lengths non-zero multiples of 4. Runs never include an unchanged word:
// writing an unchanged word back would overwrite another writer's change to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace mdsm::coherence {

struct diff {
  std::vector<std::byte> bytes;
  // Creation order of this rank's diffs (1, 2, ...): a piece can hold the writes of several
  // intervals, and a receiver that applied it once must never apply it again (it would undo
  // newer writes to the same words), so receivers remember the newest serial they applied.
  std::uint32_t serial = 0;
  std::size_t footprint() const { return sizeof(*this) + bytes.capacity(); }
};
using diff_ptr = std::shared_ptr<const diff>;

// Encodes the words where `page` differs from `twin`. Pre: len is a multiple of 8.
std::vector<std::byte> make_diff(const std::byte* page, const std::byte* twin, std::size_t len);

// Applies an encoded diff to `page` of `len` bytes. Validates every run first (a malformed diff
// raises MDSM_ERR_MALFORMED and leaves the page untouched).
void apply_diff(std::byte* page, std::size_t len, std::span<const std::byte> encoded);

// Number of runs, after the same validation as apply_diff.
std::size_t diff_runs(std::span<const std::byte> encoded, std::size_t len);

}  // namespace mdsm::coherence
