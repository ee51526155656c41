#include "regions/one_sided.hpp"

#include "regions/one_sided_wire.hpp"

#include "common/check.hpp"
#include "common/deferred.hpp"
#include "common/env.hpp"
#include "common/wait_subject.hpp"
#include "os/vm.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace mdsm::regions {

namespace {

std::uintptr_t addr_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
std::byte* ptr_of(std::uint64_t a) { return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(a)); }

template <class... T>
std::array<std::uint64_t, sizeof...(T)> words(T... v) {
  return {static_cast<std::uint64_t>(v)...};
}

std::size_t chunks(std::size_t n) { return (n + one_sided::k_chunk_bytes - 1) / one_sided::k_chunk_bytes; }

}  // namespace

one_sided::one_sided(net::transport& t, net::progress& p, noncoherent_region& r, const coherence::region_map& coherent)
    : transport_(t),
      progress_(p),
      region_(r),
      coherent_(coherent),
      rank_(t.rank()),
      body_min_(detail::env_size("MDSM_NONCOHERENT_BODY_MIN", k_body_min)),
      tags_(k_tags, false) {
  if (PMPI_Comm_dup(transport_.collective_comm(), &body_comm_) != MPI_SUCCESS)
    detail::fail(MDSM_ERR_MPI, "MPI_Comm_dup failed while setting up the non-coherent region");
  MPI_Comm_set_errhandler(body_comm_, MPI_ERRORS_RETURN);
  framed_ = std::make_unique<std::atomic<std::uint32_t>[]>(static_cast<std::size_t>(transport_.size()));
  probe_direct();
  transport_.set_handler(net::channel::noncoherent, &one_sided::on_frame, this);
}

one_sided::~one_sided() {
  transport_.set_handler(net::channel::noncoherent, nullptr, nullptr);
  for (std::byte* m : mapped_)
    if (m != nullptr) os::unmap(m, region_.size());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Bodies still in flight (requests never waited for): the peer posted its side, so they end.
  for (auto& op : bodies_) PMPI_Wait(&op->body, MPI_STATUS_IGNORE);
  for (auto& r : sends_) PMPI_Wait(&r, MPI_STATUS_IGNORE);
  PMPI_Comm_free(&body_comm_);
}

// ---- checks ------------------------------------------------------------------------------------

void one_sided::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= transport_.size())
    detail::fail(MDSM_ERR_INVALID_RANK, what, ": rank ", rank, " is outside [0, ", transport_.size(), ")");
}

void one_sided::check_remote(const void* p, std::size_t n, const char* what) const {
  if (!region_.contains(p, n))
    detail::fail(MDSM_ERR_NOT_IN_REGION, what, ": the remote range [", p, ", +", n,
                 " bytes) is not inside the non-coherent region [", static_cast<const void*>(region_.base()), ", +",
                 region_.size(), " bytes); allocate it with nc_alloc or nc_alloc_collective");
}

void one_sided::check_local(const void* p, std::size_t n, const char* what) const {
  if (p == nullptr && n != 0) detail::fail(MDSM_ERR_INVALID_ARGUMENT, what, ": the local buffer is a null pointer");
  if (n == 0) return;
  const char* h = net::current_handler();
  if (h == nullptr) return;
  if (coherent_.where(p, n) != coherence::region_map::placement_of::outside)
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, what, " from message handler '", h,
                 "': its local buffer lies in the coherent region, which handlers must not touch; use private or "
                 "non-coherent memory there (or issue it from an application thread)");
}

bool one_sided::coherent_overlap(const void* p, std::size_t n) const noexcept {
  return n != 0 && coherent_.where(p, n) != coherence::region_map::placement_of::outside;
}

// ---- bodies --------------------------------------------------------------------------------------

int one_sided::claim_tag() {
  std::lock_guard lk(ops_mutex_);
  for (int k = 0; k < k_tags; ++k) {
    const int tag = (next_tag_ + k) % k_tags;
    if (!tags_[static_cast<std::size_t>(tag)]) {
      tags_[static_cast<std::size_t>(tag)] = true;
      next_tag_ = (tag + 1) % k_tags;
      return tag;
    }
  }
  return -1;
}

void one_sided::release_tag(int tag) {
  std::lock_guard lk(ops_mutex_);
  tags_[static_cast<std::size_t>(tag)] = false;
}

void one_sided::add_body(const op_ptr& op) {
  std::lock_guard lk(bodies_mutex_);
  bodies_.push_back(op);
  bodies_in_flight_.fetch_add(1, std::memory_order_release);
}

void one_sided::retire_bodies() {
  std::unique_lock lk(bodies_mutex_, std::try_to_lock);
  if (!lk.owns_lock()) return;  // another thread is at it (or adding one)
  for (std::size_t i = 0; i < bodies_.size();) {
    int done = 0;
    if (PMPI_Test(&bodies_[i]->body, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      detail::fail(MDSM_ERR_MPI, bodies_[i]->what, ": MPI_Test of its bytes' transfer failed");
    if (!done) {
      ++i;
      continue;
    }
    op_ptr op = std::move(bodies_[i]);
    bodies_[i] = std::move(bodies_.back());
    bodies_.pop_back();
    bodies_in_flight_.fetch_sub(1, std::memory_order_relaxed);
    release_tag(op->tag);
    complete_part(*op);  // the bytes are where they belong
  }
  for (std::size_t i = 0; i < sends_.size();) {
    int done = 0;
    if (PMPI_Test(&sends_[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      detail::fail(MDSM_ERR_MPI, "get: MPI_Test of a body sent to the origin failed");
    if (!done) {
      ++i;
      continue;
    }
    sends_[i] = sends_.back();
    sends_.pop_back();
    bodies_in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }
}

// ---- starting operations -----------------------------------------------------------------------

one_sided::op_ptr one_sided::start(const char* what, int rank, std::size_t bytes) {
  auto op = std::make_shared<detail::nc_operation>();
  op->what = what;
  op->target = rank;
  op->bytes = bytes;
  return op;
}

std::uint32_t one_sided::track(const op_ptr& op) {
  std::lock_guard lk(ops_mutex_);
  std::uint32_t token;
  do {  // skips 0 (no reply) and, after a wrap, tokens still in flight
    token = next_token_++;
  } while (token == 0 || ops_.count(token) != 0);
  ops_.emplace(token, op);
  return token;
}

one_sided::op_ptr one_sided::find(std::uint32_t token) {
  std::lock_guard lk(ops_mutex_);
  auto it = ops_.find(token);
  if (it == ops_.end()) net::byte_reader::malformed("non-coherent reply with an unknown token");
  return it->second;
}

void one_sided::forget(std::uint32_t token) {
  std::lock_guard lk(ops_mutex_);
  ops_.erase(token);
}

void one_sided::send(int dest, std::uint32_t code, std::uint32_t token, std::span<const std::byte> fields,
                     std::span<const std::byte> bytes) {
  transport_.send_parts(dest, net::make_header(net::channel::noncoherent, code, rank_, 0, token), fields, bytes);
}

one_sided::op_ptr one_sided::get(void* dst, int rank, const void* src, std::size_t n) {
  check_rank(rank, "get");
  check_remote(src, n, "get");
  check_local(dst, n, "get");
  op_ptr op = start("get", rank, n);
  stats::add(stats::counter::nc_gets);
  stats::add(stats::counter::nc_get_bytes, n);
  if (n == 0) return op;
  if (rank == rank_) {
    std::memmove(dst, src, n);
    return op;
  }
  if (coherent_overlap(dst, n)) {
    op->staged.resize(n);
    op->dst = op->staged.data();
    op->coherent_dst = static_cast<std::byte*>(dst);
  } else {
    op->dst = static_cast<std::byte*>(dst);
  }
  if (copy_direct(rank, op->dst, const_cast<void*>(src), n, false)) return op;  // finish() copies a staged get
  const bool aligned = reinterpret_cast<std::uintptr_t>(op->dst) % os::page_size() == 0;
  const std::size_t body_min = aligned ? body_min_ : std::max<std::size_t>(body_min_, k_body_min_unaligned_get);
  if (n >= body_min && n <= k_body_max && (op->tag = claim_tag()) >= 0) {
    // The bytes come as one MPI message straight into dst (or the staging buffer).
    if (PMPI_Irecv(op->dst, static_cast<int>(n), MPI_BYTE, rank, op->tag, body_comm_, &op->body) != MPI_SUCCESS) {
      release_tag(op->tag);
      detail::fail(MDSM_ERR_MPI, "get: MPI_Irecv for its bytes failed");
    }
    start_framed(*op, 1);
    add_body(op);
    stats::add(stats::counter::nc_bodies);
    const auto fields = words(addr_of(src), n, op->tag);
    send(rank, op_get_body, 0, std::as_bytes(std::span(fields)));
    transport_.bells().ring(rank);
    return op;
  }
  start_framed(*op, static_cast<std::uint32_t>(chunks(n)));
  const std::uint32_t token = track(op);
  const auto fields = words(addr_of(src), n);
  send(rank, op_get, token, std::as_bytes(std::span(fields)));
  transport_.bells().ring(rank);  // a reply is awaited: wake the target if it naps
  return op;
}

one_sided::op_ptr one_sided::put(int rank, void* dst, const void* src, std::size_t n) {
  check_rank(rank, "put");
  check_remote(dst, n, "put");
  check_local(src, n, "put");
  op_ptr op = start("put", rank, n);
  stats::add(stats::counter::nc_puts);
  stats::add(stats::counter::nc_put_bytes, n);
  if (n == 0) return op;
  if (rank == rank_) {
    std::memmove(dst, src, n);
    return op;
  }
  // A source in coherent memory is copied first, here, where its pages may fault: neither the
  // kernel (a direct copy) nor MPI can read a page without access, and a fault while the transport
  // builds a frame from it would send the fetch's requests from the middle of that frame's
  // construction (this thread's staging buffer). The copy lives with the request.
  if (coherent_overlap(src, n)) {
    const auto* from = static_cast<const std::byte*>(src);
    op->staged.assign(from, from + n);
    src = op->staged.data();
  }
  if (copy_direct(rank, const_cast<void*>(src), dst, n, true)) {
    std::vector<std::byte>().swap(op->staged);
    return op;
  }
  if (n >= body_min_ && n <= k_body_max && (op->tag = claim_tag()) >= 0) {
    // The bytes go as one MPI message from src; the ack says they are in place.
    const std::uint32_t token = track(op);
    if (PMPI_Isend(src, static_cast<int>(n), MPI_BYTE, rank, op->tag, body_comm_, &op->body) != MPI_SUCCESS) {
      forget(token);
      release_tag(op->tag);
      detail::fail(MDSM_ERR_MPI, "put: MPI_Isend of its bytes failed");
    }
    start_framed(*op, 2);  // the ack, and the body's completion
    add_body(op);
    stats::add(stats::counter::nc_bodies);
    const auto fields = words(addr_of(dst), n, op->tag);
    send(rank, op_put_body, token, std::as_bytes(std::span(fields)));
    transport_.bells().ring(rank);
    return op;
  }
  start_framed(*op, 1);
  const std::uint32_t token = track(op);
  const auto* from = static_cast<const std::byte*>(src);
  for (std::size_t off = 0; off < n; off += k_chunk_bytes) {
    const std::size_t len = std::min(k_chunk_bytes, n - off);
    const auto fields = words(addr_of(dst) + off);
    // Only the last chunk asks for the ack: the chunks before it arrive (and are applied) first.
    send(rank, op_put, off + len == n ? token : 0, std::as_bytes(std::span(fields)), {from + off, len});
  }
  transport_.bells().ring(rank);
  return op;
}

one_sided::op_ptr one_sided::atomic(std::uint32_t code, const char* what, int rank, std::uint64_t* word,
                                    std::uint64_t a, std::uint64_t b) {
  check_rank(rank, what);
  check_remote(word, sizeof *word, what);
  if (addr_of(word) % alignof(std::uint64_t) != 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, what, ": the word at ", static_cast<const void*>(word),
                 " is not 8-byte aligned (atomics work on aligned 64-bit words)");
  op_ptr op = start(what, rank, sizeof *word);
  stats::add(stats::counter::nc_atomics);
  // Here or on a rank of this host whose region is mapped: a hardware atomic on the word, atomic
  // with the target's own (serve_atomic's for ranks that send messages, its program's).
  const bool mapped = rank != rank_ && mapped_[static_cast<std::size_t>(rank)] != nullptr && direct_now(rank);
  if (rank == rank_ || mapped) {
    std::atomic_ref<std::uint64_t> w(mapped ? *reinterpret_cast<std::uint64_t*>(mapped_at(rank, word)) : *word);
    if (code == op_fetch_add) {
      op->value = w.fetch_add(a, std::memory_order_acq_rel);
    } else {
      std::uint64_t expected = a;
      w.compare_exchange_strong(expected, b, std::memory_order_acq_rel);
      op->value = expected;
    }
    return op;
  }
  start_framed(*op, 1);
  const std::uint32_t token = track(op);
  if (code == op_fetch_add) {
    const auto fields = words(addr_of(word), a);
    send(rank, code, token, std::as_bytes(std::span(fields)));
  } else {
    const auto fields = words(addr_of(word), a, b);
    send(rank, code, token, std::as_bytes(std::span(fields)));
  }
  transport_.bells().ring(rank);
  return op;
}

one_sided::op_ptr one_sided::fetch_add(int rank, std::uint64_t* word, std::uint64_t value) {
  return atomic(op_fetch_add, "fetch_add", rank, word, value, 0);
}

one_sided::op_ptr one_sided::compare_swap(int rank, std::uint64_t* word, std::uint64_t expected,
                                          std::uint64_t desired) {
  return atomic(op_compare_swap, "compare_swap", rank, word, expected, desired);
}

// ---- completion --------------------------------------------------------------------------------

void one_sided::finish(detail::nc_operation& op) {
  if (op.finished) return;
  if (op.coherent_dst != nullptr) {
    if (const char* h = net::current_handler())
      detail::fail(MDSM_ERR_HANDLER_CONTEXT, "a get into coherent memory completes on an application thread, not in "
                                             "message handler '", h, "' (it writes the coherent region)");
    std::memcpy(op.coherent_dst, op.staged.data(), op.bytes);  // the application's own write
    std::vector<std::byte>().swap(op.staged);
  }
  op.finished = true;
}

void one_sided::wait(detail::nc_operation& op) {
  if (const char* h = net::current_handler())
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, op.what, ": waiting for rank ", op.target,
                 " is not allowed in message handler '", h, "'; use the non-blocking form and test()");
  if (op.remaining.load(std::memory_order_acquire) != 0) {
    detail::wait_subject subject{.what = op.what, .object = nullptr, .id = 0, .peer = op.target,
                                 .peer_role = "the target of a one-sided operation"};
    detail::waiting_for waiting(subject);
    progress_.wait_until([&] {
      retire_bodies_if_any();
      return op.remaining.load(std::memory_order_acquire) == 0;
    });
  }
  finish(op);
}

bool one_sided::test(detail::nc_operation& op) {
  if (op.remaining.load(std::memory_order_acquire) != 0) {
    if (net::current_handler() == nullptr) progress_.poll_once();
    retire_bodies_if_any();
    if (op.remaining.load(std::memory_order_acquire) != 0) return false;
  }
  finish(op);
  return true;
}

void one_sided::free(void* p) {
  if (p == nullptr) return;
  if (!region_.contains(p)) detail::fail(MDSM_ERR_NOT_IN_REGION, "nc_free: ", p, " is not in the non-coherent region");
  const int owner = region_.arena_owner(p);
  if (owner < 0)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "nc_free: ", p,
                 " was allocated collectively; every rank must call nc_free_collective on it");
  std::string why;
  if (owner == rank_) {
    if (mdsm_status s = region_.free_own(addr_of(p), why); s != MDSM_SUCCESS) detail::fail(s, why);
    return;
  }
  op_ptr op = start("nc_free", owner, 0);
  start_framed(*op, 1);
  const std::uint32_t token = track(op);
  const auto fields = words(addr_of(p));
  send(owner, op_free, token, std::as_bytes(std::span(fields)));
  transport_.bells().ring(owner);
  wait(*op);
  if (op->value != MDSM_SUCCESS)
    throw error(static_cast<mdsm_status>(op->value),
                "mdsm: " + std::string(reinterpret_cast<const char*>(op->staged.data()), op->staged.size()));
}

// ---- the target's side and the replies (handler context) ---------------------------------------

void one_sided::on_frame(void* ctx, const net::inbound_frame& f) {
  auto* self = static_cast<one_sided*>(ctx);
  net::handler_scope scope("mdsm non-coherent region");
  self->retire_bodies_if_any();
  switch (f.header.handler) {
    case op_get: return self->serve_get(f);
    case op_put_body: return self->serve_put_body(f);
    case op_get_body: return self->serve_get_body(f);
    case op_put: return self->serve_put(f);
    case op_fetch_add:
    case op_compare_swap: return self->serve_atomic(f);
    case op_free: return self->serve_free(f);
    case op_get_reply: return self->take_get_reply(f);
    case op_put_ack:
    case op_atomic_reply:
    case op_free_reply: return self->take_reply(f);
    default: net::byte_reader::malformed("unknown non-coherent operation");
  }
}

namespace {
wire::bounds bounds_of(const noncoherent_region& r) {
  return {static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(r.base())), r.size()};
}
}  // namespace

void one_sided::serve_get(const net::inbound_frame& f) {
  const auto [addr, len] = wire::decode_get(f.payload(), bounds_of(region_));
  if (f.header.token == 0) net::byte_reader::malformed("get without a token");
  // Handler sends never wait for credits (net/flow.hpp): the replies go out at once.
  for (std::uint64_t off = 0; off < len; off += k_chunk_bytes) {
    const auto n = std::min<std::uint64_t>(k_chunk_bytes, len - off);
    send(f.source, op_get_reply, f.header.token, std::as_bytes(std::span(&off, 1)), {ptr_of(addr + off), n});
  }
}

void one_sided::serve_put(const net::inbound_frame& f) {
  const auto [addr, bytes] = wire::decode_put(f.payload(), bounds_of(region_));
  if (!bytes.empty()) std::memcpy(ptr_of(addr), bytes.data(), bytes.size());
  if (f.header.token != 0) send(f.source, op_put_ack, f.header.token, {});
}

void one_sided::serve_atomic(const net::inbound_frame& f) {
  const auto [addr, a, b] = wire::decode_atomic(f.payload(), f.header.handler == op_compare_swap, bounds_of(region_));
  if (f.header.token == 0) net::byte_reader::malformed("atomic without a token");
  std::atomic_ref<std::uint64_t> w(*reinterpret_cast<std::uint64_t*>(ptr_of(addr)));
  std::uint64_t old;
  if (f.header.handler == op_fetch_add) {
    old = w.fetch_add(a, std::memory_order_acq_rel);
  } else {
    old = a;
    w.compare_exchange_strong(old, b, std::memory_order_acq_rel);
  }
  send(f.source, op_atomic_reply, f.header.token, std::as_bytes(std::span(&old, 1)));
}

void one_sided::serve_free(const net::inbound_frame& f) {
  const std::uint64_t addr = wire::decode_free(f.payload());
  if (f.header.token == 0) net::byte_reader::malformed("free without a token");
  std::string why;
  const std::int32_t status = region_.free_own(static_cast<std::uintptr_t>(addr), why);
  send(f.source, op_free_reply, f.header.token, std::as_bytes(std::span(&status, 1)), std::as_bytes(std::span(why)));
}

namespace {
wire::body_request read_body_fields(const net::inbound_frame& f, const noncoherent_region& region) {
  return wire::decode_body(f.payload(), bounds_of(region), one_sided::k_body_max, one_sided::k_tags);
}
}  // namespace

void one_sided::serve_put_body(const net::inbound_frame& f) {
  const wire::body_request b = read_body_fields(f, region_);
  if (f.header.token == 0) net::byte_reader::malformed("put without a token");
  // The origin posted the body before this frame: the receive does not wait for its application.
  MPI_Status st;
  if (PMPI_Recv(ptr_of(b.addr), static_cast<int>(b.len), MPI_BYTE, f.source, b.tag, body_comm_, &st) != MPI_SUCCESS)
    detail::fail(MDSM_ERR_MPI, "put: MPI_Recv of the bytes from rank ", f.source, " failed");
  if (net::received_bytes(st) != b.len) net::byte_reader::malformed("a put body of another length");
  send(f.source, op_put_ack, f.header.token, {});
}

void one_sided::serve_get_body(const net::inbound_frame& f) {
  const wire::body_request b = read_body_fields(f, region_);
  MPI_Request r;
  if (PMPI_Isend(ptr_of(b.addr), static_cast<int>(b.len), MPI_BYTE, f.source, b.tag, body_comm_, &r) != MPI_SUCCESS)
    detail::fail(MDSM_ERR_MPI, "get: MPI_Isend of the bytes to rank ", f.source, " failed");
  int done = 0;
  PMPI_Test(&r, &done, MPI_STATUS_IGNORE);
  if (done) return;
  std::lock_guard lk(bodies_mutex_);
  sends_.push_back(r);
  bodies_in_flight_.fetch_add(1, std::memory_order_release);
}

void one_sided::take_get_reply(const net::inbound_frame& f) {
  const auto [off, bytes] = wire::decode_get_reply(f.payload());
  const op_ptr op = find(f.header.token);
  if (op->dst == nullptr || f.source != op->target || off > op->bytes || bytes.size() > op->bytes - off ||
      op->remaining.load(std::memory_order_relaxed) == 0)
    net::byte_reader::malformed("get reply that does not fit its request");
  std::memcpy(op->dst + off, bytes.data(), bytes.size());
  // Replies are taken one at a time (the progress lock), so the last one is known here.
  if (op->remaining.load(std::memory_order_relaxed) == 1) forget(f.header.token);
  complete_part(*op);
}

void one_sided::take_reply(const net::inbound_frame& f) {
  const op_ptr op = find(f.header.token);
  if (f.source != op->target || op->dst != nullptr) net::byte_reader::malformed("reply that does not fit its request");
  if (f.header.handler == op_atomic_reply) {
    op->value = wire::decode_atomic_reply(f.payload());
  } else if (f.header.handler == op_free_reply) {
    const auto [status, why] = wire::decode_free_reply(f.payload());
    op->value = static_cast<std::uint64_t>(status);
    op->staged.assign(why.begin(), why.end());
  } else {
    wire::decode_put_ack(f.payload());
  }
  forget(f.header.token);
  complete_part(*op);  // a put with a body also waits for it
}

}  // namespace mdsm::regions
