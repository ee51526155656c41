// Diffs pushed along with RELEASEs (Keleher's lazy hybrid): a rank that keeps fetching one of
// our units gets its diffs on our next RELEASEs to it (a bounded number), and applies them at
// the acquire instead of faulting and fetching (COHERENCE.md §3). Serving a fetch counts it
// (note_fetch_locked, from service.cpp); decoding is part of decode_release (engine.cpp).
#include "coherence/engine.hpp"

#include "coherence/diff.hpp"
#include "stats/counters.hpp"

#include <algorithm>

namespace mdsm::coherence {

void engine::note_fetch_locked(std::uint32_t u, page_entry& pe, int source, std::uint32_t held) {
  // A unit a rank fetches again and again (a boundary row, a counter under a lock) is pushed
  // along with our next RELEASEs to it; the budget doubles with every fetch after it ran out
  // (4, 8, ..., 255), so a unit read in every round is fetched rarely, and one read twice costs
  // at most a few unused pushes.
  if (pe.push.empty()) pe.push.resize(static_cast<std::size_t>(size_));
  auto& st = pe.push[static_cast<std::size_t>(source)];
  st.through = std::max(st.through, held);
  if (st.fetches < 255) ++st.fetches;
  if (st.fetches < 2) return;
  st.budget = static_cast<std::uint8_t>(std::min(255u, 4u << std::min(st.fetches - 2u, 6u)));
  std::lock_guard lk(push_mutex_);
  push_sets_[static_cast<std::size_t>(source)].insert(u);
}

void engine::encode_pushed_locked(int dest, std::uint32_t through, net::byte_writer& out) {
  // Bounded, so a RELEASE stays a small message: the rest is fetched on demand as usual.
  constexpr std::size_t k_push_bytes = 64 * 1024;
  const std::size_t count_at = out.reserve_slot<std::uint32_t>();
  const std::size_t start = out.size();
  std::uint32_t count = 0;
  std::vector<std::uint32_t> units;
  {
    std::lock_guard lk(push_mutex_);
    const auto& set = push_sets_[static_cast<std::size_t>(dest)];
    units.assign(set.begin(), set.end());
  }
  std::vector<std::uint32_t> exhausted;
  for (std::uint32_t u : units) {
    if (out.size() - start >= k_push_bytes) break;
    std::lock_guard lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    auto& st = pe.push[static_cast<std::size_t>(dest)];
    if (st.budget == 0) {
      exhausted.push_back(u);
      continue;
    }
    // From where dest's copy is (it fetched or was pushed our writes up to st.through; if it
    // never applied a push, the next fetch tells us again), so the pushed diffs are all it lacks.
    const std::uint32_t after = st.through;
    if (after >= through) continue;
    auto [b, e] = pe.own_overlapping(after, through, last_closed_.load(std::memory_order_relaxed));
    if (b == e) continue;  // not written in these intervals: nothing to push
    out.put(u);
    out.put(after);
    out.put(through);
    encode_pieces_locked(u, pe, after, through, out);
    st.through = through;
    ++count;
    if (--st.budget == 0) exhausted.push_back(u);
  }
  out.fill_slot(count_at, count);
  if (count != 0) {
    stats::add(stats::counter::pushed_units_sent, count);
    stats::add(stats::counter::pushed_bytes_sent, out.size() - start);
  }
  if (!exhausted.empty()) {
    std::lock_guard lk(push_mutex_);
    auto& set = push_sets_[static_cast<std::size_t>(dest)];
    for (std::uint32_t u : exhausted) set.erase(u);
  }
}

bool engine::apply_pushed_locked(std::uint32_t u, page_entry& pe, int creator, const pushed_unit& p) {
  if ((pe.state != page_state::valid && pe.state != page_state::invalid) || pe.fetching) return false;
  const std::vector<wanted> wants = wanted_locked(u, pe);
  // Only if the pushed diffs hold everything the copy lacks; otherwise the unit is fetched as
  // usual (pieces from several writers must be applied together, in happened-before order).
  if (wants.size() != 1 || wants[0].creator != static_cast<std::uint32_t>(creator) || p.after > wants[0].after ||
      p.through < wants[0].through) {
    if (wants.empty() && pe.state == page_state::valid) return false;  // had it all: nothing to do
    stats::add(stats::counter::pushed_units_unused);
    return false;
  }
  // And only if no piece not applied yet holds writes of intervals the copy already holds: a push
  // from further back than the copy (the pusher's idea of it is older, e.g. after a background
  // collection raised what the copy counts as holding) would bring such writes again, over
  // words written since. (Fetched pieces never do: the copy's applied_through moves only by
  // applying pieces, or by a collection after which the writer's pieces start above it.)
  const auto c = static_cast<std::uint32_t>(creator);
  {
    const std::uint32_t seen_serial = pe.applied_serial_of(c), held = pe.applied_through_of(c);
    if (std::any_of(p.pieces.begin(), p.pieces.end(),
                    [&](const pushed_unit::piece& x) { return x.serial > seen_serial && x.first <= held; })) {
      stats::add(stats::counter::pushed_units_unused);
      return false;
    }
  }
  // This rank's own writes to the unit are saved first (as before applying a fetched diff), as a
  // snapshot: the unit keeps its protection, and the pushed writes go into the twin as well, so
  // they never count as this rank's. A unit written on both sides in turn (a counter under a
  // lock) then moves without a single fault.
  if (pe.twin) snapshot_diff_locked(u, pe);
  if (pe.applied_through.empty()) pe.applied_through.assign(static_cast<std::size_t>(size_), 0);
  std::uint32_t& seen = pe.applied_serial(c);
  auto& through = pe.applied_through[c];
  for (const auto& piece : p.pieces) {  // in serial order: the origin encodes them so
    if (piece.serial <= seen) continue;
    seen = piece.serial;
    apply_diff(region_.lib_unit(u), region_.unit(), piece.bytes);
    if (pe.twin) apply_diff(pe.twin.get(), region_.unit(), piece.bytes);
    stats::add(stats::counter::diffs_applied);
    stats::add(stats::counter::diff_bytes_applied, piece.bytes.size());
    through = std::max(through, piece.last);
  }
  through = std::max(through, p.through);
  stats::add(stats::counter::pushed_units_applied);
  settle_locked(u, pe);  // nothing else is wanted: valid
  return true;
}

}  // namespace mdsm::coherence
