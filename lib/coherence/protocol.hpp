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
//   op_diff_ahead, op_copy_ahead   as op_diff_request / op_copy_request, for units asked for
//                                   ahead of any fault (a prefetch window; a home's validation in
//                                   a background collection): none of them was read, so none
//                                   counts as read where the server learns what to push
//   op_interval_request   u32 n, (u32 creator, u32 after, u32 through)[n]
//   op_interval_reply     u32 n, interval_record[n]
//   op_gc_*               u32 epoch [, vector time]: see below and background_gc.cpp
//
// pieces = u32 count, then per piece: u32 first, u32 last (the range of the creator's intervals
// whose writes to the unit the piece holds, requested or not: a lazy diff covers all intervals
// that awaited its twin), u32 serial (the creator's diff serial: a receiver applies each piece
// at most once), u32 length, length bytes of encoded diff.
//
// The decoders below are what the handlers use on received payloads: pure functions of the bytes
// and the job's sizes that validate everything (MDSM_ERR_MALFORMED) before the engine acts on it,
// and that test/fuzz runs on arbitrary input.
#pragma once

#include "coherence/interval.hpp"
#include "net/wire.hpp"

#include <cstdint>
#include <span>
#include <vector>

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
  op_diff_ahead = 13,  // op_diff_request's payload and reply, no unit read yet
  op_copy_ahead = 14,  // op_copy_request's payload and reply, no unit read yet
};

// The operations whose reply a rank waits for (engine::send_protocol sends them as requests).
constexpr bool is_request(std::uint32_t op) {
  return op == op_diff_request || op == op_copy_request || op == op_diff_ahead || op == op_copy_ahead ||
         op == op_interval_request;
}

// One piece of a diff or copy reply (`pieces` above); `bytes` points into the reply and is
// validated as a diff when it is applied (apply_diff checks everything before it writes).
struct piece_view {
  std::uint32_t first, last, serial;
  std::span<const std::byte> bytes;
};
// Reads one piece: first >= 1, last >= first, the length inside the reply.
piece_view read_piece(net::byte_reader& in);

// op_diff_request / op_copy_request and their _ahead forms: n >= 1 triples (unit, after,
// through), every unit inside the region (< units) and no range reaching past `closed` (the
// serving rank's newest closed interval). Returns the 3n values.
std::vector<std::uint32_t> decode_unit_request(std::span<const std::byte> payload, std::uint32_t units,
                                               std::uint32_t closed);

// op_interval_request: triples (creator, after, through), every creator < ranks.
std::vector<std::uint32_t> decode_interval_request(std::span<const std::byte> payload, std::size_t ranks);

// op_interval_reply: interval records, each validated (interval_record::decode).
std::vector<record_ptr> decode_interval_reply(std::span<const std::byte> payload, std::size_t ranks,
                                              std::uint32_t units);

// op_diff_reply to a request of the triples `request` (unit, after, through)...: one entry per
// requested unit, in request order. Calls on_piece(k, piece) for every piece of entry k.
template <class OnPiece>
void decode_diff_reply(std::span<const std::byte> payload, std::span<const std::uint32_t> request, OnPiece&& on_piece) {
  net::byte_reader in(payload);
  const auto n = in.get<std::uint32_t>();
  if (n != request.size() / 3) net::byte_reader::malformed("reply for another set of units");
  for (std::uint32_t k = 0; k < n; ++k) {
    if (in.get<std::uint32_t>() != request[3 * std::size_t{k}]) net::byte_reader::malformed("reply for another unit");
    const auto count = in.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < count; ++i) on_piece(std::size_t{k}, read_piece(in));
  }
  in.expect_done();
}

// How an op_copy_reply ended: `copies` entries carried a copy; `status` is the status of the
// entry after them (k_copy_unallocated or k_copy_busy), or k_copy_follows if every entry did.
struct copy_reply_end {
  std::uint32_t copies;
  std::uint8_t status;
};
// op_copy_reply to a request of the triples `request`: m entries, 1 <= m <= requested units, in
// request order, ending at the first whose status is not k_copy_follows (nothing follows that
// status). Calls on_copy(k, bytes) with the unit's bytes (unit_bytes of them) and on_piece(k,
// piece) for every piece of entry k.
template <class OnCopy, class OnPiece>
copy_reply_end decode_copy_reply(std::span<const std::byte> payload, std::span<const std::uint32_t> request,
                                 std::size_t unit_bytes, OnCopy&& on_copy, OnPiece&& on_piece) {
  net::byte_reader in(payload);
  const auto m = in.get<std::uint32_t>();
  if (m == 0 || m > request.size() / 3) net::byte_reader::malformed("copy reply with a bad unit count");
  copy_reply_end end{0, k_copy_follows};
  for (std::uint32_t k = 0; k < m; ++k) {
    if (in.get<std::uint32_t>() != request[3 * std::size_t{k}]) net::byte_reader::malformed("reply for another unit");
    const auto status = in.get<std::uint8_t>();
    if (status > k_copy_busy) net::byte_reader::malformed("copy reply with an unknown status");
    if (status != k_copy_follows) {
      if (k + 1 != m) net::byte_reader::malformed("copy reply goes on after a unit without a copy");
      end.status = status;
      break;
    }
    on_copy(std::size_t{k}, in.get_bytes(unit_bytes));
    const auto count = in.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < count; ++i) on_piece(std::size_t{k}, read_piece(in));
    ++end.copies;
  }
  in.expect_done();
  return end;
}

// The garbage-collection operations (op_gc_*): u32 epoch, then a vector time (ranks entries) for
// op_gc_vt, op_gc_cut and op_gc_free; `vt` is empty for the others.
struct gc_message {
  std::uint32_t epoch;
  vector_time vt;
};
gc_message decode_gc(std::uint32_t op, std::span<const std::byte> payload, std::size_t ranks);

}  // namespace mdsm::coherence
