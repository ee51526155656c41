// Diffs pushed along with RELEASEs (Keleher's lazy hybrid): a rank that keeps fetching one of
// our units, or walks through our units a step per release of ours, gets their diffs on our
// next RELEASEs to it (a bounded number), and applies them at the acquire instead of faulting
// and fetching (COHERENCE.md §3). Serving a fetch counts it (note_served_locked, from
// service.cpp); decoding is part of decode_release (engine.cpp).
#include "coherence/engine.hpp"

#include "coherence/diff.hpp"
#include "stats/counters.hpp"

#include <algorithm>

namespace mdsm::coherence {

namespace {
// A push budget after n confirmations: 4, 8, ..., 255. Renewed only by a fault after it ran
// out, so a pattern that goes on is fetched rarely, and one that stops costs a few unused pushes.
std::uint8_t budget_after(unsigned confirmations) {
  return static_cast<std::uint8_t>(std::min(255u, 4u << std::min(confirmations - 1u, 6u)));
}
// A walk's step moves at most this many units per interval of ours, and a step reads at most
// this many (a row of a matrix; more is a block, which readahead fetches well enough).
constexpr std::uint32_t k_walk_stride_max = 16, k_walk_span_max = 16, k_walk_gap_max = 2;
}  // namespace

void engine::note_served_locked(std::uint32_t u, page_entry& pe, int source, std::uint32_t through,
                                std::uint32_t held, bool faulted, bool copy) {
  // Where its copy is, for whatever pushes it later (a set's or a walk's).
  auto& st = pe.push_to(source, static_cast<std::size_t>(size_));
  st.through = std::max(st.through, held);
  // Only the unit it faulted on counts as read; the neighbours it asked for along with it may
  // never be (a boundary row's next rows), and pushing them would be waste. A unit a rank fetches
  // again and again (a boundary row, a counter under a lock) is pushed along with our next
  // RELEASEs to it while its budget lasts.
  if (!faulted) return;
  if (st.fetches < 255) ++st.fetches;
  std::lock_guard lk(push_mutex_);
  // A walk visits units it has not faulted on before; a unit fetched again is re-read, and the
  // sets above push it.
  if (st.fetches == 1) note_walk_locked(walks_[static_cast<std::size_t>(source)], u, through, copy);
  if (st.fetches < 2) return;
  st.budget = budget_after(st.fetches - 1u);
  push_sets_[static_cast<std::size_t>(source)].insert(u);
}

void engine::note_walk_locked(walk& w, std::uint32_t u, std::uint32_t through, bool copy) {
  // Faults after the same release of ours, close by: more of the step (a row longer than a
  // unit, read in any order).
  if (w.step_through != 0 && through == w.step_through) {
    const std::uint32_t lo = std::min(u, w.step_unit), hi = std::max(u, w.step_unit + w.extent - 1);
    if (hi - lo < k_walk_span_max) {
      // The step starts lower: for the stride's sake it started there. A walk of one step (its
      // origin is this step) moves its origin along; a step back to the origin or behind it is
      // no walk forward: one starts here.
      if (w.origin_through == w.step_through) w.origin_unit = lo;
      else if (lo <= w.origin_unit) w = walk{.origin_unit = lo, .origin_through = through, .step_unit = lo,
                                             .step_through = through};
      w.step_unit = lo;
      w.extent = hi - lo + 1;
      return;
    }
  }
  // After a release that pushed the walk's units (our releases may run ahead of the walker's
  // faults): the fault is a part of the step the push did not cover (it starts where the stride
  // says, and reads further than the walk knew). The stride stays: the step's start is not
  // seen, its end is.
  if (w.steps != 0 && through > w.step_through && through <= w.pushed_through) {
    const std::uint32_t at = w.at(through);
    if (u >= at && u - at < k_walk_span_max) {
      w.extent = std::max(w.extent, u - at + 1);
      return;
    }
  }
  // A walk steps after every release of ours, or every other one (a step between two barriers,
  // litmus 43); faults further apart are readahead batches running out (apsp hybrid's), which
  // readahead serves well already.
  const std::uint32_t last_seen = std::max(w.step_through, w.pushed_through);
  const bool forward = w.step_through != 0 && through > w.step_through && u > w.step_unit &&
                       u - w.step_unit <= k_walk_stride_max * (through - w.step_through) &&
                       (through <= last_seen || through - last_seen <= k_walk_gap_max);
  if (!forward) {  // not a walk, or a new one: it starts here
    w = walk{.origin_unit = u, .origin_through = through, .step_unit = u, .step_through = through};
    return;
  }
  if (w.steps != 0) {
    // A stride is known: a step far from where it puts u starts the walk again from the newest
    // step (the walker changed pace, or walks something else).
    const std::uint32_t at = w.at(through), slack = w.extent + w.stride_ceil() + 1;
    if (u + slack < at || u > at + slack) {
      w = walk{.origin_unit = w.step_unit, .origin_through = w.step_through, .step_unit = u, .step_through = through,
               .extent = w.extent, .steps = 1, .budget = budget_after(1)};
      return;
    }
  }
  // A step seen whole (no push before it): where it starts refines the stride.
  w.copies = copy;
  w.step_unit = u;
  w.step_through = through;
  if (w.steps < 255) ++w.steps;
  w.budget = budget_after(w.steps);
}

void engine::encode_pushed_locked(int dest, std::uint32_t through, net::byte_writer& out) {
  // Bounded, so a RELEASE stays a small message: the rest is fetched on demand as usual.
  constexpr std::size_t k_push_bytes = 64 * 1024;
  const std::size_t count_at = out.reserve_slot<std::uint32_t>();
  const std::size_t start = out.size();
  std::uint32_t count = 0;
  std::vector<std::uint32_t> units;
  // The units a walk of dest's reaches after this release: where its stride puts the step, as
  // many as a step reads (at least the stride and one more, so a row that straddles units is whole).
  std::uint32_t walk_first = 0, walk_count = 0;
  bool walk_copies = false;
  {
    std::lock_guard lk(push_mutex_);
    const auto& set = push_sets_[static_cast<std::size_t>(dest)];
    units.assign(set.begin(), set.end());
    walk& w = walks_[static_cast<std::size_t>(dest)];
    if (w.budget != 0 && w.steps != 0 && through > w.step_through) {
      const std::uint32_t at = w.at(through);
      if (at < region_.units()) {
        walk_first = at;
        walk_count = std::min({std::max(w.extent, w.stride_ceil() + 1), k_walk_span_max, region_.units() - at});
      }
      walk_copies = w.copies;
      w.pushed_through = through;
      --w.budget;
    }
  }
  // The receiver wants the units in increasing order (the set's are); a unit of both is the set's.
  std::vector<std::uint32_t> set_units;
  auto in_set = [&](std::uint32_t v) { return std::binary_search(set_units.begin(), set_units.end(), v); };
  if (walk_count != 0) {
    set_units = units;
    for (std::uint32_t v = walk_first; v < walk_first + walk_count; ++v)
      if (!in_set(v)) units.push_back(v);
    std::inplace_merge(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(set_units.size()), units.end());
  }
  std::vector<std::uint32_t> exhausted;
  for (const std::uint32_t u : units) {
    const bool walked = u >= walk_first && u - walk_first < walk_count && !in_set(u);  // the walk's, not the set's
    if (out.size() - start >= k_push_bytes) break;
    if (walked && pages_.find(u) == nullptr) continue;  // never touched anywhere: nothing of ours
    std::lock_guard lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    // A walk pushes units dest fetched before (as neighbours of a fault: from where that left
    // its copy), and units it never fetched from us if its copies are its own (a collective
    // allocation: from our first interval). A walk through units it had no copy of (the copy
    // requests of a block another rank allocated) pushes only the former.
    if (walked && walk_copies && pe.push_through_of(dest) == 0) continue;
    auto& st = pe.push_to(dest, static_cast<std::size_t>(size_));
    if (!walked && st.budget == 0) {
      exhausted.push_back(u);
      continue;
    }
    // From where dest's copy is (it fetched or was pushed our writes up to st.through; if it
    // never applied a push, the next fetch tells us again), so the pushed diffs are all it lacks.
    const std::uint32_t after = st.through;
    if (after >= through) continue;  // nothing new, or pushed already (of the set and the walk)
    auto [b, e] = pe.own_overlapping(after, through, last_closed_.load(std::memory_order_relaxed));
    if (b == e) continue;  // not written in these intervals: nothing to push
    out.put(u);
    out.put(after);
    out.put(through);
    encode_pieces_locked(u, pe, after, through, out);
    st.through = through;
    ++count;
    if (!walked && --st.budget == 0) exhausted.push_back(u);
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
