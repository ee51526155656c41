#include "net/transport.hpp"

#include "common/deferred.hpp"
#include "stats/counters.hpp"

#include <cstdio>
#include <limits>

namespace mdsm::net {

namespace {

constexpr int k_large_tag = 1;
constexpr std::uint32_t k_op_credit = 2;  // control channel: no payload; the header's credit field

[[noreturn, gnu::noinline, gnu::cold]] void mpi_failed(int rc, const char* what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  detail::fail(MDSM_ERR_MPI, what, " failed: ", std::string(text, static_cast<std::size_t>(len)));
}

void check_frame_size(std::uint64_t len) {
  if (len > k_frame_limit) [[unlikely]]
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "a message of ", len, " bytes exceeds the frame limit of ", k_frame_limit,
                 " bytes; split it");
}

inline void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) [[unlikely]]
    mpi_failed(rc, what);
}

[[gnu::cold, gnu::noinline]] void report_malformed(int rank, int source, const char* why) {
  stats::add(stats::counter::frames_malformed);
  static std::atomic<int> reported{0};
  if (reported.fetch_add(1) < 10)
    std::fprintf(stderr, "mdsm: rank %d dropped a malformed frame from rank %d: %s\n", rank, source, why);
}


}  // namespace

transport::transport(MPI_Comm base, std::size_t inline_max, std::uint32_t window) : inline_max_(inline_max) {
  // Every channel slot has a consumer, so delivery dispatches without a test: unclaimed channels
  // report the frame, the control channel is the transport's own.
  for (unsigned c = 0; c <= k_channel_max; ++c) set_handler(static_cast<channel>(c), nullptr, nullptr);
  check_mpi(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_dup(base, &coll_comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(coll_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Both ends of a pair must cost frames alike (costs are capped at the window) and a receiver
  // reports by half of it: one window for the job, the smallest any rank asks for.
  window = std::clamp(window, flow_control::k_min_window, flow_control::k_max_window);
  check_mpi(PMPI_Allreduce(MPI_IN_PLACE, &window, 1, MPI_UINT32_T, MPI_MIN, coll_comm_), "MPI_Allreduce");
  flow_.configure(size_, window);
  bells_ = std::make_unique<doorbells>(comm_);
  sent_base_ = stats::get_since_load(stats::counter::frames_sent);
  // Every slot starts on a cache line of its own.
  ring_stride_ = (inline_max_ + 63) / 64 * 64;
  ring_memory_ = std::make_unique_for_overwrite<std::byte[]>(k_ring_slots * ring_stride_ + 63);
  ring_base_ = ring_memory_.get() + (64 - reinterpret_cast<std::uintptr_t>(ring_memory_.get()) % 64) % 64;
  // Persistent receives: reposting a slot is an MPI_Start, which skips the request allocation
  // and set-up an MPI_Irecv pays on every message.
  for (std::size_t i = 0; i < k_ring_slots; ++i) {
    check_mpi(MPI_Recv_init(ring_slot(i), static_cast<int>(inline_max_), MPI_BYTE, MPI_ANY_SOURCE, k_ring_tag,
                            comm_, &ring_requests_[i]),
              "MPI_Recv_init");
    post_receive(i);
  }
}

transport::~transport() {
  // Pre: the job is quiescent (finalize detected termination), so nothing is in flight to us.
  for (auto& p : inflight_) PMPI_Wait(&p.request, MPI_STATUS_IGNORE);
  inflight_.clear();
  for (std::size_t i = 0; i < ring_requests_.size(); ++i) {
    MPI_Request& r = ring_requests_[i];
    if (!(repost_pending_ && repost_slot() == i)) {  // active: cancel it
      MPI_Cancel(&r);
      PMPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    MPI_Request_free(&r);
  }
  bells_.reset();
  MPI_Comm_free(&coll_comm_);
  MPI_Comm_free(&comm_);
}

void transport::set_handler(channel c, frame_handler fn, void* ctx) {
  if (c == channel::control) fn = &transport::on_control, ctx = this;
  else if (fn == nullptr) fn = &transport::on_unclaimed, ctx = this;
  handlers_[static_cast<unsigned>(c)] = slot{fn, ctx};
}

void transport::on_control(void* ctx, const inbound_frame& f) {
  auto& t = *static_cast<transport*>(ctx);
  switch (f.header.handler) {
    case k_op_large: return t.take_large(f.payload(), f.source);
    case k_op_credit:  // its credit field was taken in by deliver(), like every frame's
      if (f.header.payload_len != 0 || f.header.cinfo_len != 0)
        return report_malformed(t.rank_, f.source, "credit frame with a payload");
      return;
    default: return report_malformed(t.rank_, f.source, "unknown control operation");
  }
}

void transport::on_unclaimed(void* ctx, const inbound_frame& f) {
  report_malformed(static_cast<transport*>(ctx)->rank_, f.source, "no consumer for the channel");
}

namespace {
// Frames are assembled in a per-thread staging buffer and sent from it: up to k_eager_send_max
// with MPI_Send (the buffer is free again when it returns), above with MPI_Isend, which almost
// always completes at once too; only if it does not does the buffer go to the in-flight list,
// and the thread takes a fresh one next time. So the common send allocates nothing.
struct staging {
  std::unique_ptr<std::byte[]> buffer;
  std::size_t capacity = 0;
  std::byte* get(std::size_t len, std::size_t at_least, transport& t) {
    if (capacity < len) {
      buffer = t.take_spare(std::max(len, at_least), capacity);
      if (!buffer) {
        capacity = std::max(len, at_least);
        buffer = std::make_unique_for_overwrite<std::byte[]>(capacity);
      }
    }
    return buffer.get();
  }
};
thread_local staging t_staging;
}  // namespace

void transport::send_staged(int dest, frame_header h, std::span<const std::byte> payload,
                            std::span<const std::byte> more, bool never_block) {
  const std::uint64_t len = sizeof(frame_header) + payload.size() + more.size();
  check_frame_size(len);
  // Before the staging buffer is touched: a wait for credits may run a handler that sends.
  const std::uint8_t flags = claim(dest, flow_.cost(len));
  h.payload_len = static_cast<std::uint32_t>(payload.size() + more.size());
  h.cinfo_len = 0;
  std::byte* const buffer = t_staging.get(len, inline_max_, *this);
  std::memcpy(buffer, &h, sizeof h);
  if (!payload.empty()) std::memcpy(buffer + sizeof h, payload.data(), payload.size());
  if (!more.empty()) std::memcpy(buffer + sizeof h + payload.size(), more.data(), more.size());
  post(len, dest, flags, never_block);
}

void transport::send_frame(int dest, std::span<std::byte> frame) {
  MDSM_ASSERT(dest >= 0 && dest < size_, "send to a rank out of range");
  check_frame_size(frame.size());
  const std::uint32_t cost = flow_.cost(frame.size());
  std::uint8_t flags = k_flag_waits;
  std::vector<std::byte> aside;
  if (!sends_may_wait()) {
    flags = overdraw(dest, cost);
  } else if (!flow_.try_claim(dest, cost)) [[unlikely]] {
    // The frame may lie in a per-thread buffer (endpoint's annotated writer) that a handler run
    // by the wait reuses: wait with a copy. Rare: only when the window is full.
    aside.assign(frame.begin(), frame.end());
    frame = aside;
    await_credits(dest, cost);
  }
  if (frame.size() <= k_eager_send_max) {  // no copy
    write_hop(frame.data(), dest, flags);
    send_eager(frame.data(), frame.size(), dest);
    return bells_->knock(dest);
  }
  std::memcpy(t_staging.get(frame.size(), inline_max_, *this), frame.data(), frame.size());
  post(frame.size(), dest, flags);
}

std::uint8_t transport::overdraw(int dest, std::uint32_t cost) {
  if (flow_.charge(dest, cost)) stats::add(stats::counter::flow_overdrafts);
  return 0;
}

void transport::await_credits(int dest, std::uint32_t cost) {
  stats::add(stats::counter::flow_waits);
  // The destination's progress thread may nap while its application computes; our frames are
  // what it must take in to return credits, so wake it (no-op unless it naps on this host).
  bells_->ring(dest);
  while (!flow_.try_claim(dest, cost)) {
    if (waiter_.fn == nullptr) {  // no wait point (start-up or shut-down): overdraw
      flow_.charge(dest, cost);
      return;
    }
    waiter_.fn(waiter_.ctx, dest);
  }
}

void transport::send_credit(int dest) {
  frame_header h = make_header(channel::control, k_op_credit, rank_);
  h.credit = flow_.report(dest);
  stats::add(stats::counter::credit_frames);
  send_eager(reinterpret_cast<const std::byte*>(&h), sizeof h, dest);
}

void transport::review_flow() {
  if (flow_.review([this](int r) { send_credit(r); })) stats::add(stats::counter::flow_throttles);
}

std::uint64_t transport::frames_sent() const {
  return stats::get_since_load(stats::counter::frames_sent) - sent_base_;
}

void transport::send_raw_for_test(int dest, std::span<const std::byte> bytes) {
  // Charged as the receiver counts it (take_in): every frame but one whose channel byte says
  // control.
  if (bytes.size() < sizeof(frame_header) ||
      bytes[offsetof(frame_header, chan)] != static_cast<std::byte>(channel::control))
    flow_.charge(dest, flow_.cost(bytes.size()));
  auto buffer = std::make_unique_for_overwrite<std::byte[]>(bytes.size());
  std::memcpy(buffer.get(), bytes.data(), bytes.size());
  stats::add(stats::counter::frames_sent);
  isend(std::move(buffer), bytes.size(), dest, k_ring_tag);
}

void transport::send_failed(int rc) { mpi_failed(rc, "MPI_Send"); }

void transport::post(std::size_t len, int dest, std::uint8_t flags, bool never_block) {
  write_hop(t_staging.buffer.get(), dest, flags);
  send_staged_frame(len, dest, never_block);
  bells_->knock(dest);
}

void transport::send_staged_frame(std::size_t len, int dest, bool never_block) {
  if (len <= k_eager_send_max && !never_block) return send_eager(t_staging.buffer.get(), len, dest);
  stats::add(stats::counter::frames_sent);
  stats::add(stats::counter::frame_bytes_sent, len);
  if (len <= inline_max_) {
    isend_staged(len, dest, k_ring_tag);
    return;
  }
  stats::add(stats::counter::large_frames);
  // The announcement is a control frame: the frame's credits were charged for the whole of it,
  // and the receiver counts them when it takes the body in.
  frame_header h = make_header(channel::control, k_op_large, rank_);
  h.payload_len = sizeof(std::uint64_t);
  h.credit = flow_.report(dest);
  const std::uint64_t body = len;
  auto announce = std::make_unique_for_overwrite<std::byte[]>(sizeof h + sizeof body);
  std::memcpy(announce.get(), &h, sizeof h);
  std::memcpy(announce.get() + sizeof h, &body, sizeof body);
  std::lock_guard lk(large_mutex_);
  isend(std::move(announce), sizeof h + sizeof body, dest, k_ring_tag);
  isend_staged(len, dest, k_large_tag);
}

void transport::isend_staged(std::size_t len, int dest, int tag) {
  t_staging.buffer = isend(std::move(t_staging.buffer), len, dest, tag, t_staging.capacity);
  // Gone with the request (MPI still reads it; it becomes a spare when the send completes), or
  // too large to keep for the small frames.
  if (!t_staging.buffer) t_staging = staging{};
  else if (t_staging.capacity > k_spare_max) t_staging = staging{};
}

std::unique_ptr<std::byte[]> transport::isend(std::unique_ptr<std::byte[]> buffer, std::size_t len, int dest, int tag,
                                              std::size_t capacity) {
  MPI_Request req;
  check_mpi(PMPI_Isend(buffer.get(), static_cast<int>(len), MPI_BYTE, dest, tag, comm_, &req), "MPI_Isend");
  int done = 0;
  check_mpi(PMPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (done) return buffer;
  std::lock_guard lk(send_mutex_);
  inflight_.push_back(pending_send{req, std::move(buffer), capacity});
  inflight_count_.fetch_add(1, std::memory_order_release);
  return nullptr;
}

std::unique_ptr<std::byte[]> transport::take_spare(std::size_t len, std::size_t& capacity) {
  std::lock_guard lk(send_mutex_);
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->capacity < len) continue;
    capacity = it->capacity;
    std::unique_ptr<std::byte[]> b = std::move(it->buffer);
    spares_.erase(it);
    return b;
  }
  return nullptr;
}

void transport::retire_sends() {
  std::unique_lock lk(send_mutex_, std::try_to_lock);
  if (!lk.owns_lock()) return;  // a sender is adding; retire next time
  for (std::size_t i = 0; i < inflight_.size();) {
    int done = 0;
    check_mpi(PMPI_Test(&inflight_[i].request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) {
      // Large frames' buffers are kept for the next ones: a fresh one costs a page fault per
      // 4 KiB on first touch (a 64 KiB reply of 16 pages paid ~20 us for it).
      if (inflight_[i].capacity > inline_max_ && inflight_[i].capacity <= k_spare_max && spares_.size() < k_spares)
        spares_.push_back(spare{std::move(inflight_[i].buffer), inflight_[i].capacity});
      inflight_[i] = std::move(inflight_.back());
      inflight_.pop_back();
      inflight_count_.fetch_sub(1, std::memory_order_release);
    } else {
      ++i;
    }
  }
}

void transport::take_in_short(std::size_t len, int source) {
  if (flow_.take_in(source, flow_.cost(len), false)) send_credit(source);
}

inline void transport::deliver(std::span<std::byte> bytes, int source) {
  stats::storage::block& counts = stats::local();
  stats::add(counts, stats::counter::frames_received);
  stats::add(counts, stats::counter::frame_bytes_received, bytes.size());
  frame_header h;
  if (bytes.size() < sizeof h) [[unlikely]] {
    take_in_short(bytes.size(), source);
    return report_malformed(rank_, source, "shorter than a header");
  }
  std::memcpy(&h, bytes.data(), sizeof h);
  // The frame's credits, counted whatever follows (the sender charged them; send_raw_for_test
  // follows the same rule), before a handler's reply can report them. Control frames cost none.
  if (h.chan != static_cast<std::uint8_t>(channel::control) &&
      flow_.take_in(source, flow_.cost(bytes.size()), (h.flags & k_flag_waits) != 0)) [[unlikely]]
    send_credit(source);
  if (!header_ok(h, bytes.size(), size_)) [[unlikely]]
    return report_malformed(rank_, source, header_problem(h, bytes.size(), size_));
  if (!flow_.take_report(source, h.credit)) [[unlikely]]
    return report_malformed(rank_, source, "more credits returned than were sent");
  const inbound_frame f{h, source, bytes.data()};
  const slot& s = handlers_[h.chan];
  try {
    s.fn(s.ctx, f);
  } catch (const error& e) {
    if (e.code() == MDSM_ERR_MALFORMED) return report_malformed(rank_, source, e.what());
    detail::defer_error(e);
  }
}

std::size_t transport::poll(std::size_t max_frames) {
  if (inflight_count_.load(std::memory_order_acquire) != 0) retire_sends();
  std::size_t delivered = 0;
  while (delivered < max_frames) {
    // The slot delivered last is reposted here, at the next look at the ring, so a waiter whose
    // frame that was returns (and sends its next message) first. At most one slot waits, and it
    // is reposted before any later one, so MPI's posting order stays the ring's order.
    if (repost_pending_) {
      repost_pending_ = false;
      post_receive(repost_slot());
    }
    int flag = 0;
    MPI_Status st;
    const std::size_t slot = ring_head_;
    const int rc = PMPI_Test(&ring_requests_[slot], &flag, &st);
    if (!flag) {
      check_mpi(rc, "MPI_Test");
      break;
    }
    received_.store(received_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer
    ring_head_ = (slot + 1) % k_ring_slots;
    ++delivered;
    repost_pending_ = true;  // set before delivering: a handler that throws leaves no hole
    if (rc != MPI_SUCCESS) [[unlikely]] {
      if (rc != MPI_ERR_IN_STATUS && rc != MPI_ERR_TRUNCATE) check_mpi(rc, "MPI_Test");
      report_malformed(rank_, st.MPI_SOURCE, "larger than the receive buffer");
      continue;
    }
    deliver(std::span<std::byte>(ring_slot(slot), received_bytes(st)), st.MPI_SOURCE);
  }
  if (flow_.review_due()) [[unlikely]]
    review_flow();
  return delivered;
}

void transport::post_receive(std::size_t slot) { check_mpi(MPI_Start(&ring_requests_[slot]), "MPI_Start"); }

void transport::take_large(std::span<const std::byte> announcement, int source) {
  std::uint64_t len = 0;
  try {
    len = decode_large_announcement(announcement);
  } catch (const error& e) {
    return report_malformed(rank_, source, e.what());
  }
  // The body was sent right after the announcement on its own tag; MPI keeps per-sender order
  // on that tag, so this receive gets exactly this frame's body.
  // Kept between frames (only the progress lock's holder is here): a fresh buffer costs a page
  // fault per 4 KiB on first touch.
  std::vector<std::byte>& body = large_body_;
  if (body.size() < len) body.resize(len);
  MPI_Status st;
  check_mpi(PMPI_Recv(body.data(), static_cast<int>(len), MPI_BYTE, source, k_large_tag, comm_, &st), "MPI_Recv");
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  if (static_cast<std::uint64_t>(count) != len) return report_malformed(rank_, source, "large-frame body length");
  frame_header h;
  std::memcpy(&h, body.data(), sizeof h);
  if (h.chan == static_cast<std::uint8_t>(channel::control))
    return report_malformed(rank_, source, "nested large-frame announcement");
  deliver(std::span<std::byte>(body.data(), len), source);
  if (body.size() > k_spare_max) std::vector<std::byte>().swap(body);
}

}  // namespace mdsm::net
