// Annotated active messages: the handler registry, annotated sends, and delivery with the
// handler contract enforced (see the contract in include/mdsm/mdsm.hpp, register_handler).
//
// Threads: send() from any thread. deliver() runs under the progress lock (one handler at a
// time per rank). The registry is append-only; ids are published with release ordering so a
// delivering thread never sees a half-built entry.
#pragma once

#include "coherence/engine.hpp"
#include "net/progress.hpp"
#include "net/transport.hpp"

#include <mdsm/mdsm.hpp>

#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

namespace mdsm {
namespace detail {

struct handler_entry {
  std::string name;
  std::uint32_t hash;
  handler_fn fn;
};

// What a handler's `message` refers to while the handler runs.
struct inbound {
  inbound(const net::inbound_frame& f, const handler_entry& e, annotation a) noexcept
      : fields{f.source, f.header.origin, a, f.header.handler, f.payload()}, frame(f), entry(e) {}
  message_fields fields;  // what the message's accessors read
  const net::inbound_frame& frame;
  const handler_entry& entry;
  // RELEASE kinds: the decoded consistency information, owned by the delivering frame; accept
  // and store move it out. nullptr for NONE and REQUEST.
  coherence::release_info* release = nullptr;
  bool disposed = false;

  annotation annot() const noexcept { return fields.annot; }
  static message make(inbound* in) noexcept { return message(&in->fields, in); }
};

// A stored message: the whole frame, so it can be forwarded unchanged.
struct stored {
  std::vector<std::byte> frame;
  int source;
  const handler_entry* entry;
  annotation annot;
  std::optional<coherence::release_info> release;
  bool disposed = false;
  net::frame_header header() const;
  std::span<const std::byte> payload() const;
};

}  // namespace detail

namespace messages {

bool needs_disposal(annotation a) noexcept;

class endpoint {
 public:
  endpoint(net::transport& t, net::progress& p, coherence::engine& e);
  ~endpoint();

  handler_id register_handler(std::string_view name, handler_fn fn);
  void send(int dest, handler_id h, std::span<const std::byte> payload, annotation a);

  // Disposal, for message and stored_message.
  void accept(detail::inbound& in);
  void forward(detail::inbound& in, int dest);
  std::unique_ptr<detail::stored> store(detail::inbound& in);
  void accept(detail::stored& s);
  void forward(detail::stored& s, int dest);
  void discard(detail::stored& s);
  // One acquire for several stored messages (see mdsm::accept_all).
  void accept_all(const std::vector<detail::stored*>& group);

  const detail::handler_entry* entry(handler_id h) const;
  net::transport& transport() noexcept { return transport_; }
  net::progress& progress() noexcept { return progress_; }
  coherence::engine& engine() noexcept { return engine_; }

 private:
  static void on_frame(void* ctx, const net::inbound_frame& f);
  [[gnu::noinline]] void deliver_annotated(const net::inbound_frame& f, const detail::handler_entry& e);
  // Runs the handler under the handler contract; reports a RELEASE it left undisposed.
  [[gnu::always_inline]] inline void run_handler(detail::inbound& in);
  void check_dest(int dest, const char* what) const;
  [[gnu::noinline]] void send_annotated(int dest, const net::frame_header& header, std::span<const std::byte> payload,
                                        annotation a);
  [[noreturn]] void reject_send(int dest, handler_id h, annotation a) const;  // a send that failed the checks

  net::transport& transport_;
  net::progress& progress_;
  coherence::engine& engine_;
  std::mutex register_mutex_;
  std::deque<detail::handler_entry> handlers_;  // stable addresses; append-only
  // handlers_[i] by id, for the lookup on every send and delivery (a deque index costs ~50
  // instructions). Entries below published_ are immutable.
  static constexpr std::size_t k_max_handlers = 4096;
  std::array<const detail::handler_entry*, k_max_handlers> table_{};
  std::atomic<std::size_t> published_{0};
};

}  // namespace messages
}  // namespace mdsm
