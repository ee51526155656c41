// The parts of lib/threads shared by the fiber scheduler (fibers.cpp) and remote spawn
// (remote_spawn.cpp). Internal.
#pragma once

#include <mdsm/fibers.hpp>

#include "api/runtime.hpp"

#include <functional>

namespace mdsm::fibers::internal {

class scheduler;

// fibers.cpp
// The calling thread's scheduler, made on its first use in a session (which also sets this
// rank's upcalls and starts the session of the remote-spawn registry). Refuses handlers, naming
// `what`.
scheduler& this_scheduler(const char* what);
// Starts `fn` on a fiber of `s` that frees itself when it ends (default stack size).
void spawn_detached(scheduler& s, std::function<void()> fn);
// Runs the fibers of `s` (the calling thread's, outside a fiber) until done() holds.
void run_until(scheduler& s, const std::function<bool()>& done);

// remote_spawn.cpp
// The home scheduler runs this rank's incoming remote spawns: the first scheduler made, until it
// goes (then the next one made).
void scheduler_made(scheduler* s);
void scheduler_gone(scheduler* s) noexcept;
// Whether remote spawns wait for `s` (cheap; looked at on every switch).
bool incoming_waiting(const scheduler* s) noexcept;
// Starts them, as detached fibers of `s`, if `s` is the home scheduler.
void start_incoming(scheduler& s);
// The registry belongs to one runtime session: starts it afresh in a new one.
void check_session(mdsm::detail::runtime& r);

}  // namespace mdsm::fibers::internal
