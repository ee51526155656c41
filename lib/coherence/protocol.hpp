// Operation codes of the coherence channel (frame_header::handler on net::channel::coherence)
// and their payloads. Replies carry the request's token.
//
//   op_diff_request       u32 unit, u32 n, u32 interval[n]          (intervals of the receiver)
//   op_diff_reply         u32 unit, pieces
//   op_copy_request       u32 unit, u32 n, u32 interval[n]          (to the unit's home)
//   op_copy_reply         u32 unit, u8 allocated, [unit bytes if allocated], pieces
//   op_interval_request   u32 n, (u32 creator, u32 after, u32 through)[n]
//   op_interval_reply     u32 n, interval_record[n]
//
// pieces = u32 count, then per piece: u32 n, u32 interval[n] (every interval of the creator the
// piece holds writes of, requested or not: a lazy diff covers all intervals that awaited its
// twin), u32 length, length bytes of encoded diff.
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
