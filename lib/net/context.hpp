// The context a thread runs in: inside a message handler or not. What a thread may do depends
// on it (a handler must not wait).
//
// Initial-exec TLS (lib/meson.build), read and written inline: it is set around every handler.
#pragma once

namespace mdsm::net {

// Name of the message handler running on this thread, or nullptr outside handler context.
extern thread_local constinit const char* t_current_handler;
inline const char* current_handler() noexcept { return t_current_handler; }

// Marks the calling thread as running a handler for its lifetime (lib/messages, lib/coherence).
class handler_scope {
 public:
  explicit handler_scope(const char* name) noexcept : previous_(t_current_handler) { t_current_handler = name; }
  ~handler_scope() { t_current_handler = previous_; }
  handler_scope(const handler_scope&) = delete;
  handler_scope& operator=(const handler_scope&) = delete;

 private:
  const char* previous_;
};

}  // namespace mdsm::net
