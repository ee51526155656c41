// Fuzz target: consistency information (coherence/consistency_info.hpp, interval.hpp), what
// REQUEST, RELEASE and RELEASE_NT messages and interval replies carry: vector times, interval
// records with their write notices (runs of units), pushed diffs.
//
// Input: one selector byte, then the bytes as they follow a frame's payload. Selector bits 0-1:
//   0, 3  RELEASE / RELEASE_NT from origin (bits 2-3): decode_release_info, and what it accepted
//         must satisfy what the engine relies on (records no newer than the required time, runs
//         sorted, disjoint and inside the region, pushed units sorted with valid diffs);
//   1     REQUEST: decode_request_vt;
//   2     one interval record: decoded, re-encoded, it must give back exactly the bytes read.
#include "fuzz_common.hpp"

#include "coherence/diff.hpp"

using namespace mdsm;
using namespace mdsm::coherence;

namespace {

void check_release(const release_info& info) {
  const auto& lim = fuzz::k_limits;
  if (info.required.size() != lim.ranks) fuzz::finding("required vector time of the wrong width");
  for (const auto& r : info.records) {
    if (r->creator >= lim.ranks || r->index == 0 || r->index > info.required[r->creator])
      fuzz::finding("interval record outside the required time");
    if (r->vt[r->creator] != r->index) fuzz::finding("interval record whose vector time disagrees with its index");
    std::uint64_t prev_end = 0;
    for (std::size_t i = 0; i < r->runs.size(); ++i) {
      const unit_run& run = r->runs[i];
      if (run.count == 0 || std::uint64_t{run.first} + run.count > lim.units) fuzz::finding("run outside the region");
      if (i > 0 && run.first <= prev_end) fuzz::finding("runs not sorted, disjoint and apart");
      prev_end = run.end();
    }
  }
  for (std::size_t i = 0; i < info.pushed.size(); ++i) {
    const pushed_unit& p = info.pushed[i];
    if (p.unit >= lim.units || (i > 0 && p.unit <= info.pushed[i - 1].unit)) fuzz::finding("pushed units not sorted");
    if (p.after >= p.through || p.through > info.required[static_cast<std::size_t>(info.origin)])
      fuzz::finding("pushed range outside the origin's intervals");
    for (const auto& piece : p.pieces) {
      if (piece.first == 0 || piece.last < piece.first) fuzz::finding("pushed piece with an empty range");
      diff_words(piece.bytes, lim.unit_bytes);  // accepted pieces are valid diffs: must not throw
    }
  }
}

void record_round_trip(std::span<const std::byte> in_bytes) {
  net::byte_reader in(in_bytes);
  const record_ptr r = interval_record::decode(in, fuzz::k_limits.ranks, fuzz::k_limits.units);
  net::byte_writer out;
  r->encode(out);
  const std::size_t read = in_bytes.size() - in.remaining();
  const auto again = out.bytes();
  if (again.size() != read || !std::equal(again.begin(), again.end(), in_bytes.begin()))
    fuzz::finding("an interval record does not re-encode to the bytes it was decoded from");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const auto cinfo = fuzz::bytes_of(data + 1, size - 1);
  fuzz::expect_valid_or_malformed([&] {
    switch (selector & 3) {
      case 0:
      case 3: check_release(decode_release_info((selector >> 2) & 3, cinfo, fuzz::k_limits)); break;
      case 1:
        if (decode_request_vt(cinfo, fuzz::k_limits.ranks).size() != 4 * fuzz::k_limits.ranks)
          fuzz::finding("request vector time of the wrong width");
        break;
      case 2: record_round_trip(cinfo); break;
    }
  });
  return 0;
}
