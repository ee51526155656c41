#include "net/progress.hpp"

#include "common/check.hpp"
#include "common/deferred.hpp"
#include "common/env.hpp"
#include "common/wait_subject.hpp"
#include "os/futex.hpp"
#include "os/topology.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

#include <sched.h>
#include <sys/prctl.h>

namespace mdsm::net {

namespace {

// Idle turns of a wait loop spent spinning before each further turn yields the core.
constexpr unsigned k_spin_turns = 64;
// Once a wait is long, yielding turns read the clock (for the deadline) only this often.
constexpr unsigned k_clock_turns = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

thread_local constinit const char* t_current_handler = nullptr;
thread_local constinit unsigned t_no_switch = 0;

switched_state switched_state::take() noexcept {
  switched_state s{detail::t_wait_subject, detail::t_deferred_hold, stats::t_activity, t_unthrottled, t_no_switch};
  detail::t_wait_subject = nullptr;
  detail::t_deferred_hold = 0;
  stats::t_activity = stats::activity::none;
  t_unthrottled = 0;
  t_no_switch = 0;
  return s;
}

void switched_state::restore() const noexcept {
  detail::t_wait_subject = subject;
  detail::t_deferred_hold = deferred_hold;
  stats::t_activity = activity;
  t_unthrottled = unthrottled;
  t_no_switch = no_switch;
}

progress_config progress_config::from_env(progress_config d) {
  d.thread = detail::env_uint("MDSM_PROGRESS_THREAD", d.thread ? 1 : 0) != 0;
  d.spin_explicit = detail::env_string("MDSM_PROGRESS_SPIN_US").has_value();
  d.spin_ns = detail::env_uint("MDSM_PROGRESS_SPIN_US", d.spin_ns / 1000) * 1000;
  d.sleep_min_ns = detail::env_uint("MDSM_PROGRESS_SLEEP_MIN_US", d.sleep_min_ns / 1000) * 1000;
  d.sleep_max_explicit = detail::env_string("MDSM_PROGRESS_SLEEP_MAX_US").has_value();
  d.sleep_max_ns = detail::env_uint("MDSM_PROGRESS_SLEEP_MAX_US", d.sleep_max_ns / 1000) * 1000;
  d.park_max_ns = detail::env_uint("MDSM_PROGRESS_PARK_MAX_US", d.park_max_ns / 1000) * 1000;
  d.deep_nap_explicit = detail::env_string("MDSM_PROGRESS_DEEP_NAP_US").has_value();
  d.deep_nap_ns = detail::env_uint("MDSM_PROGRESS_DEEP_NAP_US", d.deep_nap_ns / 1000) * 1000;
  d.pin = detail::env_uint("MDSM_PROGRESS_PIN", d.pin ? 1 : 0) != 0;
  if (auto s = detail::env_string("MDSM_WAIT_DEADLINE_S")) {
    char* end = nullptr;
    const double v = std::strtod(s->c_str(), &end);
    if (end == s->c_str() || *end != '\0' || !(v >= 0) || v > 1e9)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_WAIT_DEADLINE_S='", *s,
                   "' is not a number of seconds (0 for no deadline)");
    d.wait_deadline_ns = static_cast<std::uint64_t>(v * 1e9);
  }
  if (d.sleep_min_ns == 0) d.sleep_min_ns = 1000;
  if (d.sleep_max_ns < d.sleep_min_ns) d.sleep_max_ns = d.sleep_min_ns;
  if (d.park_max_ns < d.sleep_max_ns) d.park_max_ns = d.sleep_max_ns;
  return d;
}

progress_config progress_config::with_bells() const {
  progress_config c = *this;
  if (!c.sleep_max_explicit) c.sleep_max_ns = std::max(c.sleep_max_ns, k_sleep_max_with_bells_ns);
  c.bells_everywhere = true;
  c.park_max_ns = std::max(c.park_max_ns, c.sleep_max_ns);
  if (!c.deep_nap_explicit) c.deep_nap_ns = k_deep_nap_with_bells_ns;
  return c;
}

progress::progress(transport& t, progress_config cfg)
    : transport_(t),
      cfg_(cfg),
      long_wait_ticks_(static_cast<std::uint64_t>(static_cast<double>(cfg.sleep_max_ns) / stats::ns_per_tick())),
      deadline_ticks_(static_cast<std::uint64_t>(static_cast<double>(cfg.wait_deadline_ns) / stats::ns_per_tick())) {
  t.set_window_waiter(&progress::wait_for_window, this);
}

progress::~progress() {
  stop_thread();
  transport_.set_window_waiter(nullptr, nullptr);
}

void progress::wait_for_window(void* ctx, int dest) {
  auto& p = *static_cast<progress*>(ctx);
  detail::wait_subject subject{.what = "flow-control credits (the receiver has not consumed this rank's earlier "
                                       "messages)",
                               .peer = dest,
                               .peer_role = "the destination"};
  detail::waiting_for waiting(subject);
  // No switch: the send's frame is half built in this thread's staging buffer, which another
  // user-level thread's send would reuse.
  no_switch_scope stay;
  p.wait_until([&p, dest] { return !p.transport_.window_full(dest); });
}

std::uint64_t progress::now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void progress::start_thread() {
  if (!cfg_.thread || thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { thread_main(); });
  running_.store(true, std::memory_order_release);
}

void progress::stop_thread() {
  if (!thread_.joinable()) return;
  running_.store(false, std::memory_order_release);
  stop_.store(true, std::memory_order_seq_cst);
  transport_.bells().wake_own();
  thread_.join();
}

void progress::set_paused(bool paused) {
  paused_.store(paused, std::memory_order_seq_cst);
  transport_.bells().wake_own();
  // Pausing takes effect before this returns: the thread may have looked at paused_ just before
  // the store and be about to poll. It re-checks paused_ once it holds the progress lock
  // (try_poll), so after the lock has been seen free once, it delivers nothing more.
  if (paused)
    while (locked_.load(std::memory_order_seq_cst)) cpu_relax();
}

namespace {
void refuse_in_handler() {
  if (const char* h = current_handler())
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, "message handler '", h,
                 "' tried to block (wait for a remote event); handlers must return at once: store the message "
                 "and finish the work from the application thread");
}
}  // namespace

void progress::enter_wait() {
  refuse_in_handler();
  app_waiters_.fetch_add(1, std::memory_order_acq_rel);
  waits_entered_.fetch_add(1, std::memory_order_relaxed);
  stats::add(stats::counter::waits);
}

void progress::set_upcalls(const upcalls& u) {
  const bool any = u.current != nullptr || u.block != nullptr || u.wake != nullptr;
  MDSM_ASSERT(!any || (u.current != nullptr && u.block != nullptr && u.wake != nullptr), "a partial upcall set");
  std::lock_guard lk(blocked_mu_);
  if (blocked_count_.load(std::memory_order_acquire) != 0)
    detail::fail(MDSM_ERR_BUSY, "set_upcalls: ", blocked_count_.load(), " wait(s) are suspended through the upcalls "
                 "set now; change them only while no user-level thread waits inside mdsm");
  if (!any) {
    upcalls_.store(nullptr, std::memory_order_release);
    return;
  }
  upcall_sets_.push_back(std::make_unique<upcalls>(u));
  upcalls_.store(upcall_sets_.back().get(), std::memory_order_release);
}

bool progress::wait_suspended(bool (*done)(void*), void* ctx) {
  const upcalls* set = upcalls_.load(std::memory_order_acquire);
  if (set == nullptr) return false;
  const upcalls& u = *set;
  void* waiter = u.current(u.ctx);
  if (waiter == nullptr) return false;  // not one of the scheduler's threads: poll
  refuse_in_handler();
  waits_entered_.fetch_add(1, std::memory_order_relaxed);
  stats::add(stats::counter::waits);
  stats::add(stats::counter::waits_suspended);
  const std::uint64_t start = stats::timing() ? stats::ticks() : 0;
  const stats::activity doing = stats::t_activity;
  wait_token token{done, ctx, waiter, detail::t_wait_subject, &u, nullptr};
  const switched_state mine = switched_state::take();
  {
    std::lock_guard lk(blocked_mu_);
    token.next = blocked_;
    blocked_ = &token;
    const std::size_t listed = blocked_count_.fetch_add(1, std::memory_order_release) + 1;
    stats::add(stats::counter::waits_suspended_listed, listed);
  }
  // A frame delivered between the caller's look at its condition and the listing above was
  // checked without this token: look once more (this may wake it before it blocks; the scheduler
  // allows that).
  check_blocked();
  // Returns only after wake (the contract): the token is off the list and no thread touches it.
  u.block(&token, waiter, u.ctx);
  mine.restore();
  if (start != 0) {
    const std::uint64_t t = stats::ticks() - start;
    stats::add(stats::counter::wait_ns, t);
    if (doing == stats::activity::none) stats::add(stats::counter::sync_wait_ns, t);
  }
  return true;
}

void progress::check_blocked_slow() {
  // The list is taken out, its predicates are evaluated with no lock held (a predicate may take
  // the locks handlers take, or poll, which checks again: it then sees only the tokens listed
  // since), and the tokens that still wait are put back. One evaluator per token at a time.
  wait_token* mine;
  {
    std::lock_guard lk(blocked_mu_);
    mine = std::exchange(blocked_, nullptr);
  }
  wait_token* ready = nullptr;
  wait_token* keep = nullptr;
  wait_token** keep_end = &keep;
  for (wait_token* t = mine; t != nullptr;) {
    wait_token* const next = t->next;
    bool holds = false;
    try {
      holds = t->done(t->done_ctx);
    } catch (const error& e) {
      // A predicate cannot throw to its waiter from here; the waiter resumes and meets the
      // error at its next mdsm call.
      detail::defer_error(e);
      holds = true;
    }
    if (holds) {
      t->next = ready;
      ready = t;
      blocked_count_.fetch_sub(1, std::memory_order_release);
    } else {
      *keep_end = t;
      keep_end = &t->next;
    }
    t = next;
  }
  if (keep != nullptr) {
    std::lock_guard lk(blocked_mu_);
    *keep_end = blocked_;
    blocked_ = keep;
  }
  // A wake may run a scheduler's code; the token is not read after its wake.
  while (ready != nullptr) {
    wait_token* t = ready;
    ready = t->next;
    const upcalls& u = *t->set;  // the set whose block it went to
    u.wake(t, t->waiter, u.ctx);
  }
}

std::string progress::describe_blocked() {
  std::string out;
  std::lock_guard lk(blocked_mu_);
  std::size_t n = 0;
  for (const wait_token* t = blocked_; t != nullptr; t = t->next) {
    if (++n > 4) {
      out += "; ...";
      break;
    }
    if (!out.empty()) out += "; ";
    out += detail::describe_subject(t->subject, transport_.rank());
  }
  return out;
}

void progress::add_wait_time(const waiter_guard& w) { stats::add_wait(stats::ticks() - w.start_); }

void progress::wake_parked() {
  if (parked_.load(std::memory_order_seq_cst)) transport_.bells().wake_own();
}

void progress::idle(unsigned& turns, waiter_guard& w) {
  // Suspended waits whose condition holds without a frame (a deadline, a nudge to send) are
  // looked at on idle turns too.
  check_blocked();
  if (++turns >= k_spin_turns) {
    // No pause between turns: a turn already spends ~100 ns inside MPI, and a pause would only
    // delay noticing the frame a waiter waits for. Past the spin, yield: oversubscribed ranks
    // need the core more than this spin does.
    sched_yield();
  } else {
    return;
  }
  // Only yielding turns read the clock, so a wait answered within the spin pays nothing for this;
  // a long wait, only every k_clock_turns turns.
  if (w.long_ && ++w.turns_since_clock_ < k_clock_turns) return;
  w.turns_since_clock_ = 0;
  const std::uint64_t now = stats::ticks();
  if (w.idle_since_ == 0) {
    w.idle_since_ = now;
    return;
  }
  const std::uint64_t waited = now - w.idle_since_;
  if (waited >= long_wait_ticks_) w.long_ = true;
  if (deadline_ticks_ != 0 && waited >= deadline_ticks_) [[unlikely]]
    deadline_passed(waited);
}

void progress::deadline_passed(std::uint64_t waited_ticks) {
  const double waited_s = static_cast<double>(waited_ticks) * stats::ns_per_tick() / 1e9;
  std::fprintf(stderr,
               "mdsm: rank %d has waited %.1f s for %s -- longer than the wait deadline (MDSM_WAIT_DEADLINE_S=%g). "
               "The rank it waits for has stopped, hangs, or lost its host (or the deadline is too short for "
               "this program: raise it). Ending the job.\n",
               transport_.rank(), waited_s, detail::describe_wait(transport_.rank()).c_str(),
               static_cast<double>(cfg_.wait_deadline_ns) / 1e9);
  std::fflush(stderr);
  // Ranks whose deadlines pass at about the same time (each waiting for another side of the
  // same mismatch) report too before the abort ends them: together the reports say who waited
  // for what.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Abort(transport_.collective_comm(), k_deadline_exit_code);
  std::abort();  // MPI_Abort does not return; if it did, this process must not go on
}

void progress::park(std::uint64_t& nap_ns) {
  doorbells& bells = transport_.bells();
  parked_.store(true, std::memory_order_seq_cst);
  for (;;) {
    // Read the word before looking at the condition: a wake-up (or a nudge) after the look
    // changes it, and the futex does not sleep.
    const std::uint32_t seen = bells.own_count();
    if (stop_.load(std::memory_order_seq_cst) || !stand_aside()) break;
    if (paused_.load(std::memory_order_seq_cst)) {
      bells.wait_own(seen, doorbells::k_forever);
      continue;
    }
    // Woken by the timeout with an application thread still waiting: a communication phase, in
    // which every wake-up only costs the application its core. Nap longer next time.
    if (!bells.wait_own(seen, nap_ns)) nap_ns = std::min(nap_ns * 2, cfg_.park_max_ns);
  }
  parked_.store(false, std::memory_order_seq_cst);
}

bool progress::run_background() {
  auto* fn = background_.load(std::memory_order_acquire);
  if (fn == nullptr) return false;
  try {
    return fn(background_ctx_.load(std::memory_order_relaxed));
  } catch (const error& e) {
    detail::defer_error(e);
    return false;
  }
}

void progress::background_added() { transport_.bells().knock(transport_.rank()); }

void progress::thread_main() {
  // Precise short sleeps: the default 50 us timer slack would stretch every nap.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  os::request_short_slice();
  bool dedicated = false;
  if (cfg_.pin) pinning_ = os::topology::pin_to_spare_pu(cfg_.local_rank, cfg_.local_size, &dedicated);
  else pinning_ = "not pinned (MDSM_PROGRESS_PIN=0)";
  // Spinning after a delivery pays off only on a hardware thread of our own; on a shared one it
  // takes the core from the application (or from another rank), so the thread only naps there,
  // unless MDSM_PROGRESS_SPIN_US asks for spinning explicitly.
  const std::uint64_t spin_ns = dedicated || cfg_.spin_explicit ? cfg_.spin_ns : 0;
  std::uint64_t idle_since = now_ns();
  std::uint64_t nap = cfg_.sleep_min_ns;
  std::uint64_t park_nap = cfg_.sleep_max_ns;
  // Deep naps only where every frame knocks, and only when the nap is longer than the longest
  // ordinary one.
  const bool deep_naps = cfg_.bells_everywhere && cfg_.deep_nap_ns > cfg_.sleep_max_ns;
  bool calm = false;  // the last nap lasted sleep_max (or was deep), and nothing came meanwhile
  while (!stop_.load(std::memory_order_acquire)) {
    check_blocked();
    const bool background_busy = run_background();
    if (stand_aside()) {
      // An application thread is polling for itself (or the program paused us).
      park(park_nap);
      idle_since = now_ns();
      nap = cfg_.sleep_min_ns;
      calm = false;
      continue;
    }
    bool delivered = false;
    try {
      delivered = try_poll(k_batch, true);
    } catch (const error& e) {
      detail::defer_error(e);
    }
    if (delivered) {
      idle_since = now_ns();
      nap = cfg_.sleep_min_ns;
      park_nap = cfg_.sleep_max_ns;  // the application computes while messages arrive
      calm = false;
      continue;
    }
    if (now_ns() - idle_since < spin_ns) {
      cpu_relax();
      continue;
    }
    // Sleep on this rank's doorbell: a rank of this host that sends us a request rings it, so
    // the nap ends at once when there is work and lasts otherwise (net/doorbells.hpp). Deep
    // after a whole sleep_max nap in which nothing came and the application entered no wait
    // (it computes): then any frame knocks, and the thread wakes for nothing only every
    // deep_nap. Not sooner: a rank between two bursts of messages (or waiting for them, polling
    // by itself) would be knocked on for the frames of the next (a stream of 8 B NONE messages
    // to a waiting rank: 20x the futex wake-ups, ~20% slower). Not while something only a timed
    // wake-up would notice is pending: the background task's work, or user-level threads'
    // waits (their predicates may turn true without a frame).
    const bool deep = deep_naps && calm && !background_busy && blocked_count_.load(std::memory_order_acquire) == 0;
    bool rung = false;
    const std::uint64_t waits_before = waits_entered_.load(std::memory_order_relaxed);
    try {
      // The last look before a deep nap runs the background task too: work it is given after
      // this thread marked the nap is knocked for (background_added), before it is seen here.
      rung = transport_.bells().nap(deep ? cfg_.deep_nap_ns : nap, deep, [&] {
        const bool delivered = try_poll(k_batch, true);
        const bool background_work = deep && run_background();
        return delivered || background_work;
      });
    } catch (const error& e) {
      detail::defer_error(e);
    }
    const bool no_waits = waits_entered_.load(std::memory_order_relaxed) == waits_before;
    calm = !rung && no_waits && (deep || nap >= cfg_.sleep_max_ns);
    if (rung) {
      idle_since = now_ns();
      nap = cfg_.sleep_min_ns;
      park_nap = cfg_.sleep_max_ns;
      continue;
    }
    // Short naps (doubling from sleep_min) catch a follow-up frame soon: a contended lock's
    // requests, every few microseconds, are 10x slower served by rings alone (a futex wake-up of
    // a thread whose core computes takes ~35 us on our VMs). But an application that has not
    // entered mdsm during a whole nap computes, and where every peer rings for its requests the
    // short naps only take its core: apsp's ~10 wake-ups per 0.5 ms iteration made its
    // computation 25% slower. Then nap sleep_max at once.
    if (cfg_.bells_everywhere && no_waits)
      nap = cfg_.sleep_max_ns;
    else
      nap = std::min(nap * 2, cfg_.sleep_max_ns);
  }
}

}  // namespace mdsm::net
