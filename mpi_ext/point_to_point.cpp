// The blocking point-to-point calls of the C API (MDSM_Send, MDSM_Ssend, MDSM_Recv, MDSM_Sendrecv)
// and their short path: a NONE message of a small predefined-type buffer outside the coherent
// region costs a copy behind the header and one MPI call. Everything else goes through the
// send and receive operations of annotated.cpp.
#include "mpi_ext/ext.hpp"

#include "api/c_guard.hpp"
#include "messages/current.hpp"
#include "net/context.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <span>

using namespace mdsm::mpi_ext;

namespace {

// A per-thread buffer that only grows, and never below a staging buffer's size (ext.hpp,
// staging_bytes: a truncated message may be written whole into a receive's).
struct scratch_buffer {
  std::unique_ptr<std::byte[]> p;
  std::size_t capacity = 0;
  std::byte* get(std::size_t n) {
    if (n > capacity) {
      capacity = std::max(n, staging_bytes(0));
      p = std::make_unique_for_overwrite<std::byte[]>(capacity);
    }
    return p.get();
  }
};
thread_local scratch_buffer t_send_buf, t_recv_buf;

// The common case, in few instructions (a small NONE round trip's whole budget is a few tens of
// instructions per call: docs/MPI.md, "Cost"): a predefined datatype, data small enough to copy
// (copy_max), the buffer outside the coherent region, mdsm up with no error to report, not in a
// handler, and MPI allowed to block. nullptr: take the general path (which also reports whatever
// is wrong).
[[gnu::always_inline]] inline mdsm::detail::runtime* fast_eligible(const void* buf, int count, MPI_Datatype type,
                                                                   std::size_t& bytes) {
  const int size = named_size(type);
  if (size == 0 || count < 0) return nullptr;
  bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(size);
  if (bytes > copy_max()) return nullptr;
  mdsm::detail::runtime* rt = mdsm::detail::rt_or_null();
  if (rt == nullptr || mdsm::net::current_handler() != nullptr || !may_block(*rt)) return nullptr;
  if (bytes != 0 && rt->engine->region().where(buf, bytes) != mdsm::coherence::region_map::placement_of::outside)
    return nullptr;
  return rt;
}

// A short path's blocking send and receive with their time counted as waiting
// (stats::mpi_wait_scope). Out of line and without a closure: the short paths only test
// stats::timing() for them and keep their frames (and tail calls) as before.
[[gnu::noinline]] int timed_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                 bool sync) {
  mdsm::stats::mpi_wait_scope waiting;
  return sync ? PMPI_Ssend(buf, count, type, dest, tag, comm) : PMPI_Send(buf, count, type, dest, tag, comm);
}
// The short paths' blocking send: timed only when statistics timing is on.
[[gnu::always_inline]] inline int mpi_send(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                                           MPI_Comm comm, bool sync) {
  if (mdsm::stats::timing()) [[unlikely]]
    return timed_send(buf, count, type, dest, tag, comm, sync);
  return sync ? PMPI_Ssend(buf, count, type, dest, tag, comm) : PMPI_Send(buf, count, type, dest, tag, comm);
}
[[gnu::noinline]] int timed_recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                 MPI_Status* st) {
  mdsm::stats::mpi_wait_scope waiting;
  return PMPI_Recv(buf, count, type, source, tag, comm, st);
}

// Copies n <= 64 bytes with a few unaligned loads and stores (overlapping where n is not a width),
// no call: a headerless message (ext.hpp) has a few bytes, which libc's memcpy takes longer to
// dispatch than to copy. s and d do not overlap.
template <std::size_t W>
inline void copy_at(std::byte* d, const std::byte* s, std::size_t at) noexcept {
  unsigned char t[W];
  std::memcpy(t, s + at, W);
  std::memcpy(d + at, t, W);
}
inline void copy_small(std::byte* d, const std::byte* s, std::size_t n) noexcept {
  if (n >= 16) {
    copy_at<16>(d, s, 0);
    copy_at<16>(d, s, n - 16);
    if (n > 32) {
      copy_at<16>(d, s, 16);
      copy_at<16>(d, s, n - 32);
    }
  } else if (n >= 8) {
    copy_at<8>(d, s, 0);
    copy_at<8>(d, s, n - 8);
  } else if (n >= 4) {
    copy_at<4>(d, s, 0);
    copy_at<4>(d, s, n - 4);
  } else if (n != 0) {  // 1-3 bytes: first, middle, last
    d[0] = s[0];
    d[n / 2] = s[n / 2];
    d[n - 1] = s[n - 1];
  }
}

// NONE: a message of fewer than k_header bytes is the user's own (ext.hpp, headerless): the
// plain MPI call on the caller's buffer. Otherwise header and data in one buffer, one MPI call.
// `given` as the C caller passed it. -1: take the general path (any other annotation, or anything
// to check or report), which does not depend on what was read here.
[[gnu::always_inline]] inline int fast_send_none(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                                                 MPI_Comm comm, const mdsm_annotation* given, bool sync) {
  int raw = 0;  // read as an int: a C caller may pass any (checked_annotation)
  std::memcpy(&raw, given, sizeof raw);
  std::size_t bytes = 0;
  if (raw != MDSM_NONE || fast_eligible(buf, count, type, bytes) == nullptr) return -1;
  mdsm::stats::add(mdsm::stats::counter::mpi_sends_none);
  // (MPI_PROC_NULL as dest: MPI's no-op, as for the user's own buffer.)
  if (is_headerless(bytes)) [[likely]]
    return mpi_send(buf, count, type, dest, tag, comm, sync);
  std::byte* out = t_send_buf.get(sizeof(header) + bytes);
  static constexpr header k_none{};  // the magic, annotation NONE, zeros
  std::memcpy(out, &k_none, sizeof k_none);
  std::memcpy(out + sizeof(header), buf, bytes);
  return mpi_send(out, static_cast<int>(sizeof(header) + bytes), MPI_BYTE, dest, tag, comm, sync);
}

// REQUEST, RELEASE, RELEASE_NT: the information encoded straight for the header, which takes it
// whenever it fits (a release that carries nothing the receiver lacks always does, up to ~9
// ranks); header and data in one buffer, one MPI call. -1: take the general path, decided before
// anything is encoded (encoding tells the engine the peer now knows what it carries).
int fast_send_annotated(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                        mdsm_annotation a, bool sync, const char* call) {
  std::size_t bytes = 0;
  mdsm::detail::runtime* rt = fast_eligible(buf, count, type, bytes);
  if (rt == nullptr) return -1;
  context c = enter(comm, call, rt);
  if (c.rc != MPI_SUCCESS) return c.rc;  // raised
  if (dest < 0 || dest >= c.cs->size) return -1;
  const int peer = c.cs->mdsm_rank(dest);
  if (peer < 0) return -1;
  thread_local mdsm::net::byte_writer w;
  if (const int rc = encode_cinfo(*rt, peer, a, w, comm); rc != MPI_SUCCESS) return rc;
  if (w.size() > k_inline_cinfo) {  // a second message on the side channel: the general path's
    const std::span<const std::byte> info = w.bytes();
    send_op op;  // (send counts the message)
    return send(c, op, buf, count, type, dest, tag, comm, a, sync ? send_mode::synchronous : send_mode::standard,
                &info);
  }
  mdsm::stats::add(mdsm::stats::by_annotation(mdsm::stats::counter::mpi_sends_none, static_cast<unsigned>(a)));
  std::byte* out = t_send_buf.get(sizeof(header) + bytes);
  header* h = new (out) header{};  // unused inline bytes go on the wire zeroed
  h->annot = static_cast<std::uint8_t>(a);
  h->inline_cinfo = 1;
  h->cinfo_len = static_cast<std::uint32_t>(w.size());
  std::memcpy(h->cinfo, w.bytes().data(), w.size());
  if (bytes != 0) std::memcpy(out + sizeof(header), buf, bytes);
  return mpi_send(out, static_cast<int>(sizeof(header) + bytes), MPI_BYTE, dest, tag, comm, sync);
}

// What follows a received full-header message whose header carries consistency information or
// names data on the side channel (fast_recv's cold half): the acquire, and the side channel.
// `in` holds the message, its data already copied out; `st` its status, counts the user's.
[[gnu::noinline]] int recv_rest(mdsm::detail::runtime* rt, const header& h, const std::byte* in, void* buf, int count,
                                MPI_Datatype type, std::size_t bytes, MPI_Comm comm, MPI_Status* st, int rc) {
  const context c = enter(comm, "MDSM_Recv", rt);
  if (c.rc != MPI_SUCCESS) return c.rc;
  // A release that brings nothing this rank lacks completes here, undecoded (in a message
  // protocol most do); anything else goes the general way below.
  if (h.inline_cinfo && !h.side_data && (h.annot == MDSM_RELEASE || h.annot == MDSM_RELEASE_NT)) {
    const int peer = c.cs->mdsm_rank(st->MPI_SOURCE);
    if (peer >= 0 &&
        c.rt->engine->acquire_if_current(peer, std::span<const std::byte>(in + offsetof(header, cinfo), h.cinfo_len))) {
      mdsm::stats::add(mdsm::stats::counter::mpi_acquires);
      return rc;
    }
  }
  recv_op op;
  op.c = c;
  op.h = h;
  if (h.inline_cinfo) std::memcpy(op.h.cinfo, in + offsetof(header, cinfo), h.cinfo_len);
  op.status = *st;
  op.comm = comm;
  op.buf = buf;
  op.count = count;
  op.type = type;
  op.b.bytes = bytes;
  continue_on_side(op, true);
  advance(op, true);
  *st = op.status;
  return rc == MPI_SUCCESS ? op.rc : rc;
}

// Any annotation: receives into this thread's buffer and copies out; the side channel only when
// the header names one. -1: take the general path.
[[gnu::always_inline]] inline int fast_recv(void* buf, int count, MPI_Datatype type, int source, int tag,
                                            MPI_Comm comm, MPI_Status* status) {
  std::size_t bytes = 0;
  mdsm::detail::runtime* rt = nullptr;
  if (any_stashed() || (rt = fast_eligible(buf, count, type, bytes)) == nullptr) return -1;
  std::byte* in = t_recv_buf.get(sizeof(header) + bytes);
  MPI_Status ignored;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &ignored : status;
  const int n = static_cast<int>(sizeof(header) + bytes);
  int rc = mdsm::stats::timing() ? timed_recv(in, n, MPI_BYTE, source, tag, comm, st)
                                 : PMPI_Recv(in, n, MPI_BYTE, source, tag, comm, st);
  if (rc != MPI_SUCCESS && !truncated(rc)) return rc;
  const int got = static_cast<int>(mdsm::net::received_bytes(*st));
  if (is_headerless(static_cast<std::size_t>(got))) [[likely]] {  // NONE data alone (ext.hpp)
    const std::size_t sent = static_cast<std::size_t>(got);
    const std::size_t data = std::min(sent, bytes);
    copy_small(static_cast<std::byte*>(buf), in, data);
    set_received_bytes(st, static_cast<MPI_Count>(data));
    if (sent <= bytes) return rc;
    // MPI had room for a full header: the truncation is reported here, as MPI would report it.
    PMPI_Comm_call_errhandler(comm, MPI_ERR_TRUNCATE);
    return MPI_ERR_TRUNCATE;
  }
  // The header's fixed fields first; the whole header only when it carries information.
  header h;
  std::memcpy(static_cast<void*>(&h), in, offsetof(header, cinfo));
  if (h.magic != k_magic || h.annot > MDSM_RELEASE_NT ||
      (h.inline_cinfo && h.cinfo_len > (h.side_data ? k_inline_cinfo_side : k_inline_cinfo))) [[unlikely]]
    return check_header(h, got, comm, *st);
  // Open MPI 4.1.4 reports a truncated message's whole size: what arrived is what fitted.
  const std::size_t data = std::min(static_cast<std::size_t>(got - k_header), bytes);
  if (data != 0) std::memcpy(buf, in + sizeof h, data);
  set_received_bytes(st, static_cast<MPI_Count>(data));
  if (h.cinfo_len != 0 || h.side_data) return recv_rest(rt, h, in, buf, count, type, bytes, comm, st, rc);
  return rc;
}

// MDSM_Send and MDSM_Ssend (`sync`) past fast_send_none. `given` as the C caller passed it
// (checked_annotation). Out of line: its frame (a send_op) stays off the short path.
[[gnu::noinline]] int blocking_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                    const mdsm_annotation* given, bool sync) {
  const char* call = sync ? "MDSM_Ssend" : "MDSM_Send";
  mdsm_annotation a = MDSM_NONE;
  if (const int rc = checked_annotation(given, comm, call, a); rc != MPI_SUCCESS) return rc;
  if (dest == MPI_PROC_NULL)
    return sync ? PMPI_Ssend(buf, count, type, dest, tag, comm) : PMPI_Send(buf, count, type, dest, tag, comm);
  if (a != MDSM_NONE) {
    if (const int rc = fast_send_annotated(buf, count, type, dest, tag, comm, a, sync, call); rc != -1) return rc;
  }
  context c = enter(comm, call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, mdsm::detail::cat(call, ": called from a message handler (it blocks)"));
  send_op op;
  return send(c, op, buf, count, type, dest, tag, comm, a, sync ? send_mode::synchronous : send_mode::standard);
}

// MDSM_Recv past fast_recv. Out of line: its frame (a recv_op) stays off the short path.
[[gnu::noinline]] int blocking_recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                    MPI_Status* status) {
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, "MDSM_Recv: called from a message handler (it blocks)");
  recv_op op;
  if (const int rc = prepare_recv(op, buf, count, type, source, tag, comm, "MDSM_Recv"); rc != MPI_SUCCESS) return rc;
  recv_blocking(op);
  if (status != MPI_STATUS_IGNORE) *status = op.status;
  return op.rc;
}

}  // namespace

extern "C" {

int MDSM_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation a) {
  if (const int rc = fast_send_none(buf, count, type, dest, tag, comm, &a, false); rc != -1) return rc;
  return blocking_send(buf, count, type, dest, tag, comm, &a, false);
}

int MDSM_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation a) {
  if (const int rc = fast_send_none(buf, count, type, dest, tag, comm, &a, true); rc != -1) return rc;
  return blocking_send(buf, count, type, dest, tag, comm, &a, true);
}

int MDSM_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Recv(buf, count, type, source, tag, comm, status);
  if (const int rc = fast_recv(buf, count, type, source, tag, comm, status); rc != -1) return rc;
  return blocking_recv(buf, count, type, source, tag, comm, status);
}

int MDSM_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status,
                  mdsm_annotation given) {
  mdsm_annotation a = MDSM_NONE;
  if (const int rc = checked_annotation(&given, comm, "MDSM_Sendrecv", a); rc != MPI_SUCCESS) return rc;
  context c = enter(comm, "MDSM_Sendrecv");
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, "MDSM_Sendrecv: called from a message handler (it blocks)");
  send_op out;
  if (dest != MPI_PROC_NULL) {
    if (const int rc = send(c, out, sendbuf, sendcount, sendtype, dest, sendtag, comm, a, send_mode::nonblocking);
        rc != MPI_SUCCESS)
      return rc;
  }
  const int rc = MDSM_Recv(recvbuf, recvcount, recvtype, source, recvtag, comm, status);
  const int sent = wait_send(*c.rt, out, comm);
  return rc != MPI_SUCCESS ? rc : sent;
}

}  // extern "C"
