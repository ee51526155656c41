// Malformed frames from a (buggy or hostile) peer are counted, reported and dropped; they never
// crash the receiver, corrupt its state, or stop later valid messages. The frames are injected
// into the receiver's ring with the transport's test hook, byte for byte as a peer would send them.
#include "support/mailbox.hpp"

#include "api/runtime.hpp"
#include "coherence/protocol.hpp"
#include "net/wire.hpp"

#include <cstring>
#include <vector>

using mdsm::annotation;
using namespace mdsm_test;

namespace {

std::vector<std::byte> frame(mdsm::net::frame_header h, std::vector<std::byte> payload = {},
                             std::vector<std::byte> cinfo = {}) {
  h.payload_len = static_cast<std::uint32_t>(payload.size());
  h.cinfo_len = static_cast<std::uint32_t>(cinfo.size());
  std::vector<std::byte> out(sizeof h);
  std::memcpy(out.data(), &h, sizeof h);
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), cinfo.begin(), cinfo.end());
  return out;
}

template <class... T>
std::vector<std::byte> words(T... v) {
  std::vector<std::byte> out;
  (
      [&] {
        const auto* p = reinterpret_cast<const std::byte*>(&v);
        out.insert(out.end(), p, p + sizeof v);
      }(),
      ...);
  return out;
}

}  // namespace

TEST_CASE("wire: malformed frames are dropped and counted; valid traffic goes on", "[mpi][wire][np2+]") {
  session s;
  mailbox box("wire.box");
  namespace net = mdsm::net;
  namespace coh = mdsm::coherence;
  const int me = mdsm::rank(), n = mdsm::size();
  std::vector<std::vector<std::byte>> bad;
  if (me == 1) {
    const auto msg = [&](std::uint32_t handler, annotation a) {
      return net::make_header(net::channel::messages, handler, me, static_cast<std::uint8_t>(a));
    };
    bad.push_back(std::vector<std::byte>(3));  // shorter than a header
    auto h = msg(box.id(), annotation::none);
    h.magic = 0x1234;
    bad.push_back(frame(h));  // bad magic
    h = msg(box.id(), annotation::none);
    h.chan = 9;
    bad.push_back(frame(h));  // unknown channel
    h = msg(box.id(), annotation::none);
    h.origin = n + 5;
    bad.push_back(frame(h, words(7L)));  // origin out of range
    auto lying = frame(msg(box.id(), annotation::none), words(7L));
    lying.resize(lying.size() - 3);
    bad.push_back(lying);  // lengths disagree with the frame size
    bad.push_back(frame(msg(box.id() + 500, annotation::none), words(7L)));  // unknown handler
    bad.push_back(frame(msg(box.id(), static_cast<annotation>(6)), words(7L)));  // invalid annotation
    bad.push_back(frame(msg(box.id(), annotation::none), words(7L), words(1u)));  // NONE with cinfo
    bad.push_back(frame(msg(box.id(), annotation::request), words(7L), words(1u)));  // short vector time
    bad.push_back(frame(msg(box.id(), annotation::release), words(7L),
                        words(0u, 0u, 0u, 0u, 0xFFFFFFFFu)));  // more records than bytes
    bad.push_back(frame(net::make_header(net::channel::coherence, 99, me)));  // unknown operation
    bad.push_back(frame(net::make_header(net::channel::coherence, coh::op_diff_request, me),
                        words(0xFFFFFFF0u, 0u)));  // unit outside the region
    bad.push_back(frame(net::make_header(net::channel::coherence, coh::op_interval_request, me),
                        words(1u, 77u, 0u, 5u)));  // creator out of range
    bad.push_back(frame(net::make_header(net::channel::coherence, coh::op_diff_reply, me, 0, 4242),
                        words(0u)));  // reply nobody asked for
    bad.push_back(frame(net::make_header(net::channel::control, 1, me), words(std::uint64_t{1} << 40)));  // huge body
    for (const auto& f : bad) mdsm::detail::rt().transport->send_raw_for_test(0, f);
    box.send(0, annotation::release, 99);  // still delivered, in order, after the garbage
  }
  const long injected = world_sum(static_cast<long long>(bad.size()));
  if (me == 0) {
    box.wait(1, 1);
    CHECK(box.values().back() == 99);
    CHECK(static_cast<long>(stat("frames_malformed")) == injected);
  }
  world_barrier();
}
