// The fetch a fault makes (engine::validate, fault.cpp): which neighbouring units go along
// (gather_neighbours), one request per writer and to the home for copies, the wait for the
// replies (with a nudge for a late server), and installing what came back in an order
// consistent with happened-before. Runs on the faulting thread, possibly inside its SIGSEGV
// handler, with no page lock held except where a function says so.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "common/wait_subject.hpp"
#include "net/doorbells.hpp"
#include "os/vm.hpp"
#include "stats/clock.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace mdsm::coherence {

bool engine::join_batch_locked(std::uint32_t v, page_entry& pe, bool need_copy, int home, const std::vector<wanted>& first,
                               std::vector<fetch_unit>& batch) {
  if (need_copy) {
    // A copy dropped by a background collection still under way is left to its own fault
    // (validate waits for the collection); one with a twin has writes of ours to save first.
    if (home_of(v) != home || pe.state != page_state::no_copy || pe.fetching || pe.dropped_in != 0 || pe.twin)
      return false;
    pe.fetching = true;
    fetch_unit f{v, wanted_locked(v, pe), {}, {}};
    f.home_after = pe.applied_through_of(static_cast<std::uint32_t>(home));
    batch.push_back(std::move(f));
    return true;
  }
  if (pe.state != page_state::invalid || pe.fetching) return false;
  std::vector<wanted> wants = wanted_locked(v, pe);
  const bool same_writers = !wants.empty() && std::all_of(wants.begin(), wants.end(), [&](const wanted& w) {
    return std::any_of(first.begin(), first.end(), [&](const wanted& f) { return f.creator == w.creator; });
  });
  if (!same_writers) return false;
  pe.fetching = true;
  if (pe.twin) make_diff_locked(v, pe);
  batch.push_back(fetch_unit{v, std::move(wants), {}, {}});
  return true;
}

auto engine::gather_neighbours(std::vector<fetch_unit>& batch, bool need_copy) -> readahead {
  // A unit of a run that is out of date with writes of the same ranks (a row, a block), or that
  // has no copy yet and the same home (a block of another rank's matrix read for the first time),
  // is likely read next: ask for it in the same messages instead of faulting and asking again
  // (one round trip per writer for the run, not one per unit).
  //
  // How far to look: as an operating system reads a file ahead. A fault on the unit right after
  // the previous batch means the program walks a run (matmul reading another rank's rows of B):
  // the window doubles, up to k_batch_max; any other fault starts again at k_batch_min (apsp's
  // row k, whose neighbours are rewritten before they are read, keeps the small window).
  constexpr std::uint32_t k_batch_min = 16, k_batch_max = 128;
  const std::uint32_t u = batch.front().unit;
  const bool walking = u == batch_next_.load(std::memory_order_relaxed);
  const std::uint32_t window =
      walking ? std::min(2 * batch_window_.load(std::memory_order_relaxed), k_batch_max) : k_batch_min;
  batch_window_.store(window, std::memory_order_relaxed);
  const std::vector<wanted> first = batch.front().wants;  // a copy: batch grows below
  const int home = home_of(u);
  for (std::uint32_t v = u + 1; v < region_.units() && v - u < window; ++v) {
    page_entry* pe = pages_.find(v);
    if (pe == nullptr) break;
    std::lock_guard lk(pages_.lock_of(v));
    if (!join_batch_locked(v, *pe, need_copy, home, first, batch)) break;
  }
  const auto next = u + static_cast<std::uint32_t>(batch.size());
  batch_next_.store(next, std::memory_order_relaxed);
  // A walk that filled its window goes on: the next window is asked for as well (start_prefetch).
  if (walking && batch.size() == window) return readahead{next, window};
  return {};
}

// The requests of a batch, by creator: (unit, after, through) for every unit that lacks its
// writes; with need_copy the home's request names every unit of the batch (for its copy and the
// home's writes each lacks).
auto engine::plan_requests(const std::vector<fetch_unit>& batch, bool need_copy) -> request_map {
  const auto home = static_cast<std::uint32_t>(home_of(batch.front().unit));
  request_map by_creator;
  for (const fetch_unit& f : batch)
    for (const wanted& w : f.wants) {
      if (need_copy && w.creator == home) continue;  // in the copy request below
      auto& req = by_creator[w.creator];
      req.insert(req.end(), {f.unit, w.after, w.through});
    }
  if (need_copy) {
    auto& req = by_creator[home];
    for (const fetch_unit& f : batch) {
      std::uint32_t after = f.home_after, through = f.home_after;
      for (const wanted& w : f.wants)
        if (w.creator == home) after = w.after, through = w.through;
      req.insert(req.end(), {f.unit, after, through});
    }
  }
  return by_creator;
}

void engine::send_fetch_request(std::uint32_t creator, bool copy, bool demand, const std::vector<std::uint32_t>& req,
                                box_ptr box) {
  MDSM_ASSERT(static_cast<int>(creator) != rank_, "fetching from oneself");
  const std::uint32_t token = register_box(std::move(box));
  stats::add(copy ? stats::counter::page_requests : stats::counter::diff_requests);
  net::byte_writer out;
  out.put(static_cast<std::uint32_t>(req.size() / 3));
  out.put_array<std::uint32_t>(req);
  const std::uint32_t op =
      copy ? (demand ? op_copy_request : op_copy_ahead) : (demand ? op_diff_request : op_diff_ahead);
  send_protocol(static_cast<int>(creator), op, token, out.bytes());
}

bool engine::take_fetch_reply(std::vector<fetch_unit>& batch, bool need_copy, std::uint32_t creator,
                              const std::vector<std::uint32_t>& req, std::span<const std::byte> reply, bool& copy_busy) {
  auto add_piece = [&](fetch_unit& f, const piece_view& p) {
    f.pieces.push_back(fetch_unit::piece{creator, p.first, p.last, p.serial, p.bytes});
  };
  if (need_copy && creator == static_cast<std::uint32_t>(home_of(batch.front().unit))) {
    // Entry k is batch[k]: the copy request names every unit of the batch, in order.
    const copy_reply_end end = decode_copy_reply(
        reply, req, region_.unit(), [&](std::size_t k, std::span<const std::byte> copy) { batch[k].copy = copy; },
        [&](std::size_t k, const piece_view& p) { add_piece(batch[k], p); });
    if (end.copies == 0) {  // the first unit: not allocated at the home, or busy
      copy_busy = end.status == k_copy_busy;
      return false;
    }
    // A unit after the ones with copies stays without one: its own fault asks again.
    return true;
  }
  // The reply's entries are in request order; the request was built from the batch in order.
  std::size_t at = SIZE_MAX;  // the entry f is the unit of
  auto f = batch.end();
  decode_diff_reply(reply, req, [&](std::size_t k, const piece_view& p) {
    // Every unit of the request is in the batch (the request was built from it).
    if (k != at) f = std::find_if(batch.begin(), batch.end(), [&](const fetch_unit& x) { return x.unit == req[3 * k]; });
    at = k;
    add_piece(*f, p);
  });
  return true;
}

namespace {
// A reply normally takes 10-60 us (a round trip plus making the diffs of up to 16 units; a
// readahead batch of up to 128 takes longer, and a nudge then only costs a spurious wake-up).
constexpr double k_nudge_after_ns = 50'000;
// The smallest fetch whose pages are given their memory ahead (fetch): a readahead batch.
constexpr std::size_t k_populate_min = 16;
}  // namespace

auto engine::fetch(std::vector<fetch_unit>& batch, bool need_copy, bool& copy_busy, const readahead& next)
    -> std::vector<box_ptr> {
  copy_busy = false;
  // One request per writer for every unit of the batch that lacks its writes; units without a
  // copy (all of the batch, or none) ask their home for the copies as well, in one request
  // that also names the home's writes each lacks.
  const auto home = static_cast<std::uint32_t>(home_of(batch.front().unit));
  const request_map by_creator = plan_requests(batch, need_copy);
  std::vector<std::pair<std::uint32_t, box_ptr>> boxes;
  for (const auto& [creator, req] : by_creator) {
    auto box = std::make_shared<reply_box>();
    // The request to a writer of neighbours only (not of the faulting unit) asks ahead.
    send_fetch_request(creator, need_copy && creator == home, req.front() == batch.front().unit, req, box);
    boxes.emplace_back(creator, std::move(box));
  }
  // The walk's next window is asked for right behind this batch: its writers make its diffs
  // while we install this one, and the application computes on this one while it comes.
  if (next.count != 0) start_prefetch(next.from, next.count, need_copy, batch.front().wants, static_cast<int>(home));
  // A readahead batch's pages get their memory while we wait, as a prefetch window's do
  // (start_prefetch; the batch is contiguous too, gather_neighbours stops at the first unit that
  // cannot join). Not for a few units: their pages are usually there, and the call would only add
  // to a short wait.
  if (batch.size() >= k_populate_min)
    os::populate(region_.lib_unit(batch.front().unit), region_.unit() * batch.size());
  // All writers are asked at once; wait for every reply. A writer that has not answered within
  // k_nudge_after_ns may have left a wait just before our request came and compute now, its
  // progress thread parked: nudge it (net/doorbells.hpp).
  static const std::uint64_t nudge_after = static_cast<std::uint64_t>(k_nudge_after_ns / stats::ns_per_tick());
  const std::uint64_t asked_at = stats::ticks();
  bool nudged = false;
  struct unanswered {
    const std::vector<std::pair<std::uint32_t, box_ptr>>& boxes;
    const void* address;
    static std::string list(const void* ctx) {
      const auto& w = *static_cast<const unanswered*>(ctx);
      char at[32];
      std::snprintf(at, sizeof at, "%p", w.address);
      // (Appended piece by piece: GCC 12 warns wrongly (-Wrestrict) about operator+ here.)
      std::string out = "address ";
      out += at;
      out += "; no reply yet from rank(s)";
      for (const auto& [creator, box] : w.boxes)
        if (!box->ready.load(std::memory_order_acquire)) {
          out += ' ';
          out += std::to_string(creator);
        }
      return out;
    }
  } pending{boxes, region_.app_unit(batch.front().unit)};
  detail::wait_subject subject{.what = need_copy ? "a copy of coherent memory this rank touched"
                                                 : "the writes (diffs) of coherent memory this rank touched",
                               .object = "unit",
                               .id = batch.front().unit,
                               .detail = unanswered::list,
                               .detail_ctx = &pending};
  detail::waiting_for waiting(subject);
  progress_.wait_until([&] {
    const bool all = std::all_of(boxes.begin(), boxes.end(),
                                 [](const auto& b) { return b.second->ready.load(std::memory_order_acquire); });
    if (!all && !nudged) {
      const std::uint64_t now = stats::ticks();
      if (now - asked_at >= nudge_after) {
        nudged = true;
        for (const auto& [creator, box] : boxes)
          if (!box->ready.load(std::memory_order_acquire) &&
              transport_.bells().nudge_unless_recent(static_cast<int>(creator), now, nudge_after))
            stats::add(stats::counter::nudges);
      }
    }
    return all;
  });
  std::vector<box_ptr> replies;
  for (const auto& [creator, box] : boxes) {
    if (!take_fetch_reply(batch, need_copy, creator, by_creator.at(creator), box->data, copy_busy)) return {};
    replies.push_back(box);
  }
  return replies;
}

// A prefetch: the next window of a walk, asked for while the faulting thread still waits for the
// current one (fetch). Nobody waits for it: the last reply installs it, in the handler context of
// whichever thread delivers it (as a background collection's home validation), and a thread that
// faults on one of its units meanwhile waits for it like for any unit another thread fetches.
struct engine::prefetch_job {
  std::vector<fetch_unit> batch;
  bool need_copy = false;
  request_map requests;
  std::vector<std::pair<std::uint32_t, std::vector<std::byte>>> replies;  // (creator, reply)
  std::size_t outstanding = 0;  // replies still to come (handler context: the progress lock orders them)
  std::uint32_t freed_epoch = 0;  // freed_epoch_ when the units joined
};

void engine::start_prefetch(std::uint32_t from, std::uint32_t count, bool need_copy, const std::vector<wanted>& first,
                            int home) {
  // Not while a collection runs. A blocking one has every home validate its units before the
  // barrier after which the writers free their diffs up to the cut (gc.cpp, steps 2-4): a
  // window asked for ahead by such a validation would still be in flight at the barrier, could
  // reach a writer after it freed those diffs, and then be installed as complete without them
  // (litmus 47 caught a home copy left at zero so). A background one likewise counts only the
  // fetches in flight at its cut. Windows already in flight when a collection starts are
  // `fetching` units, which both wait for.
  if (!prefetch_allowed()) return;
  if (prefetches_in_flight_.fetch_add(1, std::memory_order_acq_rel) >= k_prefetches_max) {
    prefetches_in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  auto job = std::make_shared<prefetch_job>();
  job->need_copy = need_copy;
  job->freed_epoch = freed_epoch_.load(std::memory_order_seq_cst);
  for (std::uint32_t v = from; v < region_.units() && v - from < count; ++v) {
    page_entry* pe = pages_.find(v);
    if (pe == nullptr) break;
    std::lock_guard lk(pages_.lock_of(v));
    if (!join_batch_locked(v, *pe, need_copy, home, first, job->batch)) break;
  }
  if (job->batch.empty()) {
    prefetches_in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  batch_next_.store(from + static_cast<std::uint32_t>(job->batch.size()), std::memory_order_relaxed);
  stats::add(stats::counter::prefetches);
  stats::add(stats::counter::prefetch_units, job->batch.size());
  job->requests = plan_requests(job->batch, need_copy);
  job->outstanding = job->requests.size();
  for (const auto& [creator, req] : job->requests) {
    auto box = std::make_shared<reply_box>();
    box->callback = [this, job, c = creator](std::span<const std::byte> payload, int) {
      job->replies.emplace_back(c, std::vector<std::byte>(payload.begin(), payload.end()));
      if (--job->outstanding == 0) finish_prefetch(*job);
    };
    send_fetch_request(creator, need_copy && creator == static_cast<std::uint32_t>(home), false, req, std::move(box));
  }
  // The window's pages get their memory now, one call for the window, while its writers make
  // its diffs: installed into pages that have never been touched, each unit's first write
  // would fault into the kernel and clear a page there, on the installing thread when the
  // reply comes (a rank reading another's freshly written block, as matmul reads B, spent most
  // of its install time so). The units are contiguous (join_batch_locked stops at the first
  // that cannot join) and `fetching`, so nothing reads them meanwhile; populating writes no byte.
  os::populate(region_.lib_unit(from), region_.unit() * job->batch.size());
}

bool engine::prefetch_allowed() const noexcept {
  return prefetch_ && no_prefetch_.load(std::memory_order_seq_cst) == 0 && !bg_active_.load(std::memory_order_acquire) &&
         prefetches_in_flight_.load(std::memory_order_relaxed) < k_prefetches_max;
}

void engine::prefetch_after(std::uint32_t u) {
  // Checked first: this runs whenever a thread waits for a unit being fetched, and the look at
  // the next unit below takes its page lock.
  if (!prefetch_allowed()) return;
  const std::uint32_t next = batch_next_.load(std::memory_order_relaxed);
  const std::uint32_t window = batch_window_.load(std::memory_order_relaxed);
  if (u >= next || next - u > window || next >= region_.units()) return;
  page_entry* pe = pages_.find(next);
  if (pe == nullptr) return;
  bool need_copy;
  std::vector<wanted> first;
  {
    std::lock_guard lk(pages_.lock_of(next));
    need_copy = pe->state == page_state::no_copy;
    first = wanted_locked(next, *pe);
  }
  start_prefetch(next, window, need_copy, first, home_of(next));
}

void engine::finish_prefetch(prefetch_job& job) {
  bool complete = true;
  try {
    bool busy = false;
    for (const auto& [creator, reply] : job.replies)
      complete = take_fetch_reply(job.batch, job.need_copy, creator, job.requests.at(creator), reply, busy) && complete;
    if (complete) order_pieces(job.batch);
  } catch (...) {  // a malformed reply: the units stay as they were (their faults ask again)
    end_prefetch(job, false);
    throw;
  }
  end_prefetch(job, complete);
}

void engine::end_prefetch(prefetch_job& job, bool install) {
  {
    protection_batch opened = protections();
    for (fetch_unit& f : job.batch) {
      opened.visit(f.unit, [&](page_entry& e) -> unit_protection {
        e.end_fetch();
        // Memory freed since the units joined (units_freed counts under no page lock, before it
        // looks at any unit) gets nothing: the copy would be installed into a freed, perhaps
        // reallocated unit.
        if (!install || (job.need_copy && f.copy.empty()) ||
            freed_epoch_.load(std::memory_order_seq_cst) != job.freed_epoch)
          return {e.prot};
        install_locked(f, e);
        return {settle_locked(f.unit, e) ? os::prot::read : e.prot};
      });
    }
  }
  prefetches_in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  fetch_finished();  // a background collection may wait for these units
}

void engine::install_locked(fetch_unit& f, page_entry& pe) {
  std::byte* page = region_.lib_unit(f.unit);
  if (!f.copy.empty()) copy_unit(page, f.copy.data(), region_.unit());
  if (pe.applied_through.empty()) pe.applied_through.assign(static_cast<std::size_t>(size_), 0);
  for (const auto& piece : f.pieces) {  // in happened-before order (order_pieces)
    // An earlier fetch (for an earlier interval it also covers) may have applied it.
    std::uint32_t& seen = pe.applied_serial(piece.creator);
    if (piece.serial <= seen) continue;
    seen = piece.serial;
    apply_diff(page, region_.unit(), piece.bytes);
    stats::add(stats::counter::diffs_applied);
    stats::add(stats::counter::diff_bytes_applied, piece.bytes.size());
    // A piece holds every write of its creator to this unit in [first, last], and the
    // creator's earlier pieces were applied before or in this fetch (known intervals are
    // downward closed), so everything up to `last` is now in the copy.
    auto& through = pe.applied_through[piece.creator];
    through = std::max(through, piece.last);
  }
  // Every writer served all of its writes in the range asked for.
  for (const wanted& w : f.wants) {
    auto& through = pe.applied_through[w.creator];
    through = std::max(through, w.through);
  }
}

void engine::order_pieces(std::vector<fetch_unit>& batch) {
  // An order consistent with happened-before: each piece at the vector-time sum of the first
  // interval it holds that the fetch asked for, then by creator and serial. (The sums come from
  // the interval store, under meta_, which must not be taken under a page lock.)
  {
    std::lock_guard meta(meta_);
    for (fetch_unit& f : batch)
      for (auto& piece : f.pieces) {
        std::uint32_t asked = piece.first;
        for (const wanted& w : f.wants)
          if (w.creator == piece.creator) asked = std::max(asked, w.after + 1);
        const record_ptr r = store_.find(piece.creator, asked);
        piece.sum = r ? r->vt.sum() : 0;
      }
  }
  for (fetch_unit& f : batch)
    std::sort(f.pieces.begin(), f.pieces.end(), [](const fetch_unit::piece& a, const fetch_unit::piece& b) {
      if (a.sum != b.sum) return a.sum < b.sum;
      return a.creator != b.creator ? a.creator < b.creator : a.serial < b.serial;
    });
}

}  // namespace mdsm::coherence
