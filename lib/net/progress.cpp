#include "net/progress.hpp"

#include "common/check.hpp"
#include "common/deferred.hpp"
#include "common/env.hpp"
#include "os/futex.hpp"
#include "os/topology.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <sched.h>
#include <sys/prctl.h>

namespace mdsm::net {

namespace {

// Idle turns of a wait loop spent spinning before each further turn yields the core.
constexpr unsigned k_spin_turns = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

thread_local constinit const char* t_current_handler = nullptr;

progress_config progress_config::from_env(progress_config d) {
  d.thread = detail::env_uint("MDSM_PROGRESS_THREAD", d.thread ? 1 : 0) != 0;
  d.spin_explicit = detail::env_string("MDSM_PROGRESS_SPIN_US").has_value();
  d.spin_ns = detail::env_uint("MDSM_PROGRESS_SPIN_US", d.spin_ns / 1000) * 1000;
  d.sleep_min_ns = detail::env_uint("MDSM_PROGRESS_SLEEP_MIN_US", d.sleep_min_ns / 1000) * 1000;
  d.sleep_max_explicit = detail::env_string("MDSM_PROGRESS_SLEEP_MAX_US").has_value();
  d.sleep_max_ns = detail::env_uint("MDSM_PROGRESS_SLEEP_MAX_US", d.sleep_max_ns / 1000) * 1000;
  d.park_max_ns = detail::env_uint("MDSM_PROGRESS_PARK_MAX_US", d.park_max_ns / 1000) * 1000;
  d.pin = detail::env_uint("MDSM_PROGRESS_PIN", d.pin ? 1 : 0) != 0;
  if (d.sleep_min_ns == 0) d.sleep_min_ns = 1000;
  if (d.sleep_max_ns < d.sleep_min_ns) d.sleep_max_ns = d.sleep_min_ns;
  if (d.park_max_ns < d.sleep_max_ns) d.park_max_ns = d.sleep_max_ns;
  return d;
}

progress_config progress_config::with_bells() const {
  progress_config c = *this;
  if (!c.sleep_max_explicit) c.sleep_max_ns = std::max(c.sleep_max_ns, k_sleep_max_with_bells_ns);
  c.park_max_ns = std::max(c.park_max_ns, c.sleep_max_ns);
  return c;
}

progress::progress(transport& t, progress_config cfg)
    : transport_(t),
      cfg_(cfg),
      long_wait_ticks_(static_cast<std::uint64_t>(static_cast<double>(cfg.sleep_max_ns) / stats::ns_per_tick())) {}

progress::~progress() { stop_thread(); }

std::uint64_t progress::now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void progress::start_thread() {
  if (!cfg_.thread || thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { thread_main(); });
}

void progress::stop_thread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(park_mutex_);
    stop_.store(true);
  }
  park_cv_.notify_all();
  thread_.join();
}

void progress::set_paused(bool paused) {
  {
    std::lock_guard lk(park_mutex_);
    paused_.store(paused, std::memory_order_seq_cst);
  }
  park_cv_.notify_all();
  // Pausing takes effect before this returns: the thread may have looked at paused_ just before
  // the store and be about to poll. It re-checks paused_ once it holds the progress lock
  // (try_poll), so after the lock has been seen free once, it delivers nothing more.
  if (paused)
    while (locked_.load(std::memory_order_seq_cst)) cpu_relax();
}

void progress::enter_wait() {
  if (const char* h = current_handler())
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, "message handler '", h,
                 "' tried to block (wait for a remote event); handlers must return at once: store the message "
                 "and finish the work from the application thread");
  app_waiters_.fetch_add(1, std::memory_order_acq_rel);
  stats::add(stats::counter::waits);
  if (hooks_.block) hooks_.block(hooks_.ctx);
}

void progress::add_wait_time(const waiter_guard& w) {
  const std::uint64_t t = stats::ticks() - w.start_;
  stats::storage::block& b = stats::local();
  stats::add(b, stats::counter::wait_ns, t);
  if (stats::t_activity == stats::activity::none) stats::add(b, stats::counter::sync_wait_ns, t);
}

void progress::wake_parked() {
  if (!parked_.load(std::memory_order_seq_cst)) return;
  { std::lock_guard lk(park_mutex_); }  // the thread is in wait_for, or will see app_waiters_ == 0
  park_cv_.notify_all();
}

void progress::idle(unsigned& turns, waiter_guard& w) {
  if (hooks_.idle) {
    hooks_.idle(hooks_.ctx);
  } else if (++turns >= k_spin_turns) {
    // No pause between turns: a turn already spends ~100 ns inside MPI, and a pause would only
    // delay noticing the frame a waiter waits for. Past the spin, yield: oversubscribed ranks
    // need the core more than this spin does.
    sched_yield();
  } else {
    return;
  }
  // Only yielding turns read the clock, so a wait answered within the spin pays nothing for this.
  if (w.long_) return;
  const std::uint64_t now = stats::ticks();
  if (w.idle_since_ == 0) w.idle_since_ = now;
  else if (now - w.idle_since_ >= long_wait_ticks_) w.long_ = true;
}

void progress::park(std::uint64_t& nap_ns) {
  std::unique_lock lk(park_mutex_);
  parked_.store(true, std::memory_order_seq_cst);
  while (!stop_.load(std::memory_order_acquire) && stand_aside()) {
    if (paused_.load(std::memory_order_acquire)) {
      park_cv_.wait(lk);
      continue;
    }
    // Woken by the timeout with an application thread still waiting: a communication phase, in
    // which every wake-up only costs the application its core. Nap longer next time.
    if (!park_cv_.wait_for(lk, std::chrono::nanoseconds(nap_ns), [&] { return stop_.load() || !stand_aside(); }))
      nap_ns = std::min(nap_ns * 2, cfg_.park_max_ns);
  }
  parked_.store(false, std::memory_order_relaxed);
}

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
  while (!stop_.load(std::memory_order_acquire)) {
    if (stand_aside()) {
      // An application thread is polling for itself (or the program paused us).
      park(park_nap);
      idle_since = now_ns();
      nap = cfg_.sleep_min_ns;
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
      continue;
    }
    if (now_ns() - idle_since < spin_ns) {
      cpu_relax();
      continue;
    }
    // Sleep on this rank's doorbell: a rank of this host that sends us a request rings it, so
    // the nap ends at once when there is work and lasts otherwise (net/doorbells.hpp).
    bool rung = false;
    try {
      rung = transport_.bells().nap(nap, [&] { return try_poll(k_batch, true); });
    } catch (const error& e) {
      detail::defer_error(e);
    }
    if (rung) {
      idle_since = now_ns();
      nap = cfg_.sleep_min_ns;
      park_nap = cfg_.sleep_max_ns;
      continue;
    }
    nap = std::min(nap * 2, cfg_.sleep_max_ns);
  }
}

}  // namespace mdsm::net
