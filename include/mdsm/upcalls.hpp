// mdsm: user-level thread upcalls, the seam between mdsm's waits and a user-level scheduler
// (mdsm ships one: <mdsm/fibers.hpp>; docs/FIBERS.md). Included by <mdsm/mdsm.hpp>.
#pragma once

namespace mdsm {

// A user-level scheduler (fibers, coroutines with stacks) lets mdsm hand it the waits of its
// threads: instead of polling until a page or diff arrives, a lock is granted, a barrier opens,
// a queue yields, a predicate of wait_until() holds, the waiting thread is suspended and the
// scheduler runs another one; when the awaited event has happened, mdsm tells the scheduler to
// resume it. mdsm ships such a scheduler (mdsm/fibers.hpp); this is the seam for others.
//
//   current(ctx)               the user-level thread running on the calling OS thread, or nullptr
//                              if none of the scheduler's runs there (mdsm then waits on the OS
//                              thread as without upcalls). Called at the start of every wait that
//                              does not end at once; must be cheap.
//   block(token, waiter, ctx)  called on the waiting thread (`waiter` is current()'s answer) with
//                              a token naming this wait. Must return only after wake(token) was
//                              called, having run other threads meanwhile. wake may come before
//                              block is called, or while it is switching away, on this or another
//                              OS thread: the scheduler remembers it. block runs outside any
//                              handler with no mdsm lock held; it may run inside the SIGSEGV
//                              handler of a fault (a fault on a user-level thread's stack waits for
//                              its page here; docs/FIBERS.md explains why switching there is safe).
//   wake(token, waiter, ctx)   the wait of `waiter` is over; called exactly once per block, on the
//                              thread that delivered the event (mdsm's progress thread, or a thread
//                              polling in a wait of its own). Must not block or call mdsm; the
//                              token is not used after it returns.
//
// Someone must deliver messages while threads are suspended: mdsm's progress thread does; the
// scheduler should also call poll() when it switches and wait with wait_until() (outside its
// user-level threads) when it has nothing to run. The state mdsm keeps per thread for a wait is
// saved and restored across block; sends waiting for flow-control credits and mdsm's annotated
// MPI calls (mdsm_mpi.h) do not suspend (they block the OS thread).
struct wait_token;
struct upcalls {
  void* (*current)(void* ctx) = nullptr;
  void (*block)(wait_token* token, void* waiter, void* ctx) = nullptr;
  void (*wake)(wait_token* token, void* waiter, void* ctx) = nullptr;
  void* ctx = nullptr;
};
// Sets this rank's upcalls (all three functions, or none to remove them). Throws
// MDSM_ERR_INVALID_ARGUMENT for a partial set, MDSM_ERR_BUSY while a wait is suspended.
void set_upcalls(const upcalls& u);
namespace detail {
// The user-level thread running on the calling OS thread (upcalls::current), or nullptr.
void* current_user_thread() noexcept;
}  // namespace detail

}  // namespace mdsm
