// Garbage collection of consistency metadata (TreadMarks style, at a global synchronisation
// point): every rank learns every interval; each unit's home brings its copy up to date; other
// ranks drop copies that still have pending notices (they fetch from the home when they next
// touch the unit); then every interval record, write notice, twin and diff is freed.
#include "coherence/engine.hpp"
#include "common/wait_subject.hpp"

#include "stats/counters.hpp"

#include <algorithm>
#include <set>

namespace mdsm::coherence {

namespace {
void wait_request(net::progress& p, MPI_Request& req) {
  detail::wait_subject subject{.what = "every rank to reach the same step of a garbage collection"};
  detail::waiting_for waiting(subject);
  p.wait_until([&] {
    int done = 0;
    PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}
}  // namespace

void engine::gc() {
  stats::activity_scope timed(stats::activity::gc, stats::counter::gc_ns);
  // A background collection's cut and free wait while this one runs (background_gc.cpp).
  struct blocking_scope {
    engine& e;
    explicit blocking_scope(engine& en) : e(en) { e.begin_blocking_gc(); }
    ~blocking_scope() { e.end_blocking_gc(); }
  } blocking(*this);
  // 1. Close the current interval and learn every interval any rank knows (the join G of all
  //    vector times is downward closed, so it is fetched and applied as one batch).
  {
    std::lock_guard lk(meta_);
    close_interval_locked();
  }
  wait_all_acquires();
  const vector_time mine = current_vt();
  std::vector<std::uint32_t> local(static_cast<std::size_t>(size_)), global(static_cast<std::size_t>(size_));
  for (std::size_t c = 0; c < local.size(); ++c) local[c] = mine[c];
  MPI_Request req;
  MPI_Iallreduce(local.data(), global.data(), size_, MPI_UINT32_T, MPI_MAX, transport_.collective_comm(), &req);
  wait_request(progress_, req);
  vector_time g(static_cast<std::size_t>(size_));
  std::vector<release_info> infos;
  for (std::size_t c = 0; c < global.size(); ++c) {
    g[c] = global[c];
    if (mine[c] < g[c]) {
      vector_time need(static_cast<std::size_t>(size_));
      need[c] = g[c];
      infos.push_back(release_info{static_cast<int>(c), need, {}, {}});  // each creator has its own
    }
  }
  if (!infos.empty()) wait_acquire(begin_acquire(std::move(infos)));

  // 2. Put every modification of ours into a diff (so copies can be dropped safely; hot units
  //    stop being hot), drop copies that lack writes unless we are the home, and bring home
  //    units up to date.
  // A unit being fetched (a background collection's home validation, another thread's fault) is
  // decided once that fetch is done: dropping it now would let the fetch install its diffs over
  // the discarded memory.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> busy;  // (unit, fetch generation)
  pages_.for_each([&](std::uint32_t u, page_entry& pe) {
    if (pe.fetching) busy.emplace_back(u, pe.fetch_generation);
  });
  progress_.wait_until([&] {
    return std::all_of(busy.begin(), busy.end(), [&](const std::pair<std::uint32_t, std::uint32_t>& b) {
      std::lock_guard lk(pages_.lock_of(b.first));
      const page_entry& pe = pages_.at(b.first);
      return !pe.fetching || pe.fetch_generation != b.second;
    });
  });
  std::vector<std::uint32_t> to_validate, to_drop;
  pages_.for_each([&](std::uint32_t u, page_entry& pe) {
    if (pe.twin) make_diff_locked(u, pe);
    if (wanted_locked(u, pe).empty()) return;
    if (home_of(u) == rank_ && pe.state != page_state::unallocated) to_validate.push_back(u);
    else to_drop.push_back(u);
  });
  {
    // Dropped copies lose their protection and their memory with one mprotect and one madvise
    // per run of contiguous units. The copy fetched from the home next time holds every write up
    // to G, so nothing up to G is wanted for them any more.
    protection_batch batch = protections();
    for (std::uint32_t u : to_drop) {
      batch.visit(u, [&](page_entry& pe) -> unit_protection {
        raise_applied_through_locked(pe, g);
        if (pe.fetching || (pe.state != page_state::invalid && pe.state != page_state::valid)) return {pe.prot};
        set_state_locked(u, pe, page_state::no_copy);
        return {os::prot::none, true};
      });
    }
  }
  for (std::uint32_t u : to_validate) validate(u, access::read);

  // 3. Every home is up to date once every rank got here; until then keep serving diffs.
  MPI_Ibarrier(transport_.collective_comm(), &req);
  wait_request(progress_, req);

  // 4. Free everything up to G.
  collect_through(g);
  rearm_background_trigger();
}

void engine::raise_applied_through_locked(page_entry& pe, const vector_time& g) {
  // Every write up to G is in the copy (or will be, in the copy fetched from the home): a write
  // the copy does not hold is newer than its creator's newest notice known here, so newer than G.
  if (pe.applied_through.empty()) pe.applied_through.assign(static_cast<std::size_t>(size_), 0);
  for (std::size_t c = 0; c < pe.applied_through.size(); ++c)
    if (c != static_cast<std::size_t>(rank_)) pe.applied_through[c] = std::max(pe.applied_through[c], g[c]);
}

void engine::collect_through(const vector_time& g) {
  std::size_t freed = 0;
  {
    std::lock_guard lk(meta_);
    freed += store_.collect(g);
    for (auto& k : known_) k.merge(g);
  }
  {
    std::lock_guard lk(notices_.mutex());
    const std::size_t before = notices_.bytes();
    notices_.forget_through(g);
    freed += before - notices_.bytes();
  }
  const std::uint32_t mine_g = g[static_cast<std::size_t>(rank_)];
  const std::uint32_t closed = last_closed_.load(std::memory_order_relaxed);
  pages_.for_each([&](std::uint32_t, page_entry& pe) {
    std::set<const diff*> dropped, kept;
    auto collected = [&](const own_notice& n) { return n.last_closed(closed) <= mine_g && !n.open(); };
    for (const auto& n : pe.own)
      for (const auto& d : n.pieces) (collected(n) ? dropped : kept).insert(d.get());
    for (const auto& d : pe.open_pieces) kept.insert(d.get());
    for (const diff* d : dropped)
      if (!kept.count(d)) freed += d->footprint();
    const std::size_t own_before = pe.own.size();
    std::erase_if(pe.own, collected);
    freed += (own_before - pe.own.size()) * sizeof(own_notice);
  });
  add_metadata(-static_cast<std::int64_t>(freed));
  stats::add(stats::counter::gc_runs);
  stats::add(stats::counter::gc_freed_bytes, freed);
}

int engine::home_of(std::uint32_t u) {
  std::lock_guard lk(homes_mutex_);
  const std::uint32_t home = homes_.at(u);
  return home != 0 ? static_cast<int>(home - 1) : region_.home_of(u);
}

void engine::collective_allocation(std::uint32_t first, std::uint32_t count) {
  std::lock_guard lk(homes_mutex_);
  allocating_ = unit_run{first, count};
}

void engine::set_homes(std::uint32_t first, std::uint32_t count) {
  // Units of a collective allocation get their block of it as home (see home_of), fixed from
  // their first allocation until they are free again: a home that changed while copies were
  // being dropped for it would serve a stale copy. Other units keep the region's home.
  std::lock_guard lk(homes_mutex_);
  const unit_run a = allocating_;
  if (a.count == 0 || first < a.first || first + count > a.end()) return;
  const auto ranks = static_cast<std::uint64_t>(size_);
  std::uint32_t u = first;
  while (u < first + count) {
    const auto home = static_cast<std::uint32_t>(std::uint64_t{u - a.first} * ranks / a.count);
    // The first unit of the next home's block: ceil((home + 1) * count / ranks).
    const auto next = a.first + static_cast<std::uint32_t>(((home + 1) * std::uint64_t{a.count} + ranks - 1) / ranks);
    const std::uint32_t end = std::min(first + count, std::max(next, u + 1));
    homes_.paint(unit_run{u, end - u}, home + 1);
    u = end;
  }
}

void engine::clear_homes(std::uint32_t first, std::uint32_t count) {
  std::lock_guard lk(homes_mutex_);
  homes_.paint(unit_run{first, count}, 0);
}

}  // namespace mdsm::coherence
