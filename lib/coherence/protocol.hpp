// Operation codes of the coherence channel (frame_header::handler on net::channel::coherence)
// and their payloads. Replies carry the request's token.
//
//   op_diff_request       u32 n, (u32 unit, u32 after, u32 through)[n]   (per unit: the receiver's
//                                   writes to it in its intervals (after, through]; n >= 1, the
//                                   faulting unit first, then neighbours fetched in the same round)
//   op_diff_reply         u32 n, (u32 unit, pieces)[n]             (in request order)
//   op_copy_request       u32 n, (u32 unit, u32 after, u32 through)[n]   (to the units' home, for
//                                   its copies and its writes in (after, through], a range that
//                                   may be empty: after >= through; the faulting unit first, then
//                                   neighbours without a copy that have the same home)
//   op_copy_reply         u32 m, (u32 unit, u8 status, [unit bytes, pieces if status == 1])[m]
//                                   (in request order, m <= n: it ends at the first unit whose
//                                   status is not 1. Status: 0 not allocated at the home, 1 the
//                                   copy follows, 2 busy: the home is bringing its copy up to
//                                   date, ask again)
//   op_interval_request   u32 n, (u32 creator, u32 after, u32 through)[n]
//   op_interval_reply     u32 n, interval_record[n]
//   op_gc_*               u32 epoch [, vector time]: see below and background_gc.cpp
//
// pieces = u32 count, then per piece: u32 first, u32 last (the range of the creator's intervals
// whose writes to the unit the piece holds, requested or not: a lazy diff covers all intervals
// that awaited its twin), u32 serial (the creator's diff serial: a receiver applies each piece
// at most once), u32 length, length bytes of encoded diff.
#pragma once

#include <cstdint>

namespace mdsm::coherence {

enum : std::uint8_t { k_copy_unallocated = 0, k_copy_follows = 1, k_copy_busy = 2 };

enum : std::uint32_t {
  op_diff_request = 1,
  op_diff_reply = 2,
  op_copy_request = 3,
  op_copy_reply = 4,
  op_interval_request = 5,
  op_interval_reply = 6,
  // Garbage collection without a barrier (background_gc.cpp); payload u32 epoch [, vt]
  op_gc_want = 7,   // any rank -> coordinator (rank 0): metadata passed 1.5x the threshold
  op_gc_begin = 8,  // coordinator -> every rank: send your vector time
  op_gc_vt = 9,     // -> coordinator: u32 epoch, vt
  op_gc_cut = 10,   // coordinator -> every rank: u32 epoch, vt G (the minimum of all)
  op_gc_ready = 11, // -> coordinator: every copy here holds every write up to G, or is gone
  op_gc_free = 12,  // coordinator -> every rank: u32 epoch, vt G: free everything up to G
};

}  // namespace mdsm::coherence
