// The progress engine and the ONE place where a thread waits for a remote event.
//
// Incoming frames are delivered by whichever thread holds the progress lock:
//   * the progress thread, while the application computes. Policy: after delivering something it
//     keeps polling for `spin` (default 20 us) -- only when it is pinned to a hardware thread no
//     application thread uses, or MDSM_PROGRESS_SPIN_US is set; then it sleeps, starting at
//     `sleep_min` and doubling up to `sleep_max` (defaults 2 us and 200 us) until something
//     arrives again. It is pinned with hwloc to a spare hardware thread where one exists.
//   * an application thread waiting inside mdsm (wait_until): it polls directly, so a blocked
//     wait is never slowed by the sleep policy; while any application thread waits, the
//     progress thread stands aside (parked) instead of competing for the lock and the core.
// Holding the lock is what makes handlers on one rank run one at a time.
//
// Parking. Where the progress thread shares a core with the application (no spare hardware
// thread), every wake-up of it costs the application thread on that core a context switch;
// measured on our 2-core VMs, a sibling thread waking every 200 us slows an MPI ping-pong by
// 10-35%, one waking every 50 us by up to 2x. So a parked thread wakes rarely: its nap starts at
// `sleep_max` and doubles, up to `park_max` (default 2 ms), each time it wakes to find an
// application thread still waiting (a communication phase: nothing for it to do). A wait that
// lasted `sleep_max` or longer wakes it on the way out (one futex call, small against such a
// wait), so it resumes at once after a barrier or lock wait; after a short wait it resumes
// within its current nap, or when a peer that has waited a while for its reply nudges it
// (doorbells::nudge: the parked thread sleeps on its doorbell word). It never wakes at all while
// paused (set_paused).
//
// Knobs (environment overrides the init options): MDSM_PROGRESS_THREAD (1/0),
// MDSM_PROGRESS_SPIN_US, MDSM_PROGRESS_SLEEP_MIN_US, MDSM_PROGRESS_SLEEP_MAX_US,
// MDSM_PROGRESS_PARK_MAX_US, MDSM_PROGRESS_PIN (1/0). See docs/RUNNING.md.
//
// Failure detector: a wait that lasts longer than `wait_deadline` (MDSM_WAIT_DEADLINE_S, init
// option, default 600 s; 0: none) ends the job with MPI_Abort after printing which rank waited,
// how long, and for what (common/wait_subject.hpp: the object, unit or collective, and the rank
// whose answer never came). A rank that stopped (SIGSTOP, a livelock, a host lost without its
// sockets closing) otherwise keeps every rank waiting forever; one merely slower than the
// deadline is never ended. Only yielding turns of a wait read the clock, so waits answered
// within the spin pay nothing for it.
//
// Flow control waits here too: an application thread whose send finds the destination's credit
// window full (net/flow.hpp) waits in wait_until, delivering this rank's frames meanwhile, which
// is what keeps two ranks flooding each other from deadlocking.
//
// Upcalls (user-level threads). With upcalls set (set_upcalls) and the calling OS thread running
// one of the scheduler's user-level threads (upcalls::current), a wait does not poll: it lists a
// wait_token with its predicate and calls `block`, in which the scheduler runs its other threads;
// whichever thread delivers frames (the progress thread, a thread polling in a wait) evaluates
// the listed predicates after delivering (check_blocked) and calls `wake` for each that holds,
// after which the scheduler resumes the waiter. A suspended wait is not an application waiter:
// the progress thread keeps serving while the OS thread computes on another user-level thread.
// The thread-local state of the wait (its subject for the failure detector, held deferred
// errors, activity, unthrottled scopes) belongs to the user-level thread: it is saved and cleared
// across `block` (switched_state). Waits that must not switch (no_switch_scope: a send waiting
// for credits with its frame half built in a thread-local buffer, mpi_ext's MPI waits) poll as
// without upcalls. docs/FIBERS.md.
#pragma once

#include "common/spin_mutex.hpp"
#include "common/wait_subject.hpp"
#include "net/context.hpp"
#include "net/transport.hpp"
#include "stats/clock.hpp"
#include "stats/counters.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace mdsm::net {

struct progress_config {
  bool thread = true;
  std::uint64_t spin_ns = 20'000;  // used only on a dedicated hardware thread, unless explicit
  bool spin_explicit = false;      // MDSM_PROGRESS_SPIN_US was set
  std::uint64_t sleep_min_ns = 2'000;
  std::uint64_t sleep_max_ns = 200'000;
  bool sleep_max_explicit = false;  // MDSM_PROGRESS_SLEEP_MAX_US was set
  // The longest nap when every rank can ring this one's doorbell (net/doorbells.hpp), unless
  // MDSM_PROGRESS_SLEEP_MAX_US says otherwise: a request then ends the nap at once, so the timed
  // wake-ups only cost the application its core (with_bells()).
  static constexpr std::uint64_t k_sleep_max_with_bells_ns = 2'000'000;
  std::uint64_t park_max_ns = 2'000'000;  // longest nap while an application thread waits
  // After a calm sleep_max nap (nothing came, no wait begun) the naps are deep, this long, when
  // every rank can knock (net/doorbells.hpp: then every frame sent here wakes the thread); 0:
  // no deep naps. Only with_bells() sets it (MDSM_PROGRESS_DEEP_NAP_US overrides).
  static constexpr std::uint64_t k_deep_nap_with_bells_ns = 20'000'000;
  std::uint64_t deep_nap_ns = 0;
  bool deep_nap_explicit = false;  // MDSM_PROGRESS_DEEP_NAP_US was set
  bool bells_everywhere = false;  // every peer rings for its requests (with_bells())
  bool pin = true;
  std::uint64_t wait_deadline_ns = 600'000'000'000;  // 0: waits have no deadline
  int local_rank = 0;
  int local_size = 1;
  // Reads the MDSM_PROGRESS_* variables over the defaults.
  static progress_config from_env(progress_config defaults);
  // The configuration for a rank whose every peer can ring its doorbell (all on this host).
  progress_config with_bells() const;
};

// One suspended wait (see the file comment); it lives in the waiting user-level thread's frame.
struct wait_token {
  bool (*done)(void*) = nullptr;
  void* done_ctx = nullptr;
  void* waiter = nullptr;  // upcalls::current's answer
  const detail::wait_subject* subject = nullptr;
  const struct upcalls* set = nullptr;  // the upcalls it was handed to
  wait_token* next = nullptr;
};

// The scheduler's side (mdsm::upcalls in the public header says what each must do).
// The public APIs (C++ set_upcalls, C mdsm_set_upcalls) fill it with trampolines into the
// user's set, whose copy `ctx` points to and `keep` owns.
struct upcalls {
  void* (*current)(void* ctx) = nullptr;
  void (*block)(wait_token* token, void* waiter, void* ctx) = nullptr;
  void (*wake)(wait_token* token, void* waiter, void* ctx) = nullptr;
  void* ctx = nullptr;
  std::shared_ptr<const void> keep;
};

// Depth of no_switch_scopes on this thread: while > 0 its waits poll instead of suspending.
extern thread_local constinit unsigned t_no_switch;
class no_switch_scope {
 public:
  no_switch_scope() noexcept { ++t_no_switch; }
  ~no_switch_scope() { --t_no_switch; }
  no_switch_scope(const no_switch_scope&) = delete;
  no_switch_scope& operator=(const no_switch_scope&) = delete;
};

// The thread-local state that belongs to the user-level thread running on an OS thread, not to
// the OS thread: take() saves and clears it before a switch, restore() puts it back after.
struct switched_state {
  const detail::wait_subject* subject;
  int deferred_hold;
  stats::activity activity;
  unsigned unthrottled;
  unsigned no_switch;
  static switched_state take() noexcept;
  void restore() const noexcept;
};

class progress {
 public:
  // The exit status of a job ended by the failure detector.
  static constexpr int k_deadline_exit_code = 75;
  progress(transport& t, progress_config cfg);
  ~progress();
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;

  void start_thread();
  void stop_thread();
  // Pauses (true) or resumes (false) the progress thread. Paused, it sleeps without waking until
  // resumed; frames are then delivered only while an application thread waits or polls.
  void set_paused(bool paused);
  const std::string& pinning() const noexcept { return pinning_; }

  // Blocks the calling thread until done() returns true, delivering incoming frames meanwhile.
  // done() is evaluated without any lock held. Throws MDSM_ERR_HANDLER_CONTEXT if called from a
  // handler (handlers must not block).
  template <class Done>
  void wait_until(Done&& done) {
    if (done()) return;
    if (upcalls_.load(std::memory_order_relaxed) != nullptr && t_no_switch == 0) [[unlikely]] {
      using D = std::remove_reference_t<Done>;
      if (wait_suspended([](void* d) { return static_cast<bool>((*static_cast<D*>(d))()); },
                         const_cast<void*>(static_cast<const void*>(&done))))
        return;
    }
    enter_wait();
    waiter_guard guard(*this);
    unsigned idle_turns = 0;
    while (!done()) {
      // One frame per turn: the condition is checked after every frame, so a waiter leaves as
      // soon as the frame it waits for has been handled.
      if (!poll_once(1)) idle(idle_turns, guard);
      else idle_turns = 0;
    }
  }

  // One turn of progress if the lock is free: delivers up to `max_frames` frames. Returns true
  // if a frame was delivered.
  static constexpr std::size_t k_batch = 16;
  bool poll_once(std::size_t max_frames = k_batch) { return try_poll(max_frames, false); }

  // Sets (or, with all members null, removes) the user-level scheduler's upcalls. Throws
  // MDSM_ERR_BUSY while a wait is suspended through the ones set.
  void set_upcalls(const upcalls& u);
  // upcalls::current's answer on the calling thread; nullptr without upcalls.
  void* current_user_thread() noexcept {
    const upcalls* u = upcalls_.load(std::memory_order_acquire);
    return u != nullptr ? u->current(u->ctx) : nullptr;
  }
  // Evaluates the suspended waits' predicates and wakes those that hold. Cheap when none is
  // suspended; a scheduler calls it (through poll) whenever it switches threads.
  void check_blocked() {
    if (blocked_count_.load(std::memory_order_acquire) != 0) [[unlikely]]
      check_blocked_slow();
  }
  // The subjects of the suspended waits, for the failure detector's report of a scheduler that
  // waits for them ("" when none).
  std::string describe_blocked();

  // True while the progress thread runs and is not paused: this rank's frames are delivered even
  // while all its application threads are blocked outside mdsm (inside an MPI call, say).
  bool serving() const noexcept {
    return running_.load(std::memory_order_acquire) && !paused_.load(std::memory_order_acquire);
  }

  // A task the progress thread runs on every turn of its loop (parked or not) once set: it
  // finishes work nobody waits for in mdsm (mpi_ext's requests completed by a plain MPI_Wait).
  // It must return at once when it has nothing to do, and returns true while work remains (the
  // thread then takes no deep nap: no frame may come to end it). Set once, before or while the
  // thread runs.
  void set_background(bool (*fn)(void*), void* ctx) {
    background_ctx_.store(ctx, std::memory_order_relaxed);
    background_.store(fn, std::memory_order_release);
  }
  // The background task has new work: ends a deep nap (after the work is visible to the task).
  void background_added();

 private:
  struct waiter_guard {
    explicit waiter_guard(progress& p) : p_(p), start_(stats::timing() ? stats::ticks() : 0) {}
    ~waiter_guard() { p_.leave_wait(*this); }
    progress& p_;
    std::uint64_t start_;          // for wait_ns; 0 when timing is off
    std::uint64_t idle_since_ = 0;  // first yielding turn
    bool long_ = false;  // idle for sleep_max or more: wake the parked progress thread on leaving
    unsigned turns_since_clock_ = 0;  // past long_, the clock is read every k_clock_turns turns
  };
  static std::uint64_t now_ns() noexcept;
  void enter_wait();
  // Inline: the way out of every wait, on the path of a message round trip.
  void leave_wait(const waiter_guard& w) {
    if (w.start_ != 0) [[unlikely]]
      add_wait_time(w);
    // A short wait leaves without a wake-up call (a futex wake per wait would cost more than a
    // small-message round trip); the parked thread notices within its nap. A long one wakes it:
    // the application is likely to compute now, and the call is small against the wait.
    // seq_cst here and in park(): either this thread sees parked_ or park() sees the decrement.
    if (app_waiters_.fetch_sub(1, std::memory_order_seq_cst) == 1 && w.long_) [[unlikely]]
      wake_parked();
  }
  void add_wait_time(const waiter_guard& w);
  // The wait through the upcalls; false if the calling thread is not the scheduler's.
  bool wait_suspended(bool (*done)(void*), void* ctx);
  void check_blocked_slow();
  // Runs the background task if one is set; true while it has work left.
  bool run_background();
  [[noreturn]] void deadline_passed(std::uint64_t waited_ticks);
  // The transport's window waiter: an application thread whose send found dest's credit window
  // full waits here, delivering frames (net/flow.hpp).
  static void wait_for_window(void* ctx, int dest);
  void wake_parked();  // if the progress thread is parked
  void idle(unsigned& turns, waiter_guard& w);
  void thread_main();
  void park(std::uint64_t& nap_ns);
  // poll_once; with unless_paused (the progress thread), delivers nothing once paused. Inline:
  // a waiting thread runs it on every turn of its wait loop.
  bool try_poll(std::size_t max_frames, bool unless_paused) {
    // Test before exchanging: a failed exchange would still take the cache line from the holder.
    // (seq_cst for set_paused's handshake; on x86 the exchange is the same instruction either way.)
    if (locked_.load(std::memory_order_relaxed) || locked_.exchange(true, std::memory_order_seq_cst)) return false;
    bool delivered;
    {
      struct release {
        std::atomic<bool>& flag;
        ~release() { flag.store(false, std::memory_order_release); }  // also when a handler throws
      } unlock{locked_};
      if (unless_paused && paused_.load(std::memory_order_seq_cst)) return false;  // see set_paused
      delivered = transport_.poll(max_frames) > 0;
    }
    // Suspended waits whose frames just came resume (outside the progress lock: predicates may
    // take the locks handlers take).
    if (delivered) check_blocked();
    return delivered;
  }
  // The progress thread has nothing to do: an application thread polls, or the program paused it.
  // seq_cst: pairs with leave_wait's decrement (see there).
  bool stand_aside() const noexcept {
    return app_waiters_.load(std::memory_order_seq_cst) > 0 || paused_.load(std::memory_order_acquire);
  }

  transport& transport_;
  progress_config cfg_;
  // The progress lock. Only ever tried, never waited for (a thread that does not get it has
  // nothing to do: the holder delivers for everyone), so a flag is enough: taking it is one
  // exchange and releasing it one store, where a mutex costs ~150 instructions a turn.
  // acquire/release ordering makes everything one holder's handlers did visible to the next.
  std::atomic<bool> locked_{false};
  std::atomic<int> app_waiters_{0};
  std::atomic<std::uint64_t> waits_entered_{0};  // waits ever begun: has the application been in mdsm?
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> running_{false};  // the progress thread was started and not stopped
  std::atomic<bool> parked_{false};  // the thread is in park(): it sleeps on its doorbell word
  std::uint64_t long_wait_ticks_;    // sleep_max in ticks
  std::uint64_t deadline_ticks_;     // wait_deadline in ticks; 0: none
  std::thread thread_;
  std::string pinning_ = "no progress thread";
  // The upcalls (read on every wait that does not end at once) and the suspended waits. Every set
  // ever given (and what its ctx points to) stays alive until the progress engine goes: a wait
  // may have loaded an older one. The one list of them.
  std::atomic<const upcalls*> upcalls_{nullptr};
  std::vector<std::unique_ptr<upcalls>> upcall_sets_;  // under blocked_mu_
  detail::spin_mutex blocked_mu_;
  wait_token* blocked_ = nullptr;  // under blocked_mu_
  std::atomic<std::size_t> blocked_count_{0};
  std::atomic<bool (*)(void*)> background_{nullptr};
  std::atomic<void*> background_ctx_{nullptr};
};

}  // namespace mdsm::net
