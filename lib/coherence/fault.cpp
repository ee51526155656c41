// Page access: write detection with twins, lazy diffs, and the fault that makes an invalid unit
// valid again (validate; the fetch from the writers it makes is in fetch.cpp). Everything here may run inside the SIGSEGV handler of the faulting thread:
// the fault is synchronous (the thread's own access), the faulting code holds none of our locks
// (library code never touches the application view), so taking locks and waiting is safe.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "common/sanitizers.hpp"
#include "net/progress.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

namespace mdsm::coherence {

unit_start engine::initial_state(void* ctx, std::uint32_t u) {
  auto* self = static_cast<engine*>(ctx);
  {
    // An allocated unit whose entry was never made (units_allocated leaves untouched chunks
    // alone) is a valid zero copy: its valid bit is set and the application view open. Without
    // an entry no copy of it was served, so one this rank owns is private (read-write).
    std::lock_guard lk(self->notices_.mutex());
    if (self->notices_.valid(u))
      return {page_state::valid, self->owns_privately(u) ? os::prot::read_write : os::prot::read};
  }
  const int owner = self->region_.arena_owner(u);
  return {owner >= 0 && owner != self->rank_ ? page_state::no_copy : page_state::unallocated, os::prot::none};
}

void engine::protect_units(std::uint32_t first, std::uint32_t count, os::prot p) {
  region_.app_runs(first, count, [p](std::byte* at, std::size_t bytes) { os::protect(at, bytes, p); });
  stats::add(stats::counter::protect_calls);
  stats::add(stats::counter::protect_units, count);
}

protection_batch engine::protections() {
  return protection_batch(
      pages_,
      [](void* self, std::uint32_t first, std::uint32_t count, os::prot p) {
        static_cast<engine*>(self)->protect_units(first, count, p);
      },
      [](void* self, std::uint32_t first, std::uint32_t count) {
        const auto* e = static_cast<engine*>(self);
        os::discard(e->region_.lib_unit(first), std::size_t{count} * e->region_.unit());
      },
      this);
}

void engine::set_prot_locked(std::uint32_t u, page_entry& pe, os::prot p) {
  if (pe.prot == p) return;
  protect_units(u, 1, p);
  pe.prot = p;
}

void engine::set_state_locked(std::uint32_t u, page_entry& pe, page_state s) {
  if ((pe.state == page_state::valid) != (s == page_state::valid)) {
    std::lock_guard lk(notices_.mutex());
    notices_.set_valid(u, s == page_state::valid);
  }
  pe.state = s;
}

std::vector<engine::wanted> engine::wanted_locked(std::uint32_t u, const page_entry& pe) {
  std::vector<wanted> out;
  std::lock_guard lk(notices_.mutex());
  for (std::uint32_t c = 0; c < static_cast<std::uint32_t>(size_); ++c) {
    if (c == static_cast<std::uint32_t>(rank_)) continue;
    const std::uint32_t latest = notices_.latest(c, u), at = pe.applied_through_of(c);
    if (latest > at) out.push_back(wanted{c, at, latest});
  }
  return out;
}

bool engine::settle_locked(std::uint32_t u, page_entry& pe) {
  // Looking at the paint and setting the valid bit under one hold of the index's lock: an
  // acquire painting a new notice now either comes before (we see it) or after (it sees the bit).
  std::lock_guard lk(notices_.mutex());
  for (std::uint32_t c = 0; c < static_cast<std::uint32_t>(size_); ++c) {
    if (c != static_cast<std::uint32_t>(rank_) && notices_.latest(c, u) > pe.applied_through_of(c)) {
      notices_.set_valid(u, false);
      pe.state = page_state::invalid;
      return false;
    }
  }
  notices_.set_valid(u, true);
  pe.state = page_state::valid;
  return true;
}

os::prot engine::end_private_locked(std::uint32_t u, page_entry& pe) {
  const bool was_private = private_locked(u, pe);
  pe.copied_out = true;
  if (!was_private || pe.state != page_state::valid) return pe.prot;
  stats::add(stats::counter::private_units_shared);
  return os::prot::read;
}

void engine::make_writable_locked(std::uint32_t u, page_entry& pe) {
  begin_write_locked(u, pe);
  set_prot_locked(u, pe, os::prot::read_write);
}

void engine::write_ahead(std::uint32_t u) {
  // A program writing a block it owns (its rows of C, its half of a grid on the first sweep)
  // takes a write fault per unit, each a trap, a twin and an mprotect. A write fault on a unit
  // right after units already writable means such a walk: make the next units writable with
  // it, twice as many as the walk has covered so far (from k_write_min up to k_write_max); a
  // write fault after a unit not writable makes nothing writable ahead. The walk is read off the
  // units behind u, not remembered, so several walks at once (a radix sort's scatter into one
  // bucket per digit, a loop writing two arrays) each get their window. Units made writable
  // ahead are twinned and dirty but `speculative`: the close compares each with its twin and
  // announces only those written (close_interval_locked), so overshooting the end of a block
  // costs a twin and a compare per unit, never a write notice.
  //
  // A unit written in the interval closed last still has its twin (the diff is lazy), so it
  // cannot be speculative: its twin no longer shows what this interval wrote. It is opened as
  // its own write fault would open it -- dirty, and hot (begin_write_locked) -- so it is
  // announced in this interval even if the walk stops short of it. That is the fault's own
  // outcome a moment early, and a notice for an interval that did not write a unit is safe (its
  // diff holds nothing new). It saves the fault per unit of a block rewritten walk by walk in
  // consecutive intervals (SOR's first sweep after the initialisation: 4,096 faults per rank).
  constexpr std::uint32_t k_write_min = 8, k_write_max = 64;
  if (size_ == 1) return;  // alone: units are plain read-write memory, no write faults
  std::uint32_t behind = 0;
  while (behind < k_write_max && behind < u) {
    const std::uint32_t w = u - behind - 1;
    const page_entry* pe = pages_.find(w);  // no entry: nobody wrote it (and none is made here)
    if (pe == nullptr) break;
    std::lock_guard lk(pages_.lock_of(w));
    if (pe->prot != os::prot::read_write) break;
    ++behind;
  }
  if (behind == 0) return;
  const std::uint32_t window = std::clamp(2 * behind, k_write_min, k_write_max);
  protection_batch opened = protections();
  for (std::uint32_t v = u + 1; v < region_.units() && v - u <= window; ++v) {
    bool taken = false;
    opened.visit(v, [&](page_entry& pe) -> unit_protection {
      if (pe.state != page_state::valid || pe.prot != os::prot::read || pe.dirty || pe.hot || pe.fetching)
        return {pe.prot};
      if (pe.twin && !written_last_closed_locked(pe)) return {pe.prot};
      const bool speculative = !pe.twin;
      begin_write_locked(v, pe);
      pe.speculative = speculative;
      taken = true;
      return {os::prot::read_write};
    });
    if (!taken) break;
    stats::add(stats::counter::write_ahead_units);
  }
}

void engine::begin_write_locked(std::uint32_t u, page_entry& pe) {
  // Written in the interval closed last and again now: likely written in every interval, so it
  // becomes hot at the next close. (A snapshot diff made in between, for a request or a push,
  // leaves the twin: a unit two ranks write in turn stays writable on both.)
  pe.speculative = false;  // a write fault: written for sure
  if (pe.twin && hot_intervals_ != 0 && written_last_closed_locked(pe)) pe.hot = true;
  if (!pe.twin) {
    pe.twin = make_unit_buffer(region_.unit());
    copy_unit(pe.twin.get(), region_.lib_unit(u), region_.unit());
    stats::add(stats::counter::twins_created);
    add_metadata(static_cast<std::int64_t>(region_.unit()));
  }
  if (!pe.dirty) {
    pe.dirty = true;
    std::lock_guard lk(dirty_mutex_);
    dirty_.push_back(u);
    any_dirty_.store(true, std::memory_order_release);
  }
}

void engine::end_hot_locked(std::uint32_t u, page_entry& pe) {
  if (!pe.hot) return;
  pe.hot = false;
  if (pe.own.empty() || !pe.own.back().open()) return;  // became hot in the open interval: not in hot_ yet
  own_notice& range = pe.own.back();
  // Under dirty_mutex_: a close running on another thread has either not taken the hot set yet
  // (it will not announce u) or has published its index as closed (close_interval_locked).
  std::lock_guard lk(dirty_mutex_);
  if (!hot_.contains(u)) {
    // Joining in a close still under way (another thread: a background collection's diff, a
    // free): that close made the range open under this page lock and announces the unit in its
    // index, but has not yet published the index as closed nor added the unit to the hot set.
    // End the range at that index (its record holds the unit; later writes go into the twin's
    // next diff, as below) and have the close leave the unit out. Read as "opened after the
    // newest close" instead, the range was dropped though the record announces it, or ended
    // one interval short with the unit put in the hot set for good.
    MDSM_ASSERT(hot_.closing != 0 && range.first <= hot_.closing, "an open range outside the hot set and no close");
    range.last = hot_.closing;
    pe.dirty = false;
    hot_.left_while_joining.push_back(u);
    return;
  }
  const std::uint32_t closed = last_closed_.load(std::memory_order_acquire);
  hot_.remove(u);
  hot_count_.fetch_sub(1, std::memory_order_relaxed);
  if (range.first <= closed) {
    // Announced through the newest close. Writes since then are in the page and go into the
    // next diff of the twin, which this (awaiting) range gets: whoever learns of the open
    // interval learns of the range too and fetches that diff (as when a diff is made while an
    // interval is open, make_diff_locked). So the unit is not dirty now.
    range.last = closed;
    pe.dirty = false;
  } else {
    // Opened after the newest close (a snapshot split the range): nothing announced yet, its
    // pieces hold writes of the open interval. Back to the ordinary path: a notice at the close.
    pe.open_pieces.insert(pe.open_pieces.begin(), std::make_move_iterator(range.pieces.begin()),
                          std::make_move_iterator(range.pieces.end()));
    pe.own.pop_back();
    add_metadata(-static_cast<std::int64_t>(sizeof(own_notice)));
    pe.dirty = true;
    dirty_.push_back(u);
    any_dirty_.store(true, std::memory_order_release);
  }
}

bool engine::attach_diff_locked(page_entry& pe, diff_ptr d, bool snapshot) {
  bool attached = false;
  for (auto n = pe.own.rbegin(); n != pe.own.rend() && n->awaiting_twin; ++n) {  // the awaiting suffix
    if (d) n->pieces.push_back(d);
    attached = true;
    if (!(snapshot && n->open())) n->awaiting_twin = false;
  }
  return attached;
}

namespace {
diff_ptr make_piece(diff_bytes bytes, std::atomic<std::uint32_t>& next_serial, std::uint32_t complete_through) {
  if (bytes.empty()) return nullptr;
  auto made = std::make_shared<diff>();
  made->bytes = std::move(bytes);
  made->serial = next_serial.fetch_add(1, std::memory_order_relaxed);
  made->complete_through = complete_through;
  stats::add(stats::counter::diffs_created);
  stats::add(stats::counter::diff_bytes_created, made->bytes.size());
  return made;
}
}  // namespace

void engine::make_diff_locked(std::uint32_t u, page_entry& pe) {
  MDSM_ASSERT(pe.twin != nullptr, "diff without a twin");
  end_hot_locked(u, pe);
  // Stop concurrent writes first: a write racing with this either lands before the protection
  // changes (and is in the diff) or faults and waits for our page lock (and is in the next one).
  if (pe.prot == os::prot::read_write) set_prot_locked(u, pe, os::prot::read);
  // Every write of the intervals closed so far is in the page now (write-protected above).
  const std::uint32_t closed = last_closed_.load(std::memory_order_acquire);
  diff_ptr d = make_piece(make_diff(region_.lib_unit(u), pe.twin.get(), region_.unit()), next_diff_serial_, closed);
  pe.twin.reset();
  add_metadata(-static_cast<std::int64_t>(region_.unit()) + (d ? static_cast<std::int64_t>(d->footprint()) : 0));
  if (std::exchange(pe.speculative, false) && !d) {
    // Made writable ahead (write_ahead) and not written: nothing to announce.
    pe.dirty = false;
    stats::add(stats::counter::write_ahead_unused);
    return;
  }
  if (attach_diff_locked(pe, d, false)) {
    // The diff also holds this interval's writes so far; every rank that will learn of this
    // interval knows the earlier one too and fetches this diff, so no notice is needed for them.
    pe.dirty = false;
  } else {
    // A twin outlives its writes only as a snapshot of a unit not written since (d is empty).
    MDSM_ASSERT(pe.dirty || !d, "writes without a notice");
    if (d) pe.open_pieces.push_back(std::move(d));
  }
}

void engine::snapshot_diff_locked(std::uint32_t u, page_entry& pe) {
  MDSM_ASSERT(pe.twin != nullptr, "a snapshot diff needs a twin");
  std::byte* twin = pe.twin.get();
  // The newest close is read BEFORE the page: a unit that stays writable may be written (and an
  // interval closed) by an application thread while the diff is made. Every write of an interval
  // up to `closed` is then in the diff (the acquire pairs with the close's release); writes of
  // later intervals may be in it too, and the range split below starts at closed + 1 so that
  // readers of those intervals still fetch what is not. Reading it after the diff could end the
  // range at an interval whose writes the diff missed: readers acting on that interval's notice
  // would never fetch them.
  const std::uint32_t closed = last_closed_.load(std::memory_order_acquire);
  diff_ptr d = make_piece(make_diff(region_.lib_unit(u), twin, region_.unit()), next_diff_serial_, closed);
  if (d) pe.speculative = false;
  // The twin takes in exactly the words the diff carries (not the page again: a word written
  // since the compare must stay different from the twin, to be in the next diff).
  if (d) {
    apply_diff(twin, region_.unit(), d->bytes);
    add_metadata(static_cast<std::int64_t>(d->footprint()));
  }
  const bool split = !pe.own.empty() && pe.own.back().open() && pe.own.back().first <= closed;
  if (split) {
    // The open range ends at the newest close with this diff; a new one starts after it. Writes
    // of the open interval made before the diff are in it, which anyone learning of the open
    // interval fetches as well (they learn of the closed range too), as in make_diff_locked.
    pe.own.back().last = closed;
  }
  if (!attach_diff_locked(pe, d, true) && d) pe.open_pieces.push_back(d);
  if (split) {
    pe.own.push_back(own_notice{closed + 1, own_notice::k_open, {}, true});
    add_metadata(sizeof(own_notice));
  }
}

bool engine::validate(std::uint32_t u, access how) {
  std::chrono::steady_clock::time_point give_up{};  // set on the first "not allocated" from a home
  for (;;) {
    std::unique_lock lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    if (pe.state == page_state::unallocated) {
      // An entry made while its pool chunk was unclaimed (a readahead looked past the end of a
      // run, say) says unallocated; once another rank has claimed the chunk its units are that
      // rank's, like its arena's: no copy here yet. (Before the claim no pointer into it
      // existed, so nothing was missed.)
      const int owner = region_.arena_owner(u);
      if (owner < 0 || owner == rank_) return false;
      set_state_locked(u, pe, page_state::no_copy);
    }
    if (pe.state == page_state::valid) {
      // A fault on a readable valid unit can only be a write.
      const bool write = how == access::write || (how == access::unknown && pe.prot == os::prot::read);
      if (write && pe.prot != os::prot::read_write) {
        make_writable_locked(u, pe);
        lk.unlock();
        write_ahead(u);
      }
      return true;
    }
    if (pe.fetching) {  // another thread (or a prefetch) is fetching this unit: wait, then look again
      const std::uint32_t generation = pe.fetch_generation;
      lk.unlock();
      prefetch_after(u);
      progress_.wait_until([&] {
        std::lock_guard g(pages_.lock_of(u));
        return pages_.at(u).fetch_generation != generation;
      });
      continue;
    }
    if (pe.state == page_state::no_copy && pe.dropped_in != 0) {
      // Dropped by a background collection still under way: the home may not hold every write
      // up to its cut yet. Wait for the collection to end.
      const std::uint32_t epoch = pe.dropped_in;
      if (bg_freed_.load(std::memory_order_acquire) < epoch) {
        lk.unlock();
        progress_.wait_until([&] { return bg_freed_.load(std::memory_order_acquire) >= epoch; });
        continue;
      }
      pe.dropped_in = 0;
    }
    std::vector<fetch_unit> batch;
    batch.push_back(fetch_unit{u, wanted_locked(u, pe), {}, {}});
    const bool need_copy = pe.state == page_state::no_copy;
    if (batch.front().wants.empty() && !need_copy) {
      // Out of date no more (a piece applied meanwhile covered the notices).
      if (!settle_locked(u, pe)) continue;
      if (how == access::write) make_writable_locked(u, pe);
      else set_prot_locked(u, pe, os::prot::read);
      return true;
    }
    pe.fetching = true;
    // Save this rank's own modifications before others' are applied on top of them.
    if (pe.twin) make_diff_locked(u, pe);
    batch.front().home_after = pe.applied_through_of(static_cast<std::uint32_t>(home_of(u)));
    lk.unlock();
    const readahead next = gather_neighbours(batch, need_copy);

    std::vector<box_ptr> replies;
    bool copy_busy = false;
    try {
      replies = fetch(batch, need_copy, copy_busy, next);
      order_pieces(batch);
    } catch (...) {
      for (const fetch_unit& f : batch) {
        std::lock_guard g(pages_.lock_of(f.unit));
        pages_.at(f.unit).end_fetch();
      }
      fetch_finished();
      throw;
    }
    // The neighbours: installed and readable (their fetch is done whatever happens to u), except
    // those without a copy whose copy did not come: they stay as they were. They are contiguous:
    // one mprotect opens them all (apsp's barrier version made 16 per fetch, 17K per rank).
    {
      protection_batch opened = protections();
      for (std::size_t k = 1; k < batch.size(); ++k) {
        fetch_unit& f = batch[k];
        opened.visit(f.unit, [&](page_entry& e) -> unit_protection {
          e.end_fetch();
          if (replies.empty() || (need_copy && f.copy.empty())) return {e.prot};
          install_locked(f, e);
          return {settle_locked(f.unit, e) ? os::prot::read : e.prot};
        });
      }
    }

    lk.lock();
    if (!replies.empty()) {
      // Installed, settled and opened in the hold that ends the fetch: a collection waiting for
      // it (gc.cpp, background_gc.cpp) decides the unit by what it holds, so it must never see
      // the fetch over and the copy not yet installed (it dropped the copy, or forgot the
      // notices this fetch did not ask for, and the install then made a stale copy valid).
      install_locked(batch.front(), pe);
      // Notices that arrived during the fetch are still wanted; the loop fetches them next.
      const bool valid = settle_locked(u, pe);
      // A write fault (x86 tells; `++*p` is one) twins the copy just made and opens it
      // read-write at once: one mprotect instead of read-only now and a second fault to open it.
      if (valid && how == access::write) make_writable_locked(u, pe);
      else if (valid) set_prot_locked(u, pe, os::prot::read);
      pe.end_fetch();
      lk.unlock();
      fetch_finished();  // a background collection may wait for this fetch (page lock not held)
      if (valid) return true;
      continue;
    }
    // No copy: stays no_copy. The home is busy bringing its copy up to date: ask again shortly.
    // Not allocated at the home: in another rank's arena that is the answer, nothing is
    // allocated there. A collective unit this rank has allocated is allocated on its home too,
    // or will be at once: the home may not have finished the same alloc_collective yet (our
    // copy was dropped by a garbage collection, the range freed and allocated again). Ask
    // again shortly.
    pe.end_fetch();
    lk.unlock();
    fetch_finished();
    lk.lock();
    const auto now = std::chrono::steady_clock::now();
    if (give_up == std::chrono::steady_clock::time_point{}) give_up = now + std::chrono::seconds(30);
    if (pe.state == page_state::unallocated || now > give_up) return false;
    if (!copy_busy && region_.arena_owner(u) >= 0) return false;
    lk.unlock();
    const auto retry_at = now + std::chrono::microseconds(50);
    progress_.wait_until([&] { return std::chrono::steady_clock::now() >= retry_at; });
  }
}

bool engine::prepare_access(const void* p, std::size_t len, bool write) {
  if (len == 0) return true;
  const std::uint32_t first = region_.unit_of(p);
  const std::uint32_t last = region_.unit_of(static_cast<const std::byte*>(p) + len - 1);
  // Valid units in one pass, with one mprotect per run (a 4 MiB receive buffer is 1,024 units);
  // the others as faults would take them (fetches gather their neighbours).
  std::vector<std::uint32_t> fetch;
  {
    protection_batch batch = protections();
    for (std::uint32_t u = first; u <= last; ++u)
      batch.visit(u, [&](page_entry& pe) -> unit_protection {
        if (pe.state != page_state::valid) {
          fetch.push_back(u);
          return {pe.prot};
        }
        if (!write || pe.prot == os::prot::read_write) return {pe.prot};
        begin_write_locked(u, pe);
        return {os::prot::read_write};
      });
  }
  for (std::uint32_t u : fetch)
    if (!validate(u, write ? access::write : access::read)) return false;
  return true;
}

bool engine::on_fault(const os::fault_info& f) {
  if (!region_.contains(f.addr)) return false;
  char text[512];
  if (const char* h = net::current_handler()) {
    std::snprintf(text, sizeof text,
                  "mdsm: message handler '%s' touched coherent memory at %p; handlers must not access the coherent "
                  "region (store the message and read the data from the application thread)",
                  h, f.addr);
    detail::die(text);
  }
  stats::activity_scope timed(stats::activity::fault, stats::counter::fault_ns);
#if MDSM_TSAN
  // ThreadSanitizer does not survive a user-level thread switch inside a signal handler (its
  // signal bookkeeping crashes the process): under TSan a fault's waits poll, as without fibers.
  net::no_switch_scope stay;
#endif
  const std::uint32_t u = region_.unit_of(f.addr);
  const access how = !f.write_known ? access::unknown : f.is_write ? access::write : access::read;
  stats::add(how == access::write ? stats::counter::write_faults : stats::counter::read_faults);
  bool ok = false;
  try {
    ok = validate(u, how);
  } catch (const error& e) {
    std::snprintf(text, sizeof text, "mdsm: rank %d could not resolve a fault at %p: %s", rank_, f.addr, e.what());
    detail::die(text);
  }
  if (ok) return true;
  const int owner = region_.arena_owner(u);
  char where[64];
  if (owner == region_map::k_collective) std::snprintf(where, sizeof where, "the collective arena");
  else if (owner == region_map::k_unclaimed) std::snprintf(where, sizeof where, "a part of the pool no rank claimed");
  else std::snprintf(where, sizeof where, "rank %d's arena", owner);
  std::snprintf(text, sizeof text,
                "mdsm: rank %d accessed unallocated coherent memory at %p (unit %u, in %s): nothing is allocated "
                "there now (never allocated, or freed); the access is reported as a segmentation fault\n",
                rank_, f.addr, u, where);
  std::fputs(text, stderr);
  return false;  // chained: the process gets the SIGSEGV it would get without mdsm
}

void engine::units_allocated(std::uint32_t first, std::uint32_t count) {
  set_homes(first, count);
  // New units become readable (read-write when they are private: a rank alone has nothing to
  // keep coherent, and no other rank has a copy of this rank's own allocations yet, so they are
  // plain memory with no fault, twin, notice or diff until a copy is served; DESIGN.md §3), at
  // one mprotect for the whole range plus one per run of units that must stay inaccessible or
  // were served before (a range freed and allocated again). The range is opened *before* any
  // state leaves `unallocated`: once a unit is `valid`, a write notice (from a rank that
  // returned from the same collective allocation earlier and already wrote and released) may
  // invalidate it at any moment, and a protection change made after our page lock is released
  // would undo that invalidation and let the application read a stale copy. While a unit is
  // `unallocated` nothing else changes its protection, and no application thread can touch it
  // yet (its address has not been returned).
  // One allocation's units are all of one kind: this rank's own, or a collective allocation's.
  const bool own = owns_privately(first);
  MDSM_ASSERT(own == owns_privately(first + count - 1), "an allocation across arenas");
  const os::prot opened = own ? os::prot::read_write : os::prot::read;
  protect_units(first, count, opened);
  // Units in chunks of the page table nobody has looked at get no entry: their valid bit says
  // they are a valid zero copy, and initial_state makes the entry from it when one is needed.
  // So a large allocation costs a bit per unit until it is touched (30 GiB of untouched
  // allocations cost 1.2 GB of entries per rank before). Units with entries, and units for which
  // notices arrived already, are settled one by one.
  const std::vector<std::uint32_t> one_by_one =
      pages_.split_untouched(first, count, [&](std::uint32_t from, std::uint32_t to, std::vector<std::uint32_t>& out) {
        std::vector<std::uint32_t> painted;
        std::lock_guard lk(notices_.mutex());
        notices_.painted_units(unit_run{from, to - from}, static_cast<std::uint32_t>(rank_), painted);
        auto p = painted.begin();
        for (std::uint32_t v = from; v < to; ++v) {
          if (p != painted.end() && *p == v) {
            out.push_back(v);
            ++p;
          } else {
            notices_.set_valid(v, true);
          }
        }
      });
  protection_batch batch = protections();
  for (std::uint32_t u : one_by_one) {
    batch.visit(u, [&](page_entry& pe) -> unit_protection {
      if (pe.state == page_state::unallocated) {
        pe.prot = opened;  // what the application view has now
        const bool valid = settle_locked(u, pe);
        return {!valid ? os::prot::none : private_locked(u, pe) ? os::prot::read_write : os::prot::read};
      }
      const os::prot keep = pe.prot;  // not ours to change: restore it
      pe.prot = opened;
      return {keep};
    });
  }
}

void engine::units_freed(std::uint32_t first, std::uint32_t count) {
  freed_epoch_.fetch_add(1, std::memory_order_seq_cst);  // before any unit: end_prefetch
  clear_homes(first, count);
  // Units without entries (never touched since allocated, units_allocated) hold nothing but
  // their valid bit: clear it and close them, chunk by chunk, without making entries.
  const std::vector<std::uint32_t> one_by_one =
      pages_.split_untouched(first, count, [&](std::uint32_t from, std::uint32_t to, std::vector<std::uint32_t>&) {
        {
          std::lock_guard lk(notices_.mutex());
          for (std::uint32_t v = from; v < to; ++v) notices_.set_valid(v, false);
        }
        protect_units(from, to - from, os::prot::none);
      });
  protection_batch batch = protections();
  for (std::uint32_t u : one_by_one) {
    batch.visit(u, [&](page_entry& pe) -> unit_protection {
      // Notices, twin and diffs stay: other ranks may still ask for this rank's writes.
      end_hot_locked(u, pe);
      if (pe.state != page_state::unallocated && pe.state != page_state::no_copy)
        set_state_locked(u, pe, page_state::unallocated);
      return {os::prot::none};
    });
  }
}

}  // namespace mdsm::coherence
