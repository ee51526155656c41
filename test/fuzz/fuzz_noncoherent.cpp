// Fuzz target: the payloads of the non-coherent region's operations (regions/one_sided_wire.hpp),
// as the target's handlers and the origin's reply handlers decode them.
//
// Input: one selector byte (the operation, one_sided::op), then the payload. The region is
// k_bounds (1 GiB, the default size, at a fixed address); what an accepted request names must
// lie inside it:
//   get                  addr, len: at least one byte, inside
//   put                  addr + bytes: inside
//   fetch_add / cas      an aligned word inside
//   put_body / get_body  1 .. k_body_max bytes inside, tag below k_tags
//   free, replies        their fields (a free reply's status a known one)
// Seeds: test/fuzz/noncoherent_seeds.py (one valid payload of each operation, and edge cases).
#include "fuzz_common.hpp"

#include "regions/one_sided.hpp"
#include "regions/one_sided_wire.hpp"

using namespace mdsm;
using namespace mdsm::regions;

namespace {

constexpr wire::bounds k_bounds{0x7e0000000000ull, std::uint64_t{1} << 30};

void inside(std::uint64_t addr, std::uint64_t len) {
  if (addr < k_bounds.base || addr - k_bounds.base > k_bounds.size || len > k_bounds.size - (addr - k_bounds.base))
    fuzz::finding("an operation outside the region accepted");
}

void decode(std::uint8_t op, std::span<const std::byte> payload) {
  switch (op % 16) {
    case one_sided::op_get: {
      const auto g = wire::decode_get(payload, k_bounds);
      if (g.len == 0) fuzz::finding("an empty get accepted");
      inside(g.addr, g.len);
      break;
    }
    case one_sided::op_put: {
      const auto p = wire::decode_put(payload, k_bounds);
      inside(p.addr, p.bytes.size());
      if (p.bytes.data() != nullptr && p.bytes.size() > payload.size()) fuzz::finding("put bytes beyond the payload");
      break;
    }
    case one_sided::op_fetch_add:
    case one_sided::op_compare_swap: {
      const auto q = wire::decode_atomic(payload, op % 16 == one_sided::op_compare_swap, k_bounds);
      if (q.addr % 8 != 0) fuzz::finding("a misaligned atomic accepted");
      inside(q.addr, 8);
      break;
    }
    case one_sided::op_free: wire::decode_free(payload); break;
    case one_sided::op_put_body:
    case one_sided::op_get_body: {
      const auto b = wire::decode_body(payload, k_bounds, one_sided::k_body_max, one_sided::k_tags);
      if (b.len == 0 || b.len > one_sided::k_body_max || b.tag < 0 || b.tag >= one_sided::k_tags)
        fuzz::finding("a body of a bad size or tag accepted");
      inside(b.addr, b.len);
      break;
    }
    case one_sided::op_get_reply: {
      const auto r = wire::decode_get_reply(payload);
      if (r.bytes.size() + sizeof r.offset != payload.size()) fuzz::finding("get reply bytes of the wrong length");
      break;
    }
    case one_sided::op_atomic_reply: wire::decode_atomic_reply(payload); break;
    case one_sided::op_free_reply: {
      const auto r = wire::decode_free_reply(payload);
      if (r.status < MDSM_SUCCESS || r.status > MDSM_ERR_TASK_FAILED) fuzz::finding("an unknown status accepted");
      break;
    }
    case one_sided::op_put_ack: wire::decode_put_ack(payload); break;
    default:  // unknown operations are rejected by the dispatch (one_sided::on_frame)
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz::selector_and_payload(data, size, decode);
}
