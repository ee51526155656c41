// Garbage collection without a barrier, for programs that never call one (SOR's hybrid version
// synchronizes only with its neighbours, and its metadata grew by a diff, a notice and a record
// per interval, forever).
//
// The barrier collection (gc.cpp) needs every rank in one collective call. This one runs in the
// progress engine, by messages on the coherence channel, while the applications compute; rank 0
// coordinates. It frees what every rank already knows, up to a cut G:
//   1. a rank whose metadata passes 1.5 x the threshold asks rank 0 for a collection (gc_want);
//   2. rank 0 asks every rank for its vector time (gc_begin / gc_vt); G = their componentwise
//      minimum, so every rank knows every interval up to G, now and forever;
//   3. on gc_cut(G) every rank makes its copies hold every write up to G, or drops them: a unit
//      it is the home of and that lacks writes up to G is fetched (asynchronously, from the
//      handlers); any other unit that lacks them loses its copy (it will fetch one from the home);
//      every copy kept, or dropped, counts as holding every write up to G (applied_through), so
//      no request for a range at or below G is ever sent again. Fetches the application started
//      before the cut may still ask for such ranges, and may have begun before this rank learned
//      some notice up to G: the rank waits for them, decides their units once each fetch is over
//      (maybe_ready), then answers gc_ready. A dropped copy is not fetched again before the
//      collection is over: only then do all homes hold every write up to G (a home takes the cut
//      whenever its message arrives);
//   4. once every rank is ready, rank 0 sends gc_free: every rank frees its records, notices and
//      diffs up to G (collect_through, as the barrier collection does).
// Nothing here blocks (handlers run it); a rank inside a barrier collection keeps the cut and the
// free for after it, so the two never interleave.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "common/deferred.hpp"
#include "stats/counters.hpp"

#include <algorithm>

namespace mdsm::coherence {

namespace {
constexpr int k_coordinator = 0;
}

void engine::set_gc_threshold(std::uint64_t bytes) noexcept {
  gc_threshold_.store(bytes, std::memory_order_relaxed);
  rearm_background_trigger();
}

void engine::rearm_background_trigger() noexcept {
  // 1.5x the threshold, and at least the threshold above what a collection left: what it cannot
  // free (twins of units being written, the notices and diffs newer than the cut) must not make
  // every interval ask for another one.
  const std::uint64_t threshold = background_gc_ ? gc_threshold_.load(std::memory_order_relaxed) : 0;
  bg_trigger_.store(threshold == 0 ? 0 : std::max(threshold + threshold / 2, metadata_bytes() + threshold),
                    std::memory_order_relaxed);
}

void engine::maybe_want_gc() {
  if (!bg_want_.load(std::memory_order_relaxed)) return;
  if (!bg_want_.exchange(false, std::memory_order_acq_rel)) return;
  std::uint32_t epoch;
  {
    std::lock_guard lk(bg_.mu);
    if (bg_.asked || bg_.active) return;  // one request per collection
    bg_.asked = true;
    epoch = bg_.epoch + 1;
  }
  send_gc(k_coordinator, op_gc_want, epoch, nullptr);
}

void engine::send_gc(int dest, std::uint32_t op, std::uint32_t epoch, const vector_time* vt) {
  net::byte_writer out;
  out.put(epoch);
  if (vt != nullptr) vt->encode(out);
  send_protocol(dest, op, 0, out.bytes());
}

void engine::on_gc_frame(const net::inbound_frame& f) {
  const std::uint32_t op = f.header.handler;
  gc_message msg = decode_gc(op, f.payload(), static_cast<std::size_t>(size_));
  const std::uint32_t epoch = msg.epoch;
  vector_time vt = std::move(msg.vt);
  const bool to_coordinator = op == op_gc_want || op == op_gc_vt || op == op_gc_ready;
  if (to_coordinator && rank_ != k_coordinator) net::byte_reader::malformed("collection message for the coordinator");
  switch (op) {
    case op_gc_want: {
      std::lock_guard lk(bg_.mu);
      if (bg_.running || epoch != bg_.coord_epoch + 1) return;  // under way or done already
      bg_.running = true;
      bg_.coord_epoch = epoch;
      bg_.vts = 0;
      bg_.readies = 0;
      bg_.min = vector_time(static_cast<std::size_t>(size_));
      for (std::size_t c = 0; c < bg_.min.size(); ++c) bg_.min[c] = ~std::uint32_t{0};
      break;
    }
    case op_gc_vt: {
      std::lock_guard lk(bg_.mu);
      if (!bg_.running || epoch != bg_.coord_epoch) net::byte_reader::malformed("collection answer out of turn");
      for (std::size_t c = 0; c < vt.size(); ++c) bg_.min[c] = std::min(bg_.min[c], vt[c]);
      if (++bg_.vts < size_) return;
      break;
    }
    case op_gc_ready: {
      std::lock_guard lk(bg_.mu);
      if (!bg_.running || epoch != bg_.coord_epoch) net::byte_reader::malformed("collection answer out of turn");
      if (++bg_.readies < size_) return;
      bg_.running = false;
      break;
    }
    case op_gc_begin: {
      const vector_time mine = current_vt();
      send_gc(k_coordinator, op_gc_vt, epoch, &mine);
      return;
    }
    case op_gc_cut:
    case op_gc_free: {
      {
        std::lock_guard lk(bg_.mu);
        if (bg_.blocking) {  // a barrier collection runs: after it
          bg_.deferred.push_back(deferred_step{op, epoch, std::move(vt)});
          return;
        }
      }
      return op == op_gc_cut ? gc_cut(epoch, vt) : gc_free(epoch, vt);
    }
    default: net::byte_reader::malformed("unknown collection operation");
  }
  // The coordinator's next step, outside its lock (it sends to every rank, itself included).
  if (op == op_gc_want) {
    for (int r = 0; r < size_; ++r) send_gc(r, op_gc_begin, epoch, nullptr);
  } else if (op == op_gc_vt) {
    vector_time g;
    {
      std::lock_guard lk(bg_.mu);
      g = bg_.min;
      bg_.cut_sent = g;
    }
    for (int r = 0; r < size_; ++r) send_gc(r, op_gc_cut, epoch, &g);
  } else if (op == op_gc_ready) {
    vector_time g;
    {
      std::lock_guard lk(bg_.mu);
      g = bg_.cut_sent;
    }
    for (int r = 0; r < size_; ++r) send_gc(r, op_gc_free, epoch, &g);
  }
}

void engine::gc_cut(std::uint32_t epoch, const vector_time& g) {
  {
    std::lock_guard lk(bg_.mu);
    bg_.epoch = epoch;
    bg_.cut = g;
    bg_.waiting.clear();
    bg_.validations = 0;
  }
  // Every unit this rank has an entry for: bring it up to G, or drop it (see the top).
  cut_plan plan;
  const std::uint32_t mine_g = g[static_cast<std::size_t>(rank_)];
  pages_.for_each([&](std::uint32_t u, page_entry& pe) {
    // This rank's own writes up to G still only in the twin get their diff now: their notices are
    // freed with the cut, and a later diff of the same twin would carry them again, into
    // intervals after G, where they could land over another writer's newer value.
    if (pe.twin && std::any_of(pe.own.begin(), pe.own.end(), [&](const own_notice& n) {
          return n.awaiting_twin && n.first <= mine_g;
        }))
      snapshot_diff_locked(u, pe);
    if (pe.state != page_state::unallocated) plan_cut_locked(u, pe, g, plan);
  });
  drop_for_cut(plan.drop, g, epoch, plan.waiting);
  // Active from here: fetches that finish now, and the validations (their replies come to the
  // holder of the progress lock, which is this handler's thread until it returns), count down.
  {
    std::lock_guard lk(bg_.mu);
    bg_.waiting = std::move(plan.waiting);
    bg_.validations = static_cast<int>(plan.validate.size());
    bg_.active = true;
  }
  bg_active_.store(true, std::memory_order_release);
  for (auto& [u, wants] : plan.validate) start_home_validation(u, std::move(wants), g);
  maybe_ready();
}

void engine::plan_cut_locked(std::uint32_t u, page_entry& pe, const vector_time& g, cut_plan& plan) {
  // A fetch under way asked for what this rank knew when it began, which may be less than G (a
  // notice up to G learned since): the unit is decided again once the fetch is over
  // (maybe_ready). Deciding it now, or not at all, lost writes: the collection forgets the
  // notices up to G, so a copy that lacked one after the fetch never fetched it (a random DRF
  // program read 0 for a word written before a barrier, under TSan).
  if (pe.fetching) {
    plan.waiting.emplace_back(u, pe.fetch_generation);
    return;
  }
  std::vector<wanted> wants = wanted_locked(u, pe);
  const bool lacks = std::any_of(wants.begin(), wants.end(), [&](const wanted& w) {
    return std::min(w.through, g[w.creator]) > w.after;
  });
  if (!lacks) {
    raise_applied_through_locked(pe, g);
    return;
  }
  // A copy holding this rank's own writes after G is not dropped either: the home does not have
  // them yet (it has every write up to G, and G may be older than this rank's newest interval).
  const std::uint32_t mine_g = g[static_cast<std::size_t>(rank_)];
  const bool own_after_g = pe.twin || pe.dirty || !pe.open_pieces.empty() ||
                           (!pe.own.empty() && pe.own.back().last_closed(last_closed_.load(std::memory_order_relaxed)) > mine_g);
  if ((home_of(u) == rank_ || own_after_g) && pe.state != page_state::no_copy) {
    pe.fetching = true;
    if (pe.twin) make_diff_locked(u, pe);  // this rank's own writes first
    plan.validate.emplace_back(u, std::move(wants));
    return;
  }
  plan.drop.push_back(u);
}

void engine::drop_for_cut(const std::vector<std::uint32_t>& units, const vector_time& g, std::uint32_t epoch,
                          std::vector<std::pair<std::uint32_t, std::uint32_t>>& waiting) {
  protection_batch batch = protections();
  for (std::uint32_t u : units) {
    batch.visit(u, [&](page_entry& pe) -> unit_protection {
      // Between the decision and here (page lock released) another thread may have begun a
      // fetch (decided when it is over) or finished one (valid: it asked for everything this rank
      // knows, so everything up to G).
      if (pe.fetching) {
        waiting.emplace_back(u, pe.fetch_generation);
        return {pe.prot};
      }
      if (pe.state == page_state::valid) raise_applied_through_locked(pe, g);
      if (pe.state != page_state::invalid && pe.state != page_state::no_copy) return {pe.prot};
      if (pe.twin) make_diff_locked(u, pe);  // save this rank's writes, so the copy can go
      raise_applied_through_locked(pe, g);
      pe.dropped_in = epoch;
      if (pe.state == page_state::no_copy) return {pe.prot};
      set_state_locked(u, pe, page_state::no_copy);
      return {os::prot::none, true};
    });
  }
}

void engine::start_home_validation(std::uint32_t u, std::vector<wanted> wants, const vector_time& g) {
  // One request per writer; the last reply installs the unit (handler context).
  auto job = std::make_shared<home_validation>();
  job->unit.unit = u;
  job->unit.wants = std::move(wants);
  job->outstanding = static_cast<int>(job->unit.wants.size());
  job->cut = g;
  const std::vector<wanted> asks = job->unit.wants;
  for (const wanted& w : asks) {
    auto box = std::make_shared<reply_box>();
    box->callback = [this, job](std::span<const std::byte> payload, int source) {
      job->replies.emplace_back(source, std::vector<std::byte>(payload.begin(), payload.end()));
      if (--job->outstanding == 0) finish_home_validation(*job);
    };
    // Not a fault: a request ahead (the writer must not take the unit for one this rank read).
    send_fetch_request(w.creator, false, false, {u, w.after, w.through}, std::move(box));
  }
}

void engine::finish_home_validation(home_validation& job) {
  fetch_unit& f = job.unit;
  const std::uint32_t request[3] = {f.unit, 0, 0};  // the one unit asked for (ranges are not in replies)
  for (const auto& [source, bytes] : job.replies) {
    const auto creator = static_cast<std::uint32_t>(source);
    decode_diff_reply(bytes, request, [&](std::size_t, const piece_view& p) {
      f.pieces.push_back(fetch_unit::piece{creator, p.first, p.last, p.serial, p.bytes});
    });
  }
  std::vector<fetch_unit> one;
  one.push_back(std::move(f));
  order_pieces(one);
  {
    const std::uint32_t u = one.front().unit;
    std::lock_guard lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    pe.end_fetch();
    // (A copy freed meanwhile has nothing to bring up to date.) Up to date now unless newer
    // notices came meanwhile: it then stays invalid, and its next access fetches them.
    if (pe.state == page_state::invalid || pe.state == page_state::valid) {
      install_locked(one.front(), pe);
      raise_applied_through_locked(pe, job.cut);
      if (settle_locked(u, pe) && pe.prot == os::prot::none) set_prot_locked(u, pe, os::prot::read);
    }
  }
  {
    std::lock_guard lk(bg_.mu);
    --bg_.validations;
  }
  fetch_finished();
  maybe_ready();
}

void engine::fetch_finished() {
  if (bg_active_.load(std::memory_order_acquire)) maybe_ready();
}

void engine::maybe_ready() {
  // Page locks are taken without bg_.mu held (gc_cut takes bg_.mu under a page lock).
  cut_plan plan;
  vector_time g;
  std::uint32_t epoch = 0;
  bool ready = false;
  {
    std::lock_guard deciding(bg_ready_mu_);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> waiting;
    {
      std::lock_guard lk(bg_.mu);
      if (!bg_.active || bg_.validations != 0) return;
      waiting = bg_.waiting;
      g = bg_.cut;
      epoch = bg_.epoch;
    }
    // Units whose fetch is over are decided now, as the cut decides them (plan_cut_locked); one
    // being fetched again is waited for again (that fetch asks for everything up to G: it began
    // after the cut).
    for (const auto& [u, generation] : waiting) {
      std::lock_guard pl(pages_.lock_of(u));
      page_entry& pe = pages_.at(u);
      if (pe.fetch_generation == generation && pe.fetching) plan.waiting.emplace_back(u, generation);
      else if (pe.state != page_state::unallocated) plan_cut_locked(u, pe, g, plan);
    }
    std::sort(plan.drop.begin(), plan.drop.end());
    drop_for_cut(plan.drop, g, epoch, plan.waiting);
    std::lock_guard lk(bg_.mu);
    bg_.waiting = std::move(plan.waiting);
    bg_.validations += static_cast<int>(plan.validate.size());
    if (bg_.active && bg_.validations == 0 && bg_.waiting.empty()) {
      bg_.active = false;
      ready = true;
    }
  }
  for (auto& [u, wants] : plan.validate) start_home_validation(u, std::move(wants), g);
  if (!ready) return;
  bg_active_.store(false, std::memory_order_release);
  send_gc(k_coordinator, op_gc_ready, epoch, nullptr);
}

void engine::gc_free(std::uint32_t epoch, const vector_time& g) {
  collect_through(g);
  rearm_background_trigger();
  bg_freed_.store(std::max(bg_freed_.load(std::memory_order_relaxed), epoch), std::memory_order_release);
  stats::add(stats::counter::gc_background_runs);
  std::lock_guard lk(bg_.mu);
  bg_.epoch = std::max(bg_.epoch, epoch);
  bg_.asked = false;
}

void engine::begin_blocking_gc() {
  no_prefetch_.fetch_add(1, std::memory_order_seq_cst);  // start_prefetch
  std::lock_guard lk(bg_.mu);
  bg_.blocking = true;
}

void engine::end_blocking_gc() noexcept {
  std::vector<deferred_step> todo;
  {
    std::lock_guard lk(bg_.mu);
    bg_.blocking = false;
    todo.swap(bg_.deferred);
  }
  no_prefetch_.fetch_sub(1, std::memory_order_seq_cst);
  try {
    for (auto& step : todo) {
      if (step.op == op_gc_cut) gc_cut(step.epoch, step.vt);
      else gc_free(step.epoch, step.vt);
    }
  } catch (const error& e) {
    detail::defer_error(e);
  }
}

}  // namespace mdsm::coherence
