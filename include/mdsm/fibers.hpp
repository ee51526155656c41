// mdsm's fiber scheduler: user-level threads whose every mdsm wait (a fault on a remote page, a
// diff fetch, a lock grant, a semaphore, condition, barrier or queue, a predicate of wait_until)
// suspends only the fiber, while the other fibers of its OS thread run (built on the upcalls of
// mdsm.hpp). And remote spawn: a function shipped to another rank's fibers in an annotated message,
// with a result to wait for. docs/FIBERS.md has the design and the figures.
//
// Each OS thread that spawns gets its own scheduler; a fiber always runs on the thread that
// spawned it. Fibers run while that thread is inside the scheduler: in join(), run(), run_until()
// or yield() called outside a fiber, and between the switches of the fibers themselves
// (cooperative: a fiber runs until it waits in mdsm, yields, or ends). Join every fiber before
// finalize().
//
// What does not suspend a fiber (it blocks the OS thread with its fibers, as without fibers): a
// send waiting for flow-control credits, the annotated MPI calls of mdsm_mpi.h, and any blocking
// call outside mdsm (plain MPI, I/O).
//
// Mutexes and condition variables take any number of fibers of a rank at once (a mutex's holder
// is the fiber); a semaphore, barrier or work queue serves one waiting thread or fiber per rank
// at a time (a second one gets MDSM_ERR_BUSY).
#pragma once

#include <mdsm/mdsm.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mdsm::fibers {

namespace detail {
struct fiber_block;
struct remote_call;
}  // namespace detail

struct spawn_options {
  // The fiber's stack, with a guard page below it. 0: MDSM_FIBER_STACK_KB, default 512 KiB (a
  // fault inside a fiber runs mdsm's fault path on the fiber's stack: keep at least 64 KiB).
  std::size_t stack_bytes = 0;
};

// A fiber. The handle is a pointer to its control block, which lives in the non-coherent region:
// its address names the same fiber on every rank (send it in a message). Trivially copyable.
class fiber {
 public:
  constexpr fiber() noexcept = default;
  explicit operator bool() const noexcept { return b_ != nullptr; }
  const void* address() const noexcept { return b_; }
  // The handle whose address() is `a` (meaningful on the rank that spawned the fiber).
  static fiber from_address(const void* a) noexcept {
    return fiber(static_cast<detail::fiber_block*>(const_cast<void*>(a)));
  }
  friend bool operator==(const fiber&, const fiber&) = default;

 private:
  friend fiber spawn(std::function<void()>, const spawn_options&);
  friend void join(fiber);
  explicit fiber(detail::fiber_block* b) noexcept : b_(b) {}
  detail::fiber_block* b_ = nullptr;
};

// Starts `fn` on a new fiber of the calling thread; it first runs when the thread next enters the
// scheduler (from a fiber: at its next wait or yield). Throws MDSM_ERR_INVALID_ARGUMENT for an
// empty function, MDSM_ERR_HANDLER_CONTEXT from a handler, MDSM_ERR_OUT_OF_MEMORY.
fiber spawn(std::function<void()> fn, const spawn_options& opts = {});
// Lets the calling thread's other ready fibers run. Outside a fiber: runs each fiber ready now once.
void yield();
// Waits until `f` has ended, then frees it (the handle is invalid afterwards). Inside a fiber of
// the same thread only that fiber waits; outside one the thread runs its fibers meanwhile; on
// another thread it waits like wait_until(). Rethrows what `f` ended with: its own exception, or
// MDSM_ERR_TASK_FAILED if it ended holding an mdsm mutex (the mutex stays locked). Throws
// MDSM_ERR_INVALID_HANDLE for a null handle, MDSM_ERR_BUSY if another thread joins it already.
void join(fiber f);
// True on a fiber.
bool in_fiber() noexcept;
// The calling thread's fibers that have not ended (joined or not).
std::size_t live() noexcept;
// Runs the calling thread's fibers until none is left that has not ended. Outside a fiber only.
void run();
// Runs the calling thread's fibers (and, on a rank's first scheduling thread, the fibers remote
// spawns start) until `done()` holds; looked at between switches. Outside a fiber only.
void run_until(const std::function<bool()>& done);

// ---- remote spawn ----------------------------------------------------------------------------

using task_id = std::uint32_t;
// A task receives its arguments and returns its result, both as bytes.
using task_fn = std::function<std::vector<std::byte>(std::span<const std::byte> args)>;

// Registers a task that other ranks may spawn here. Collective, like register_handler (same
// names, same order on every rank; checked).
task_id register_task(std::string_view name, task_fn fn);

// The result of a remote spawn.
class remote_result {
 public:
  remote_result() noexcept = default;
  // True once the result has arrived.
  bool ready() const;
  // Waits for the result (a fiber only suspends; outside a fiber the thread runs its fibers and
  // incoming spawns meanwhile, so a task spawned on this rank runs) and returns it; for a spawn annotated other than
  // NONE the result comes in a RELEASE, whose acquire is complete on return: the caller sees every
  // write the task made. Throws MDSM_ERR_TASK_FAILED (with the task's message) if the task threw.
  // Once only (MDSM_ERR_INVALID_HANDLE afterwards, and for an empty result).
  std::vector<std::byte> get();
  template <class T>
  T get_as() {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::vector<std::byte> b = get();
    check_size(b.size(), sizeof(T));
    T v;
    std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }

 private:
  friend remote_result spawn_remote(int, task_id, std::span<const std::byte>, annotation);
  explicit remote_result(std::shared_ptr<detail::remote_call> c) noexcept : c_(std::move(c)) {}
  static void check_size(std::size_t got, std::size_t want);
  std::shared_ptr<detail::remote_call> c_;
};

// Runs task `task` with `args` on a new fiber of rank `rank` (itself included), started by that
// rank's first scheduling thread (it must enter its scheduler: run_until(), join(), ...). The
// spawn is a message annotated `a`: RELEASE (or RELEASE_NT) when the task reads the caller's
// shared data -- the task starts after the acquire; REQUEST or NONE when it does not. The result
// comes back in a RELEASE (NONE for a NONE spawn). Throws MDSM_ERR_INVALID_RANK,
// MDSM_ERR_UNKNOWN_HANDLER for a task never registered, MDSM_ERR_INVALID_ANNOTATION.
remote_result spawn_remote(int rank, task_id task, std::span<const std::byte> args, annotation a);

}  // namespace mdsm::fibers
