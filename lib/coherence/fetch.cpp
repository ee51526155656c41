// The fetch a fault makes (engine::validate, fault.cpp): which neighbouring units go along
// (gather_neighbours), one request per writer and to the home for copies, the wait for the
// replies (with a nudge for a late server), and installing what came back in an order
// consistent with happened-before. Runs on the faulting thread, possibly inside its SIGSEGV
// handler, with no page lock held except where a function says so.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "common/wait_subject.hpp"
#include "net/doorbells.hpp"
#include "stats/clock.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace mdsm::coherence {

void engine::gather_neighbours(std::vector<fetch_unit>& batch, bool need_copy) {
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
  const std::uint32_t window =
      u == batch_next_.load(std::memory_order_relaxed)
          ? std::min(2 * batch_window_.load(std::memory_order_relaxed), k_batch_max)
          : k_batch_min;
  batch_window_.store(window, std::memory_order_relaxed);
  const std::vector<wanted> first = batch.front().wants;  // a copy: batch grows below
  const int home = home_of(u);
  for (std::uint32_t v = u + 1; v < region_.units() && v - u < window; ++v) {
    if (pages_.find(v) == nullptr) break;
    if (need_copy && home_of(v) != home) break;
    std::lock_guard lk(pages_.lock_of(v));
    page_entry& pe = pages_.at(v);
    if (need_copy) {
      // A copy dropped by a background collection still under way is left to its own fault
      // (validate waits for the collection); one with a twin has writes of ours to save first.
      if (pe.state != page_state::no_copy || pe.fetching || pe.dropped_in != 0 || pe.twin) break;
      pe.fetching = true;
      fetch_unit f{v, wanted_locked(v, pe), {}, {}};
      f.home_after = pe.applied_through_of(static_cast<std::uint32_t>(home));
      batch.push_back(std::move(f));
      continue;
    }
    if (pe.state != page_state::invalid || pe.fetching) break;
    std::vector<wanted> wants = wanted_locked(v, pe);
    const bool same_writers = !wants.empty() && std::all_of(wants.begin(), wants.end(), [&](const wanted& w) {
      return std::any_of(first.begin(), first.end(), [&](const wanted& f) { return f.creator == w.creator; });
    });
    if (!same_writers) break;
    pe.fetching = true;
    if (pe.twin) make_diff_locked(v, pe);
    batch.push_back(fetch_unit{v, std::move(wants), {}, {}});
  }
  batch_next_.store(u + static_cast<std::uint32_t>(batch.size()), std::memory_order_relaxed);
}

namespace {
// A reply normally takes 10-60 us (a round trip plus making the diffs of up to 16 units; a
// readahead batch of up to 128 takes longer, and a nudge then only costs a spurious wake-up).
constexpr double k_nudge_after_ns = 50'000;
}  // namespace

auto engine::fetch(std::vector<fetch_unit>& batch, bool need_copy, bool& copy_busy) -> std::vector<box_ptr> {
  copy_busy = false;
  // One request per writer for every unit of the batch that lacks its writes; units without a
  // copy (all of the batch, or none) ask their home for the copies as well, in one request
  // that also names the home's writes each lacks.
  const auto home = static_cast<std::uint32_t>(home_of(batch.front().unit));
  std::map<std::uint32_t, std::vector<std::uint32_t>> by_creator;  // creator -> (unit, after, through)...
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
  std::vector<std::pair<std::uint32_t, box_ptr>> boxes;
  for (auto& [creator, req] : by_creator) {
    MDSM_ASSERT(static_cast<int>(creator) != rank_, "fetching from oneself");
    auto box = std::make_shared<reply_box>();
    const std::uint32_t token = register_box(box);
    const bool copy = need_copy && creator == home;
    stats::add(copy ? stats::counter::page_requests : stats::counter::diff_requests);
    net::byte_writer out;
    out.put(static_cast<std::uint32_t>(req.size() / 3));
    out.put_array<std::uint32_t>(req);
    send_protocol(static_cast<int>(creator), copy ? op_copy_request : op_diff_request, token, out.bytes());
    boxes.emplace_back(creator, std::move(box));
  }
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
      std::string out = std::string("address ") + at + "; no reply yet from rank(s)";
      for (const auto& [creator, box] : w.boxes)
        if (!box->ready.load(std::memory_order_acquire)) out += " " + std::to_string(creator);
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
    if (!all && !nudged && stats::ticks() - asked_at >= nudge_after) {
      nudged = true;
      for (const auto& [creator, box] : boxes)
        if (!box->ready.load(std::memory_order_acquire)) {
          transport_.bells().nudge(static_cast<int>(creator));
          stats::add(stats::counter::nudges);
        }
    }
    return all;
  });
  std::vector<box_ptr> replies;
  for (auto& entry : boxes) {
    const std::uint32_t creator = entry.first;  // not a structured binding: the lambdas capture it
    const box_ptr& box = entry.second;
    const std::vector<std::uint32_t>& req = by_creator[creator];
    // The reply's entries are in request order; the request was built from the batch in order.
    auto add_piece = [&](std::vector<fetch_unit>::iterator f, const piece_view& p) {
      f->pieces.push_back(fetch_unit::piece{creator, p.first, p.last, p.serial, p.bytes});
    };
    if (need_copy && creator == home) {
      // Entry k is batch[k]: the copy request names every unit of the batch, in order.
      const copy_reply_end end = decode_copy_reply(
          box->data, req, region_.unit(), [&](std::size_t k, std::span<const std::byte> copy) { batch[k].copy = copy; },
          [&](std::size_t k, const piece_view& p) { add_piece(batch.begin() + static_cast<std::ptrdiff_t>(k), p); });
      if (end.copies == 0) {  // the faulting unit: not allocated at the home, or busy
        copy_busy = end.status == k_copy_busy;
        return {};
      }
      // A neighbour without a copy stays without one: its own fault asks again.
    } else {
      std::size_t at = SIZE_MAX;  // the entry f is the unit of
      auto f = batch.end();
      decode_diff_reply(box->data, req, [&](std::size_t k, const piece_view& p) {
        // Every unit of the request is in the batch (the request was built from it).
        if (k != at) f = std::find_if(batch.begin(), batch.end(), [&](const fetch_unit& x) { return x.unit == req[3 * k]; });
        at = k;
        add_piece(f, p);
      });
    }
    replies.push_back(box);
  }
  return replies;
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
