// The payloads of the non-coherent region's operations (one_sided.hpp has the table), decoded as
// the target and the origin's reply handlers read them. Every field is checked before anything is
// used; a bad one raises MDSM_ERR_MALFORMED (net::byte_reader::malformed), so a corrupt or hostile
// peer's frame is dropped and reported, never applied. Pure functions over the payload and the
// region's bounds: the fuzz target (test/fuzz/fuzz_noncoherent.cpp) runs exactly what the
// handlers run. Checks that need an operation's state (a get reply's offset against its request,
// the header's token, the replying rank) stay with the handlers.
#pragma once

#include "net/wire.hpp"

#include <mdsm/mdsm_status.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace mdsm::regions::wire {

// The non-coherent region's addresses on the wire: [base, base + size).
struct bounds {
  std::uint64_t base = 0, size = 0;
  // The n bytes at a lie inside (n == 0: a itself does); no overflow for any a, n.
  bool contains(std::uint64_t a, std::uint64_t n) const noexcept {
    return a >= base && a - base <= size && n <= size - (a - base) && (n != 0 || a - base < size);
  }
};

struct get_request {
  std::uint64_t addr, len;
};
// op_get: addr, len (at least one byte, inside the region).
inline get_request decode_get(std::span<const std::byte> payload, const bounds& r) {
  net::byte_reader in(payload);
  const auto addr = in.get<std::uint64_t>(), len = in.get<std::uint64_t>();
  in.expect_done();
  if (len == 0 || !r.contains(addr, len)) net::byte_reader::malformed("get outside the non-coherent region");
  return {addr, len};
}

struct put_request {
  std::uint64_t addr;
  std::span<const std::byte> bytes;  // into the payload
};
// op_put: addr, then the bytes (inside the region; a chunk may be empty).
inline put_request decode_put(std::span<const std::byte> payload, const bounds& r) {
  net::byte_reader in(payload);
  const auto addr = in.get<std::uint64_t>();
  const auto bytes = in.get_bytes(in.remaining());
  if (!r.contains(addr, bytes.size())) net::byte_reader::malformed("put outside the non-coherent region");
  return {addr, bytes};
}

struct atomic_request {
  std::uint64_t addr, a, b;  // fetch_add: a = value; compare_swap: a = expected, b = desired
};
// op_fetch_add: addr, value; op_compare_swap: addr, expected, desired. The word is aligned and
// inside the region.
inline atomic_request decode_atomic(std::span<const std::byte> payload, bool compare_swap, const bounds& r) {
  net::byte_reader in(payload);
  atomic_request q{in.get<std::uint64_t>(), in.get<std::uint64_t>(), 0};
  if (compare_swap) q.b = in.get<std::uint64_t>();
  in.expect_done();
  if (!r.contains(q.addr, sizeof(std::uint64_t)) || q.addr % alignof(std::uint64_t) != 0)
    net::byte_reader::malformed("atomic on a word outside the non-coherent region or misaligned");
  return q;
}

// op_free: addr (the allocator checks it is an allocation of the target's arena).
inline std::uint64_t decode_free(std::span<const std::byte> payload) {
  net::byte_reader in(payload);
  const auto addr = in.get<std::uint64_t>();
  in.expect_done();
  return addr;
}

struct body_request {
  std::uint64_t addr, len;
  int tag;
};
// op_put_body / op_get_body: addr, len (1 .. body_max bytes inside the region), tag (< tags).
inline body_request decode_body(std::span<const std::byte> payload, const bounds& r, std::uint64_t body_max, int tags) {
  net::byte_reader in(payload);
  const auto addr = in.get<std::uint64_t>(), len = in.get<std::uint64_t>(), tag = in.get<std::uint64_t>();
  in.expect_done();
  if (len == 0 || len > body_max || !r.contains(addr, len))
    net::byte_reader::malformed("a body outside the non-coherent region");
  if (tag >= static_cast<std::uint64_t>(tags)) net::byte_reader::malformed("a body tag out of range");
  return {addr, len, static_cast<int>(tag)};
}

struct get_reply {
  std::uint64_t offset;
  std::span<const std::byte> bytes;  // into the payload
};
// op_get_reply: offset, then the bytes (the handler checks them against its request).
inline get_reply decode_get_reply(std::span<const std::byte> payload) {
  net::byte_reader in(payload);
  const auto offset = in.get<std::uint64_t>();
  return {offset, in.get_bytes(in.remaining())};
}

// op_atomic_reply: the word's old value.
inline std::uint64_t decode_atomic_reply(std::span<const std::byte> payload) {
  net::byte_reader in(payload);
  const auto old = in.get<std::uint64_t>();
  in.expect_done();
  return old;
}

struct free_reply {
  std::int32_t status;               // an mdsm_status
  std::span<const std::byte> why;    // the allocator's message (may be empty)
};
// op_free_reply: i32 status (a known mdsm_status), then the message.
inline free_reply decode_free_reply(std::span<const std::byte> payload) {
  net::byte_reader in(payload);
  const auto status = in.get<std::int32_t>();
  if (status < MDSM_SUCCESS || status > MDSM_ERR_INVALID_HANDLE) net::byte_reader::malformed("unknown status");
  return {status, in.get_bytes(in.remaining())};
}

// op_put_ack: empty.
inline void decode_put_ack(std::span<const std::byte> payload) { net::byte_reader(payload).expect_done(); }

}  // namespace mdsm::regions::wire
