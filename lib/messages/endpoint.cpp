#include "messages/endpoint.hpp"
#include "messages/current.hpp"

#include "common/deferred.hpp"
#include "common/wait_subject.hpp"
#include "stats/counters.hpp"

namespace mdsm {

namespace detail {

net::frame_header stored::header() const {
  net::frame_header h;
  std::memcpy(&h, frame.data(), sizeof h);
  return h;
}

std::span<const std::byte> stored::payload() const {
  const net::frame_header h = header();
  return std::span<const std::byte>(frame).subspan(sizeof h, h.payload_len);
}

}  // namespace detail

namespace messages {

namespace {

std::uint32_t name_hash(std::string_view name) {
  std::uint32_t h = 2166136261u;  // FNV-1a
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

constexpr unsigned k_annotations = 4;

void count_received(annotation a) {
  stats::add(stats::by_annotation(stats::counter::msgs_received_none, static_cast<unsigned>(a)));
}

}  // namespace

bool needs_disposal(annotation a) noexcept { return a == annotation::release || a == annotation::release_nt; }

endpoint::endpoint(net::transport& t, net::progress& p, coherence::engine& e)
    : transport_(t), progress_(p), engine_(e) {
  t.set_handler(net::channel::messages, &endpoint::on_frame, this);
}

endpoint::~endpoint() { transport_.set_handler(net::channel::messages, nullptr, nullptr); }

const detail::handler_entry* endpoint::entry(handler_id h) const {
  if (h >= published_.load(std::memory_order_acquire)) return nullptr;
  return table_[h];
}

void endpoint::check_dest(int dest, const char* what) const {
  if (dest < 0 || dest >= transport_.size())
    detail::fail(MDSM_ERR_INVALID_RANK, what, ": rank ", dest, " is out of range (the job has ", transport_.size(),
                 " ranks)");
}

handler_id endpoint::register_handler(std::string_view name, handler_fn fn) {
  if (name.empty()) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "register_handler: the name must not be empty");
  if (!fn) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "register_handler('", name, "'): the handler function is empty");
  std::lock_guard lk(register_mutex_);
  const auto id = static_cast<handler_id>(handlers_.size());
  if (id >= k_max_handlers)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "register_handler('", name, "'): at most ", k_max_handlers,
                 " handlers can be registered; dispatch several message kinds from one handler");
  const std::uint32_t hash = name_hash(name);
  handlers_.push_back(detail::handler_entry{std::string(name), hash, std::move(fn)});
  table_[id] = &handlers_.back();
  // Publish before agreeing: once the agreement completes on any rank, every rank has published
  // the handler, so a message sent afterwards finds it.
  published_.store(handlers_.size(), std::memory_order_release);
  std::uint32_t mine[2] = {id, hash};
  std::vector<std::uint32_t> all(2 * static_cast<std::size_t>(transport_.size()));
  MPI_Request req;
  MPI_Iallgather(mine, 2, MPI_UINT32_T, all.data(), 2, MPI_UINT32_T, transport_.collective_comm(), &req);
  // A rank that registers a handler the others do not waits here for ever: the failure
  // detector's report names the handler.
  const std::string named(name);
  detail::wait_subject subject{.what = "register_handler (collective: every rank registers the same handlers in the "
                                       "same order)",
                               .detail = [](const void* n) { return "handler '" + *static_cast<const std::string*>(n) + "'"; },
                               .detail_ctx = &named};
  detail::waiting_for waiting(subject);
  progress_.wait_until([&] {
    int done = 0;
    PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  for (int r = 0; r < transport_.size(); ++r) {
    if (all[2 * static_cast<std::size_t>(r)] != id || all[2 * static_cast<std::size_t>(r) + 1] != hash) {
      published_.store(handlers_.size() - 1, std::memory_order_release);
      handlers_.pop_back();
      detail::fail(MDSM_ERR_HANDLER_MISMATCH, "handler '", name, "' would get id ", id, " on rank ", transport_.rank(),
                   " but rank ", r, " registered a different handler (or a different number of handlers) at this "
                   "point; register the same handlers in the same order on every rank");
    }
  }
  return id;
}

void endpoint::reject_send(int dest, handler_id h, annotation a) const {
  check_dest(dest, "send");
  if (static_cast<unsigned>(a) >= k_annotations)
    detail::fail(MDSM_ERR_INVALID_ANNOTATION, "send: annotation ", static_cast<unsigned>(a),
                 " is not NONE, REQUEST, RELEASE or RELEASE_NT");
  detail::fail(MDSM_ERR_UNKNOWN_HANDLER, "send: handler id ", h, " was never registered (", published_.load(),
               " handlers exist)");
}

void endpoint::send(int dest, handler_id h, std::span<const std::byte> payload, annotation a) {
  const unsigned ai = static_cast<unsigned>(a);
  // One test for the three ways a send can be wrong; reject_send says which.
  if (static_cast<unsigned>(dest) >= static_cast<unsigned>(transport_.size()) || ai >= k_annotations ||
      h >= published_.load(std::memory_order_acquire)) [[unlikely]]
    reject_send(dest, h, a);
  if (a == annotation::none) [[likely]] {  // nothing attached: the cost of a plain MPI message
    stats::storage::block& counts = stats::local();
    stats::add(counts, stats::counter::msgs_sent_none);
    stats::add(counts, stats::counter::payload_bytes_sent_none, payload.size());
    return transport_.send(dest, net::make_header(net::channel::messages, h, transport_.rank()), payload, counts);
  }
  stats::add(stats::by_annotation(stats::counter::msgs_sent_none, ai));
  stats::add(stats::by_annotation(stats::counter::payload_bytes_sent_none, ai), payload.size());
  send_annotated(dest, net::make_header(net::channel::messages, h, transport_.rank(), static_cast<std::uint8_t>(ai)),
                 payload, a);
}

// Out of line, so the NONE path above stays a small function (few registers to save). The
// frame is assembled in place -- header, payload, then the consistency information the engine
// appends -- and sent from there, without a second copy.
void endpoint::send_annotated(int dest, const net::frame_header& header, std::span<const std::byte> payload,
                              annotation a) {
  thread_local net::byte_writer frame;
  frame.clear();
  const std::size_t header_at = frame.reserve_slot<net::frame_header>();
  frame.put_bytes(payload);
  const std::size_t cinfo_at = frame.size();
  switch (a) {
    case annotation::request: engine_.encode_request(frame); break;
    case annotation::release: engine_.encode_release(dest, true, frame); break;
    default: engine_.encode_release(dest, false, frame); break;
  }
  const std::size_t cinfo_len = frame.size() - cinfo_at;  // send_frame checks the frame limit
  stats::add(stats::by_annotation(stats::counter::cinfo_bytes_sent_none, static_cast<unsigned>(a)), cinfo_len);
  net::frame_header h = header;
  h.payload_len = static_cast<std::uint32_t>(payload.size());
  h.cinfo_len = static_cast<std::uint32_t>(cinfo_len);
  frame.fill_slot(header_at, h);
  transport_.send_frame(dest, frame.mutable_bytes());
  // A REQUEST expects an answer (a lock grant, an item, a reply): wake the receiver if it naps.
  if (a == annotation::request) transport_.bells().ring(dest);
}

inline void endpoint::run_handler(detail::inbound& in) {
  const detail::handler_entry& e = in.entry;
  message m = detail::inbound::make(&in);
  {
    net::handler_scope scope(e.name.c_str());
    stats::scoped_timer timer(stats::counter::handler_ns);
    try {
      e.fn(m);
    } catch (const error& err) {
      detail::defer_error(error(err.code(), detail::cat(err.what(), " (in message handler '", e.name, "')")));
    } catch (const std::exception& ex) {
      detail::defer_error(error(MDSM_ERR_INVALID_ARGUMENT,
                                detail::cat("mdsm: message handler '", e.name, "' threw: ", ex.what())));
    }
  }
  if (needs_disposal(in.annot()) && !in.disposed) [[unlikely]]
    detail::defer_error(error(MDSM_ERR_NOT_DISPOSED,
                              detail::cat("mdsm: message handler '", e.name, "' returned without accepting, forwarding "
                                          "or storing a ", to_string(in.annot()), " message from rank ",
                                          in.frame.header.origin, "; the message was dropped. Every RELEASE must be "
                                          "disposed of exactly once")));
}

void endpoint::on_frame(void* ctx, const net::inbound_frame& f) {
  auto& self = *static_cast<endpoint*>(ctx);
  const detail::handler_entry* e = self.entry(f.header.handler);
  if (e == nullptr) [[unlikely]]
    net::byte_reader::malformed("unknown handler id");
  // NONE, the plain message, here; the annotated kinds out of line, so this path keeps a small
  // stack frame (a decoded release_info is large).
  if (f.header.annot != static_cast<std::uint8_t>(annotation::none)) return self.deliver_annotated(f, *e);
  if (f.header.cinfo_len != 0) [[unlikely]]
    net::byte_reader::malformed("NONE message with consistency information");
  count_received(annotation::none);
  detail::inbound in{f, *e, annotation::none};
  self.run_handler(in);
}

void endpoint::deliver_annotated(const net::inbound_frame& f, const detail::handler_entry& e) {
  const auto a = static_cast<annotation>(f.header.annot);
  detail::inbound in{f, e, a};
  switch (a) {
    case annotation::none: break;  // not reached: on_frame delivers NONE itself
    case annotation::request:
      engine_.learn_request(f.header.origin, f.cinfo());
      count_received(a);
      return run_handler(in);
    case annotation::release:
    case annotation::release_nt: {
      // A release that brings nothing this rank lacks (in a message protocol most do: the
      // messages go back and forth, each side current with the other) is complete on arrival:
      // nothing to decode, and accepting it, now or once stored, has nothing to wait for.
      // in.release stays null; forward sends the frame, which still carries it whole.
      if (engine_.acquire_if_current(f.header.origin, f.cinfo())) {
        stats::add(stats::counter::msgs_current);
        count_received(a);
        return run_handler(in);
      }
      coherence::release_info info = engine_.decode_release(f.header.origin, f.cinfo());
      in.release = &info;
      count_received(a);
      return run_handler(in);
    }
  }
  net::byte_reader::malformed("invalid annotation");
}

namespace {
void mark_disposed(bool& disposed, const std::string& handler, const char* op) {
  if (disposed)
    detail::fail(MDSM_ERR_ALREADY_DISPOSED, op, ": the message for handler '", handler,
                 "' was already accepted, forwarded or stored");
  disposed = true;
}
}  // namespace

void endpoint::accept(detail::inbound& in) {
  mark_disposed(in.disposed, in.entry.name, "accept");
  if (needs_disposal(in.annot())) stats::add(stats::counter::msgs_accepted);
  if (in.release) {
    engine_.begin_acquire(std::move(*in.release));  // handler context: completes asynchronously
    in.release = nullptr;
  }
}

void endpoint::forward(detail::inbound& in, int dest) {
  if (in.disposed) mark_disposed(in.disposed, in.entry.name, "forward");
  check_dest(dest, detail::cat("forward (handler '", in.entry.name, "')").c_str());
  in.disposed = true;
  stats::add(stats::counter::msgs_forwarded);
  transport_.send_frame(dest, in.frame.whole());
  // A forwarded REQUEST (a lock request the manager passes to the holder) expects an answer too.
  if (in.annot() == annotation::request) transport_.bells().ring(dest);
}

std::unique_ptr<detail::stored> endpoint::store(detail::inbound& in) {
  mark_disposed(in.disposed, in.entry.name, "store");
  stats::add(stats::counter::msgs_stored);
  auto s = std::make_unique<detail::stored>();
  s->frame.assign(in.frame.whole().begin(), in.frame.whole().end());
  s->source = in.frame.source;
  s->entry = &in.entry;
  s->annot = in.annot();
  if (in.release) s->release = std::move(*in.release);
  in.release = nullptr;
  return s;
}

void endpoint::accept(detail::stored& s) {
  mark_disposed(s.disposed, s.entry->name, "accept");
  if (needs_disposal(s.annot)) stats::add(stats::counter::msgs_accepted);
  if (!s.release) return;
  auto acq = engine_.begin_acquire(std::move(*s.release));
  s.release.reset();
  if (net::current_handler() == nullptr) engine_.wait_acquire(acq);
}

void endpoint::accept_all(const std::vector<detail::stored*>& group) {
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group[i]->disposed)
      detail::fail(MDSM_ERR_ALREADY_DISPOSED, "accept_all: message ", i, " (handler '", group[i]->entry->name,
                   "') was already accepted or forwarded");
    for (std::size_t j = 0; j < i; ++j)
      if (group[j] == group[i]) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "accept_all: message ", i, " appears twice");
  }
  std::vector<coherence::release_info> infos;
  for (detail::stored* s : group) {
    s->disposed = true;
    if (needs_disposal(s->annot)) stats::add(stats::counter::msgs_accepted);
    if (!s->release) continue;
    infos.push_back(std::move(*s->release));
    s->release.reset();
  }
  if (infos.empty()) return;
  auto acq = engine_.begin_acquire(std::move(infos));
  if (net::current_handler() == nullptr) engine_.wait_acquire(acq);
}

void endpoint::discard(detail::stored& s) {
  mark_disposed(s.disposed, s.entry->name, "discard");
  // The consistency information goes with it. Nothing else holds on to it: the records it carried
  // that this rank lacks are fetched by whichever later acquire needs them (missing intervals),
  // and a diff pushed along with it is fetched again by the fault that needs it.
  s.release.reset();
  stats::add(stats::counter::msgs_discarded);
}

void endpoint::forward(detail::stored& s, int dest) {
  if (s.disposed) mark_disposed(s.disposed, s.entry->name, "forward");
  check_dest(dest, detail::cat("forward (handler '", s.entry->name, "')").c_str());
  s.disposed = true;
  stats::add(stats::counter::msgs_forwarded);
  transport_.send_frame(dest, s.frame);
  if (s.annot == annotation::request) transport_.bells().ring(dest);
}

}  // namespace messages
}  // namespace mdsm

namespace mdsm::messages {

namespace {
std::atomic<endpoint*> g_current{nullptr};
}

void set_current(endpoint* e) noexcept { g_current.store(e, std::memory_order_release); }

endpoint& current() {
  endpoint* e = g_current.load(std::memory_order_acquire);
  if (e == nullptr) detail::fail(MDSM_ERR_NOT_INITIALIZED, "mdsm is not initialized: call mdsm::init first");
  return *e;
}

}  // namespace mdsm::messages
