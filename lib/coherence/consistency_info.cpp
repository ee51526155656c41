#include "coherence/consistency_info.hpp"

#include "coherence/diff.hpp"

namespace mdsm::coherence {

std::span<const std::byte> decode_request_vt(std::span<const std::byte> cinfo, std::size_t ranks) {
  net::byte_reader in(cinfo);
  const auto n = in.get<std::uint32_t>();
  if (n != ranks) net::byte_reader::malformed("vector timestamp of the wrong width");
  const std::span<const std::byte> entries = in.get_bytes(std::size_t{n} * sizeof(std::uint32_t));
  in.expect_done();
  return entries;
}

release_info decode_release_info(int origin, std::span<const std::byte> cinfo, const wire_limits& limits) {
  // The transport checked the origin against the job's size; checked again here because the
  // required time is indexed by it below.
  if (origin < 0 || static_cast<std::size_t>(origin) >= limits.ranks) net::byte_reader::malformed("origin out of range");
  net::byte_reader in(cinfo);
  release_info info{origin, vector_time::decode(in, limits.ranks), {}, {}};
  const auto n = in.get<std::uint32_t>();
  if (n > in.remaining() / 12) net::byte_reader::malformed("more interval records than bytes");
  info.records.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto r = interval_record::decode(in, limits.ranks, limits.units);
    if (r->index > info.required[r->creator]) net::byte_reader::malformed("interval newer than the required time");
    info.records.push_back(std::move(r));
  }
  const auto pushed = in.get<std::uint32_t>();
  if (pushed > in.remaining() / 16) net::byte_reader::malformed("more pushed units than bytes");
  info.pushed.reserve(pushed);
  const auto origin_now = info.required[static_cast<std::size_t>(origin)];
  for (std::uint32_t i = 0; i < pushed; ++i) {
    pushed_unit p;
    p.unit = in.get<std::uint32_t>();
    p.after = in.get<std::uint32_t>();
    p.through = in.get<std::uint32_t>();
    if (p.unit >= limits.units) net::byte_reader::malformed("pushed diff for a unit outside the region");
    if (!info.pushed.empty() && p.unit <= info.pushed.back().unit) net::byte_reader::malformed("pushed units not sorted");
    if (p.after >= p.through || p.through > origin_now) net::byte_reader::malformed("pushed diff for unknown intervals");
    const auto pieces = in.get<std::uint32_t>();
    if (pieces > in.remaining() / 16) net::byte_reader::malformed("more pushed pieces than bytes");
    for (std::uint32_t k = 0; k < pieces; ++k) {
      pushed_unit::piece piece;
      piece.first = in.get<std::uint32_t>();
      piece.last = in.get<std::uint32_t>();
      if (piece.first == 0 || piece.last < piece.first) net::byte_reader::malformed("piece with an empty interval range");
      piece.serial = in.get<std::uint32_t>();
      const auto bytes = in.get_bytes(in.get<std::uint32_t>());
      diff_words(bytes, limits.unit_bytes);  // validates the encoding now: applying it must not fail
      piece.bytes.assign(bytes.begin(), bytes.end());
      p.pieces.push_back(std::move(piece));
    }
    info.pushed.push_back(std::move(p));
  }
  in.expect_done();
  return info;
}

}  // namespace mdsm::coherence
