// The consistency information annotated messages carry (docs/PROTOCOL.md, "Consistency
// information by annotation"), as it arrives: decoded and validated by pure functions, so that
// every check runs before the engine touches anything, and so that the decoders can be fuzzed
// without a running job (test/fuzz).
//
// Every decoder reads only its span, raises MDSM_ERR_MALFORMED (net::byte_reader::malformed) on
// anything out of range, and allocates in proportion to the bytes it was given.
#pragma once

#include "coherence/interval.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace mdsm::coherence {

// What the decoders check counts, ranks and units against: the job's and the region's sizes.
struct wire_limits {
  std::size_t ranks;       // vector times have exactly this many entries; creators are below it
  std::uint32_t units;     // unit numbers are below it
  std::size_t unit_bytes;  // every diff is validated for a unit of this size
};

// A diff the origin of a RELEASE pushed along with it (Keleher's lazy hybrid), for a unit the
// first receiver keeps re-reading: its pieces hold every write of the origin to the unit in the
// origin's intervals (after, through]. A receiver whose copy lacks nothing else applies them at
// the acquire instead of invalidating the unit, which saves the fault and the round trip.
struct pushed_unit {
  std::uint32_t unit, after, through;
  struct piece {
    std::uint32_t first, last, serial;  // as in a diff reply (coherence/protocol.hpp)
    std::vector<std::byte> bytes;       // a validated encoded diff
  };
  std::vector<piece> pieces;
};

// Decoded consistency information of a RELEASE or RELEASE_NT message.
struct release_info {
  int origin;                        // original sender: has every interval up to `required`
  vector_time required;              // the origin's vector time when it sent
  std::vector<record_ptr> records;   // intervals attached for the first receiver
  std::vector<pushed_unit> pushed;   // the origin's diffs pushed along, by increasing unit
};

// REQUEST: the sender's vector time, `u32 n, u32 vt[n]` with n == limits.ranks. Returns its
// n entries (host-order u32, for vector_time::merge_encoded), a view into `cinfo`.
std::span<const std::byte> decode_request_vt(std::span<const std::byte> cinfo, std::size_t ranks);

// RELEASE / RELEASE_NT from `origin`: required vector time, interval records (none newer than
// the required time), pushed diffs (units sorted and inside the region, ranges within the
// origin's required entry, every diff a valid encoding for the unit size).
release_info decode_release_info(int origin, std::span<const std::byte> cinfo, const wire_limits& limits);

}  // namespace mdsm::coherence
