// The context a thread runs in, as far as sending is concerned: inside a message handler, or in
// a scope whose sends must not wait. Both decide what a send does when the destination's credit
// window is full (net/flow.hpp): a thread in either never waits there.
//
// Initial-exec TLS (lib/meson.build), read and written inline: it is read on every send and set
// around every handler.
#pragma once

#include "common/deferred.hpp"

namespace mdsm::net {

// Name of the message handler running on this thread, or nullptr outside handler context.
extern thread_local constinit const char* t_current_handler;
inline const char* current_handler() noexcept { return t_current_handler; }

// Marks the calling thread as running a handler for its lifetime (lib/messages, lib/coherence).
// A handler holds deferred errors: one recorded earlier is the application's to receive, and
// thrown out of a send or accept in the middle of a handler it would leave the protocol state
// the handler was changing half-done.
class handler_scope {
 public:
  explicit handler_scope(const char* name) noexcept : previous_(t_current_handler) { t_current_handler = name; }
  ~handler_scope() { t_current_handler = previous_; }
  handler_scope(const handler_scope&) = delete;
  handler_scope& operator=(const handler_scope&) = delete;

 private:
  const char* previous_;
  detail::hold_deferred hold_;
};

// Depth of unthrottled scopes on this thread: while > 0 its sends never wait for credits.
extern thread_local constinit unsigned t_unthrottled;

// Sends made by this thread while one lives never wait for credits; they may overrun the window
// like a handler's (net/flow.hpp). For messages sent while holding a lock that this rank's
// handlers take (a wait would deliver frames and run such a handler on this thread), and for
// protocol requests whose number is bounded by their waiting senders. Nests.
class unthrottled_scope {
 public:
  unthrottled_scope() noexcept { ++t_unthrottled; }
  ~unthrottled_scope() { --t_unthrottled; }
  unthrottled_scope(const unthrottled_scope&) = delete;
  unthrottled_scope& operator=(const unthrottled_scope&) = delete;
};

// True if a send from this thread may wait for credits (application thread, no scope).
inline bool sends_may_wait() noexcept { return (t_current_handler == nullptr) & (t_unthrottled == 0); }

}  // namespace mdsm::net
