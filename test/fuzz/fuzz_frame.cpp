// Fuzz target: whole frames as a rank receives them (net/wire.hpp): the header test, then what
// each channel's consumer decodes before it acts -- the control channel's large-frame
// announcement, the coherence operations' payloads, a user message's consistency information by
// its annotation. The seeds are real frames captured from running jobs (test/fuzz/README.md).
#include "fuzz_common.hpp"

#include "coherence/protocol.hpp"
#include "net/wire.hpp"

#include <mdsm/mdsm.hpp>

#include <cstring>

using namespace mdsm;
using namespace mdsm::coherence;

namespace {

constexpr std::uint32_t k_request[] = {17, 0, 5, 18, 2, 5, 19, 0, 3};

void deliver(std::span<const std::byte> bytes) {
  const auto& lim = fuzz::k_limits;
  net::frame_header h;
  if (bytes.size() < sizeof h) return;  // transport::deliver reports it
  std::memcpy(&h, bytes.data(), sizeof h);
  const int ranks = static_cast<int>(lim.ranks);
  const bool ok = net::header_ok(h, bytes.size(), ranks);
  if (ok != (net::header_problem(h, bytes.size(), ranks) == nullptr))
    fuzz::finding("header_ok and header_problem disagree");
  if (!ok) return;
  const auto payload = bytes.subspan(sizeof h, h.payload_len);
  const auto cinfo = bytes.subspan(sizeof h + h.payload_len, h.cinfo_len);
  switch (static_cast<net::channel>(h.chan)) {
    case net::channel::control:
      if (h.handler == net::k_op_large) {
        const auto len = net::decode_large_announcement(payload);
        if (len <= sizeof h || len > net::k_frame_limit) fuzz::finding("large frame of a bad length accepted");
      }
      break;
    case net::channel::coherence:
      switch (h.handler) {
        case op_diff_request:
        case op_copy_request:
        case op_diff_ahead:
        case op_copy_ahead: decode_unit_request(payload, lim.units, 1000); break;
        case op_diff_reply: decode_diff_reply(payload, k_request, [](std::size_t, const piece_view&) {}); break;
        case op_copy_reply:
          decode_copy_reply(payload, k_request, lim.unit_bytes, [](std::size_t, std::span<const std::byte>) {},
                            [](std::size_t, const piece_view&) {});
          break;
        case op_interval_request: decode_interval_request(payload, lim.ranks); break;
        case op_interval_reply: decode_interval_reply(payload, lim.ranks, lim.units); break;
        default:
          if (h.handler >= op_gc_want && h.handler <= op_gc_free) decode_gc(h.handler, payload, lim.ranks);
          break;
      }
      break;
    case net::channel::messages:
      // messages::endpoint::on_frame / deliver_annotated (the handler id is looked up in a table).
      switch (static_cast<annotation>(h.annot)) {
        case annotation::none: break;  // consistency information on a NONE message is rejected
        case annotation::request: decode_request_vt(cinfo, lim.ranks); break;
        case annotation::release:
        case annotation::release_nt: decode_release_info(h.origin, cinfo, lim); break;
        default: break;  // an unknown annotation is rejected
      }
      break;
    default: break;  // channel 0: reported by its consumer
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::expect_valid_or_malformed([&] { deliver(fuzz::bytes_of(data, size)); });
  return 0;
}
