#include "coherence/protocol.hpp"

namespace mdsm::coherence {

piece_view read_piece(net::byte_reader& in) {
  piece_view p;
  p.first = in.get<std::uint32_t>();
  p.last = in.get<std::uint32_t>();
  if (p.first == 0 || p.last < p.first) net::byte_reader::malformed("piece with an empty interval range");
  p.serial = in.get<std::uint32_t>();
  p.bytes = in.get_bytes(in.get<std::uint32_t>());
  return p;
}

std::vector<std::uint32_t> decode_unit_request(std::span<const std::byte> payload, std::uint32_t units,
                                               std::uint32_t closed) {
  net::byte_reader in(payload);
  // Both name a batch of units, the faulting one first.
  const std::uint32_t n = in.get<std::uint32_t>();
  if (n == 0 || n > in.remaining() / 12) net::byte_reader::malformed("diff request with a bad unit count");
  std::vector<std::uint32_t> req;
  in.get_array(std::size_t{n} * 3, req);
  in.expect_done();
  for (std::uint32_t k = 0; k < n; ++k) {
    if (req[3 * k] >= units) net::byte_reader::malformed("request for a unit outside the region");
    if (req[3 * k + 2] > closed) net::byte_reader::malformed("request for an interval this rank has not closed");
  }
  return req;
}

std::vector<std::uint32_t> decode_interval_request(std::span<const std::byte> payload, std::size_t ranks) {
  net::byte_reader in(payload);
  const auto n = in.get<std::uint32_t>();
  if (n > in.remaining() / 12) net::byte_reader::malformed("interval request longer than the frame");
  std::vector<std::uint32_t> ranges;
  in.get_array(std::size_t{n} * 3, ranges);
  in.expect_done();
  for (std::size_t k = 0; k < ranges.size(); k += 3)
    if (ranges[k] >= ranks) net::byte_reader::malformed("interval creator out of range");
  return ranges;
}

std::vector<record_ptr> decode_interval_reply(std::span<const std::byte> payload, std::size_t ranks,
                                              std::uint32_t units) {
  net::byte_reader in(payload);
  const auto n = in.get<std::uint32_t>();
  // A record is at least 16 bytes (creator, index, vector time width, run count): checked before
  // anything is reserved.
  if (n > in.remaining() / 16) net::byte_reader::malformed("more interval records than bytes");
  std::vector<record_ptr> got;
  got.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) got.push_back(interval_record::decode(in, ranks, units));
  in.expect_done();
  return got;
}

gc_message decode_gc(std::uint32_t op, std::span<const std::byte> payload, std::size_t ranks) {
  if (op < op_gc_want || op > op_gc_free) net::byte_reader::malformed("unknown collection operation");
  net::byte_reader in(payload);
  gc_message m{in.get<std::uint32_t>(), {}};
  if (op == op_gc_vt || op == op_gc_cut || op == op_gc_free) m.vt = vector_time::decode(in, ranks);
  in.expect_done();
  return m;
}

}  // namespace mdsm::coherence
