// Fuzz target: the payloads of the coherence protocol (coherence/protocol.hpp) and of the
// coordination messages (sync::read_payload), as the handlers decode them.
//
// Input: one selector byte (the operation), then the payload.
//   diff / copy request      decode_unit_request: n >= 1 triples, units inside the region, no range
//                            past the serving rank's newest closed interval
//   interval request, reply  decode_interval_request / decode_interval_reply
//   diff / copy reply        decode_diff_reply / decode_copy_reply, answering a fixed request of
//                            three units (as a fault with two neighbours asks), every piece read
//                            and its diff validated as install_locked does when it applies it
//   gc operations            decode_gc
//   coordination messages    the layouts the lib/sync handlers read
#include "fuzz_common.hpp"

#include "coherence/diff.hpp"
#include "coherence/protocol.hpp"
#include "sync/services.hpp"

using namespace mdsm;
using namespace mdsm::coherence;

namespace {

constexpr std::uint32_t k_closed = 1000;  // the serving rank's newest closed interval
constexpr std::uint32_t k_request[] = {17, 0, 5, 18, 2, 5, 19, 0, 3};  // (unit, after, through) x 3

void check_piece(const piece_view& p) {
  if (p.first == 0 || p.last < p.first) fuzz::finding("piece with an empty range accepted");
  diff_words(p.bytes, fuzz::k_limits.unit_bytes);  // what applying it checks first
}

void decode(std::uint8_t op, std::span<const std::byte> payload) {
  const auto& lim = fuzz::k_limits;
  switch (op % 16) {
    case op_diff_request:  // and op_diff_ahead, op_copy_ahead: the same decoder (their slots hold barrier layouts)
    case op_copy_request: {
      const auto req = decode_unit_request(payload, lim.units, k_closed);
      if (req.empty() || req.size() % 3 != 0) fuzz::finding("unit request of a bad shape accepted");
      for (std::size_t k = 0; k < req.size(); k += 3)
        if (req[k] >= lim.units || req[k + 2] > k_closed) fuzz::finding("unit request out of range accepted");
      break;
    }
    case op_diff_reply:
      decode_diff_reply(payload, k_request, [](std::size_t k, const piece_view& p) {
        if (k >= 3) fuzz::finding("diff reply entry beyond the request");
        check_piece(p);
      });
      break;
    case op_copy_reply: {
      const copy_reply_end end = decode_copy_reply(
          payload, k_request, lim.unit_bytes,
          [&](std::size_t k, std::span<const std::byte> copy) {
            if (k >= 3 || copy.size() != lim.unit_bytes) fuzz::finding("copy of a bad size accepted");
          },
          [](std::size_t k, const piece_view& p) {
            if (k >= 3) fuzz::finding("copy reply entry beyond the request");
            check_piece(p);
          });
      if (end.copies > 3 || end.status > k_copy_busy) fuzz::finding("copy reply end out of range");
      break;
    }
    case op_interval_request: {
      const auto ranges = decode_interval_request(payload, lim.ranks);
      for (std::size_t k = 0; k < ranges.size(); k += 3)
        if (ranges[k] >= lim.ranks) fuzz::finding("interval request for an unknown creator accepted");
      break;
    }
    case op_interval_reply:
      for (const auto& r : decode_interval_reply(payload, lim.ranks, lim.units))
        if (r->creator >= lim.ranks || r->vt[r->creator] != r->index) fuzz::finding("bad interval record accepted");
      break;
    case op_gc_want:
    case op_gc_begin:
    case op_gc_vt:
    case op_gc_cut:
    case op_gc_ready:
    case op_gc_free: {
      const gc_message m = decode_gc(op % 16, payload, lim.ranks);
      const bool with_vt = op % 16 == op_gc_vt || op % 16 == op_gc_cut || op % 16 == op_gc_free;
      if (m.vt.size() != (with_vt ? lim.ranks : 0)) fuzz::finding("collection message of a bad shape accepted");
      break;
    }
    case 0:  // coordination messages: every layout a handler reads
      sync::read_payload<>(payload);
      break;
    case 13: sync::read_payload<sync::barrier_arrival>(payload); break;
    case 14: sync::read_payload<sync::barrier_departure>(payload); break;
    default:  // unknown coherence operations are rejected by the dispatch (engine::on_frame)
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz::selector_and_payload(data, size, decode);
}
