// mdsm's fiber scheduler (include/mdsm/fibers.hpp) on the upcalls of net::progress
// (remote spawn, on annotated messages: remote_spawn.cpp). docs/FIBERS.md.
//
// One scheduler per OS thread (thread-local), made at its first spawn. Context switches are
// Boost.Context's (fcontext: a few dozen instructions, no system call, the signal mask untouched).
// A fiber runs only on its scheduler's thread, so the ready queue a thread resumes from is its own;
// wakes come from any thread (the delivery context) and go through `woken_`, under a lock.
//
// Invariants: a fiber is in at most one of ready_, woken_, "suspended in a wait" (between block and
// wake), "waiting in join" (joiner of another) or running. The scheduler context (the thread's own
// stack) resumes fibers; a fiber switches only back to it.
#include "threads/fibers_internal.hpp"

#include "api/runtime.hpp"
#include "common/check.hpp"
#include "common/env.hpp"
#include "common/sanitizers.hpp"
#include "common/spin_mutex.hpp"
#include "common/wait_subject.hpp"
#include "net/progress.hpp"
#include "stats/clock.hpp"
#include "sync/services.hpp"

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <string>

#if MDSM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if MDSM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace ctx = boost::context;

namespace mdsm::fibers {

using internal::scheduler;

namespace {
// The default stack. Handlers may run on a fiber's stack (a fiber that polls, or a send that
// waits for credits, delivers frames), and so may mdsm's fault path; sanitizers' instrumented
// frames are several times larger (TSan overflowed 256 KiB in the test suite).
std::size_t default_stack_bytes() {
#if MDSM_ASAN || MDSM_TSAN
  constexpr std::uint64_t k_default_kb = 2048;
#else
  constexpr std::uint64_t k_default_kb = 512;
#endif
  static const std::size_t b = [] {
    const std::uint64_t kb = mdsm::detail::env_uint("MDSM_FIBER_STACK_KB", k_default_kb);
    if (kb < 16 || kb > 1024 * 1024)
      mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_FIBER_STACK_KB=", kb, " is outside [16, 1048576]");
    return static_cast<std::size_t>(kb) * 1024;
  }();
  return b;
}
}  // namespace

namespace detail {
// A fiber's control block, in the non-coherent region (placement-new'd into nc_alloc'ed memory).
struct fiber_block {
  scheduler* sched = nullptr;
  ctx::fiber context;  // the fiber's continuation while it is not running
  std::function<void()> fn;
  std::atomic<bool> ended{false};   // release: everything the fiber did happens before a join sees it
  bool detached = false;            // freed by the scheduler when it ends (remote spawns)
  fiber_block* joiner = nullptr;    // a fiber of the same scheduler waiting in join
  std::atomic<bool> joined{false};  // someone joins it (one only)
  std::exception_ptr error;
#if MDSM_ASAN
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
#endif
#if MDSM_TSAN
  void* tsan_fiber = nullptr;
#endif
};
}  // namespace detail

using detail::fiber_block;

class internal::scheduler {
 public:
  scheduler() {
    internal::scheduler_made(this);
#if MDSM_TSAN
    main_tsan_ = __tsan_get_current_fiber();
#endif
  }
  ~scheduler() {
    internal::scheduler_gone(this);
    if (live_ != 0)
      std::fprintf(stderr, "mdsm: a thread ended with %zu fiber(s) that had not ended; their stacks are leaked\n",
                   live_);
    for (auto& [size, sc] : stacks_) ctx::protected_fixedsize_stack(size).deallocate(sc);
  }

  fiber_block* running() const noexcept { return running_; }
  std::size_t live() const noexcept { return live_; }

  fiber_block* spawn(std::function<void()> fn, std::size_t stack_bytes, bool detached) {
    void* mem = nc_alloc(sizeof(fiber_block));
    auto* f = new (mem) fiber_block;
    f->sched = this;
    f->fn = std::move(fn);
    f->detached = detached;
#if MDSM_TSAN
    // TSan keeps a shadow stack of instrumented frames per TSan fiber; every frame must enter and
    // leave under the state of the context it runs on, or a shadow stack drifts until it over- or
    // underflows (it did: a crash at exit after the fiber tests). Making a Boost fiber jumps onto
    // its stack and back, leaving the trampoline's frame open until the fiber ends: make it
    // under the fiber's own state.
    void* const spawner_tsan = __tsan_get_current_fiber();
    f->tsan_fiber = __tsan_create_fiber(0);
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
    try {
      f->context = ctx::fiber(std::allocator_arg, stack_source{this, f, stack_bytes},
                              [f](ctx::fiber&& from) { return f->sched->body(f, std::move(from)); });
    } catch (...) {
#if MDSM_TSAN
      __tsan_switch_to_fiber(spawner_tsan, 0);
      __tsan_destroy_fiber(f->tsan_fiber);
#endif
      f->~fiber_block();
      nc_free(mem);
      throw;
    }
#if MDSM_TSAN
    __tsan_switch_to_fiber(spawner_tsan, 0);
#endif
    ++live_;
    ready_.push_back(f);
    return f;
  }

  // ---- from a fiber ----
  // Switches to the scheduler context; returns when this fiber is resumed.
  void suspend() {
    const net::switched_state mine = net::switched_state::take();
    to_scheduler();
    mine.restore();
  }
  void yield_fiber() {
    ready_.push_back(running_);
    suspend();
  }
  void join_from_fiber(fiber_block* f) {
    if (!f->ended.load(std::memory_order_acquire)) {
      f->joiner = running_;
      suspend();  // finish() makes it ready
    }
  }

  // ---- wakes (any thread) ----
  void wake(fiber_block* f) {
    std::lock_guard lk(woken_mu_);
    woken_.push_back(f);
    woken_count_.fetch_add(1, std::memory_order_release);
  }

  // ---- from the scheduler context ----
  bool has_work() const noexcept {
    return !ready_.empty() || woken_count_.load(std::memory_order_acquire) != 0 || internal::incoming_waiting(this);
  }
  // Runs fibers until done() holds.
  template <class Done>
  void run_until(Done&& done) {
    mdsm::detail::wait_subject subject{.what = "the fibers of this thread, all waiting inside mdsm",
                                       .detail = &describe_blocked};
    while (!done()) {
      if (fiber_block* f = next()) {
        resume(f);
        continue;
      }
      if (done()) return;
      // Nothing to run: wait (polling, as any wait outside a fiber) until a wake or a spawn.
      mdsm::detail::waiting_for waiting(subject);
      mdsm::wait_until([&] { return has_work() || done(); });
    }
  }
  // Runs each fiber ready now once.
  void run_round() {
    poll();
    take_woken();
    internal::start_incoming(*this);
    for (std::size_t n = ready_.size(); n > 0 && !ready_.empty(); --n) {
      fiber_block* f = ready_.front();
      ready_.pop_front();
      resume(f);
    }
  }
  void forget(fiber_block* f) {
    f->~fiber_block();
    nc_free(f);
  }

 private:
  // Stacks with a guard page below them (Boost's protected_fixedsize_stack: the stack's size plus
  // one page), kept for reuse by a later fiber asking for the same size (a remote spawn is a
  // fiber each).
  struct stack_source {
    scheduler* s;
    fiber_block* f;
    std::size_t size;
    ctx::stack_context allocate() {
      ctx::stack_context sc{};
      auto it = std::find_if(s->stacks_.begin(), s->stacks_.end(), [&](const auto& c) { return c.first == size; });
      if (it != s->stacks_.end()) {
        sc = it->second;
        s->stacks_.erase(it);
      } else {
        sc = ctx::protected_fixedsize_stack(size).allocate();
      }
#if MDSM_ASAN
      f->stack_bottom = static_cast<const char*>(sc.sp) - sc.size;
      f->stack_size = sc.size;
#endif
      (void)f;
      return sc;
    }
    void deallocate(ctx::stack_context& sc) noexcept {
      if (s->stacks_.size() < k_stacks_kept)
        s->stacks_.emplace_back(size, sc);
      else
        ctx::protected_fixedsize_stack(size).deallocate(sc);
    }
  };
  static constexpr std::size_t k_stacks_kept = 64;
  static constexpr double k_poll_every_ns = 10'000;  // between switches with fibers ready

  static std::string describe_blocked(const void*) {
    mdsm::detail::runtime& r = mdsm::detail::rt();
    const std::string b = r.progress->describe_blocked();
    return b.empty() ? "(no fiber waits inside mdsm: they wait in join or for spawns)" : "they wait for " + b;
  }

  fiber_block* next() {
    // Deliver frames (which wakes finished waits) before picking, unless fibers are ready and
    // this thread polled moments ago: a poll costs ~1 us here (MPI's progress), and fibers that
    // yield every few tens of microseconds (a search tick) would pay it on every switch.
    const std::uint64_t now = stats::ticks();
    if (ready_.empty() || now - polled_at_ >= poll_every_) {
      polled_at_ = now;
      poll();
    }
    take_woken();
    internal::start_incoming(*this);
    if (ready_.empty()) return nullptr;
    fiber_block* f = ready_.front();
    ready_.pop_front();
    return f;
  }
  void take_woken() {
    if (woken_count_.load(std::memory_order_acquire) == 0) return;
    std::lock_guard lk(woken_mu_);
    for (fiber_block* f : woken_) ready_.push_back(f);
    woken_count_.fetch_sub(woken_.size(), std::memory_order_release);
    woken_.clear();
  }
  void resume(fiber_block* f) {
    const net::switched_state outside = net::switched_state::take();
    running_ = f;
#if MDSM_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack_bottom, f->stack_size);
#endif
#if MDSM_TSAN
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
    f->context = std::move(f->context).resume();
#if MDSM_TSAN
    // An ended fiber came back through Boost's exit path, still under its own TSan state (see
    // body()); every frame it entered has exited by now.
    if (f->ended.load(std::memory_order_relaxed)) __tsan_switch_to_fiber(main_tsan_, 0);
#endif
#if MDSM_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    running_ = nullptr;
    outside.restore();
    if (f->ended.load(std::memory_order_relaxed)) finish(f);
  }
  // On a fiber: back to the scheduler context.
  void to_scheduler() {
#if MDSM_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, main_bottom_, main_size_);
#endif
#if MDSM_TSAN
    __tsan_switch_to_fiber(main_tsan_, 0);
#endif
    main_ = std::move(main_).resume();
#if MDSM_ASAN
    __sanitizer_finish_switch_fiber(fake, &main_bottom_, &main_size_);
#endif
  }
  ctx::fiber body(fiber_block* f, ctx::fiber&& from) {
    main_ = std::move(from);
#if MDSM_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &main_bottom_, &main_size_);
#endif
    try {
      f->fn();
    } catch (const ctx::detail::forced_unwind&) {
      throw;
    } catch (...) {
      f->error = std::current_exception();
    }
    f->fn = nullptr;  // what it captured goes now, on this thread
    if (const std::size_t held = sync::mutexes_held_by(f); held != 0 && !f->error)
      f->error = std::make_exception_ptr(error(
          MDSM_ERR_TASK_FAILED, "mdsm: a fiber ended holding " + std::to_string(held) +
                                    " mdsm mutex(es); they stay locked (unlock every mutex a fiber locks before it "
                                    "returns)"));
    f->ended.store(true, std::memory_order_release);
#if MDSM_ASAN
    __sanitizer_start_switch_fiber(nullptr, main_bottom_, main_size_);
#endif
    // No TSan switch here: body(), its caller frames in Boost and Boost's exit path (which frees
    // the stack on the scheduler's stack) entered under this fiber's TSan state and must leave
    // under it; resume() switches once the fiber is back. Switching here made each ended fiber pop
    // those frames off the scheduler's TSan shadow stack, which underflowed (a crash at exit).
    return std::move(main_);
  }
  void finish(fiber_block* f) {
    --live_;
#if MDSM_TSAN
    __tsan_destroy_fiber(f->tsan_fiber);
    f->tsan_fiber = nullptr;
#endif
    if (f->joiner != nullptr) ready_.push_back(std::exchange(f->joiner, nullptr));
    if (f->detached) {
      if (f->error) {
        try {
          std::rethrow_exception(f->error);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "mdsm: a detached fiber ended with an exception: %s\n", e.what());
        } catch (...) {
          std::fprintf(stderr, "mdsm: a detached fiber ended with an exception\n");
        }
      }
      forget(f);
    }
  }

  std::deque<fiber_block*> ready_;
  std::uint64_t polled_at_ = 0;  // ticks
  const std::uint64_t poll_every_ = static_cast<std::uint64_t>(k_poll_every_ns / stats::ns_per_tick());
  mdsm::detail::spin_mutex woken_mu_;
  std::vector<fiber_block*> woken_;
  std::atomic<std::size_t> woken_count_{0};
  fiber_block* running_ = nullptr;
  ctx::fiber main_;  // the scheduler context, while a fiber runs
  std::size_t live_ = 0;
  std::vector<std::pair<std::size_t, ctx::stack_context>> stacks_;  // (size asked for, stack)
#if MDSM_ASAN
  const void* main_bottom_ = nullptr;
  std::size_t main_size_ = 0;
#endif
#if MDSM_TSAN
  void* main_tsan_ = nullptr;
#endif
};

namespace {

thread_local std::unique_ptr<scheduler> t_sched;
std::uint64_t g_upcalls_session = 0;  // the runtime session the upcalls were set in
std::mutex g_upcalls_mu;

void* current_fiber(void*) { return t_sched ? t_sched->running() : nullptr; }
void block_fiber(net::wait_token*, void* waiter, void*) { static_cast<fiber_block*>(waiter)->sched->suspend(); }
void wake_fiber(net::wait_token*, void* waiter, void*) {
  auto* f = static_cast<fiber_block*>(waiter);
  f->sched->wake(f);
}

thread_local std::uint64_t t_session = 0;  // the runtime session t_sched was last checked in

void outside_fiber(const char* what) {
  if (t_sched && t_sched->running() != nullptr)
    mdsm::detail::fail(MDSM_ERR_BUSY, what, " runs the scheduler and cannot be called from a fiber");
}

}  // namespace

scheduler& internal::this_scheduler(const char* what) {
  mdsm::detail::runtime& r = mdsm::detail::rt();
  if (const char* h = net::current_handler())
    mdsm::detail::fail(MDSM_ERR_HANDLER_CONTEXT, what, " was called from message handler '", h,
                       "'; fibers belong to application threads");
  if (t_sched && t_session == r.session) [[likely]]
    return *t_sched;  // every yield comes here
  {
    std::lock_guard lk(g_upcalls_mu);
    if (g_upcalls_session != r.session) {
      mdsm::detail::set_upcalls_from("fibers", net::upcalls{&current_fiber, &block_fiber, &wake_fiber, nullptr, {}});
      g_upcalls_session = r.session;
    }
  }
  check_session(r);
  if (!t_sched) t_sched = std::make_unique<scheduler>();
  t_session = r.session;
  return *t_sched;
}

void internal::spawn_detached(scheduler& s, std::function<void()> fn) {
  s.spawn(std::move(fn), default_stack_bytes(), true);
}

void internal::run_until(scheduler& s, const std::function<bool()>& done) { s.run_until([&] { return done(); }); }

// ---- fibers ------------------------------------------------------------------------------------

fiber spawn(std::function<void()> fn, const spawn_options& opts) {
  if (!fn) mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "fibers::spawn: empty function");
  scheduler& s = internal::this_scheduler("fibers::spawn");
  const std::size_t stack = opts.stack_bytes != 0 ? opts.stack_bytes : default_stack_bytes();
  if (stack < 16 * 1024)
    mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "fibers::spawn: a stack of ", stack,
                       " bytes is too small (at least 16 KiB; mdsm's fault path runs on it)");
  return fiber(s.spawn(std::move(fn), (stack + 4095) / 4096 * 4096, false));
}

void yield() {
  scheduler& s = internal::this_scheduler("fibers::yield");
  if (s.running() != nullptr)
    s.yield_fiber();
  else
    s.run_round();
}

void join(fiber f) {
  if (!f) mdsm::detail::fail(MDSM_ERR_INVALID_HANDLE, "fibers::join: a null fiber");
  fiber_block* b = f.b_;
  scheduler& s = internal::this_scheduler("fibers::join");
  if (b == s.running()) mdsm::detail::fail(MDSM_ERR_BUSY, "fibers::join: a fiber cannot join itself");
  if (b->joined.exchange(true, std::memory_order_acq_rel))
    mdsm::detail::fail(MDSM_ERR_BUSY, "fibers::join: the fiber is joined already (or by another thread)");
  if (b->sched == &s) {
    if (s.running() != nullptr)
      s.join_from_fiber(b);
    else
      s.run_until([b] { return b->ended.load(std::memory_order_acquire); });
  } else {
    mdsm::wait_until([b] { return b->ended.load(std::memory_order_acquire); });
  }
  std::exception_ptr e = b->error;
  b->sched->forget(b);
  if (e) std::rethrow_exception(e);
}

bool in_fiber() noexcept { return t_sched && t_sched->running() != nullptr; }

std::size_t live() noexcept { return t_sched ? t_sched->live() : 0; }

void run() {
  outside_fiber("fibers::run");
  scheduler& s = internal::this_scheduler("fibers::run");
  s.run_until([&s] { return s.live() == 0; });
}

void run_until(const std::function<bool()>& done) {
  if (!done) mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "fibers::run_until: empty predicate");
  outside_fiber("fibers::run_until");
  internal::this_scheduler("fibers::run_until").run_until([&] { return done(); });
}

}  // namespace mdsm::fibers
