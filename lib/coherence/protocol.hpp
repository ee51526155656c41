// Operation codes of the coherence channel (frame_header::handler on net::channel::coherence)
// and their payloads. Replies carry the request's token.
//
//   op_diff_request       u32 n, (u32 unit, u32 after, u32 through)[n]   (per unit: the receiver's
//                                   writes to it in its intervals (after, through]; n >= 1, the
//                                   faulting unit first, then neighbours fetched in the same round)
//   op_diff_reply         u32 n, (u32 unit, pieces)[n]             (in request order)
//   op_copy_request       u32 unit, u32 after, u32 through   (to the unit's home; the range may
//                                                             be empty: after >= through)
//   op_copy_reply         u32 unit, u8 allocated, [unit bytes if allocated], pieces
//   op_interval_request   u32 n, (u32 creator, u32 after, u32 through)[n]
//   op_interval_reply     u32 n, interval_record[n]
//
// pieces = u32 count, then per piece: u32 first, u32 last (the range of the creator's intervals
// whose writes to the unit the piece holds, requested or not: a lazy diff covers all intervals
// that awaited its twin), u32 serial (the creator's diff serial: a receiver applies each piece
// at most once), u32 length, length bytes of encoded diff.
#pragma once

#include <cstdint>

namespace mdsm::coherence {

enum : std::uint32_t {
  op_diff_request = 1,
  op_diff_reply = 2,
  op_copy_request = 3,
  op_copy_reply = 4,
  op_interval_request = 5,
  op_interval_reply = 6,
};

}  // namespace mdsm::coherence
