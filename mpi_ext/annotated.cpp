// The send and receive of one annotated message (send_op, recv_op), which the blocking calls
// (point_to_point.cpp), requests.cpp and collectives.cpp use. Shared checks and state: context.cpp.
#include "mpi_ext/ext.hpp"

#include "api/c_guard.hpp"
#include "common/env.hpp"
#include "messages/current.hpp"
#include "net/context.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace mdsm::mpi_ext {

// ---- sending -------------------------------------------------------------------------------

namespace {

// The side channel's tags, in pairs (consistency information, data): unique per sender among its
// messages in flight. Even: the pair is (t, t + 1), both below the tag bound.
std::atomic<std::uint32_t> g_next_tag{0};
std::uint32_t side_tags() {
  static const std::uint32_t pairs = [] {
    void* v = nullptr;
    int flag = 0;
    PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
    const std::uint32_t ub = flag ? static_cast<std::uint32_t>(*static_cast<int*>(v)) : 32767u;
    return (std::min<std::uint32_t>(ub, 1u << 30) + 1u) / 2u;
  }();
  return 2u * (g_next_tag.fetch_add(1, std::memory_order_relaxed) % pairs);
}

}  // namespace

send_op::~send_op() {
  if (type != MPI_DATATYPE_NULL && own_type) PMPI_Type_free(&type);
}

int encode_cinfo(detail::runtime& rt, int peer, mdsm_annotation a, net::byte_writer& w, MPI_Comm comm) {
  w.clear();
  try {
    if (a == MDSM_REQUEST) rt.engine->encode_request(w);
    else rt.engine->encode_release(peer, a == MDSM_RELEASE, w);
  } catch (const error& e) {
    return raise(comm, errc::not_initialized, e.what());
  }
  stats::add(stats::counter::mpi_cinfo_bytes_sent, w.size());
  return MPI_SUCCESS;
}

int send(context& c, send_op& op, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         mdsm_annotation a, send_mode mode, const std::span<const std::byte>* encoded) {
  // `a` is valid: every entry point checked it (checked_annotation).
  static constexpr const char* k_call = "MDSM_Send";
  const bool real_dest = dest != MPI_PROC_NULL && dest >= 0 && dest < c.cs->size;
  const int peer = real_dest ? c.cs->mdsm_rank(dest) : -1;
  buffer b;
  if (real_dest)
    if (const int rc = describe(c, comm, buf, count, type, false, b, k_call); rc != MPI_SUCCESS) return rc;
  op.h.annot = static_cast<std::uint8_t>(a);
  stats::add(stats::by_annotation(stats::counter::mpi_sends_none, static_cast<unsigned>(a)));
  // Large data goes on the side channel (to an mdsm rank: the side channel has no other).
  const bool side = peer >= 0 && count > 0 && b.bytes >= side_min();
  bool tags = false;  // op.h.side_tag taken
  if (real_dest && a != MDSM_NONE) {
    if (peer < 0)
      return raise(comm, errc::rank, detail::cat(k_call, ": rank ", dest, " of the communicator is not in mdsm's job"));
    thread_local net::byte_writer w;
    std::span<const std::byte> info;
    if (encoded != nullptr) {
      info = *encoded;
    } else {
      if (const int rc = encode_cinfo(*c.rt, peer, a, w, comm); rc != MPI_SUCCESS) return rc;
      info = w.bytes();
    }
    op.h.cinfo_len = static_cast<std::uint32_t>(info.size());
    if (info.size() <= (side ? k_inline_cinfo_side : k_inline_cinfo)) {
      op.h.inline_cinfo = 1;
      std::memcpy(op.h.cinfo, info.data(), info.size());
    } else {
      op.cinfo.assign(info.begin(), info.end());
      op.h.side_tag = side_tags();
      tags = true;
      stats::add(stats::counter::mpi_side_messages);
      // MPI_ERRORS_RETURN on the side channel: a failure is reported on the user's communicator.
      if (const int rc = PMPI_Isend(op.cinfo.data(), static_cast<int>(op.cinfo.size()), MPI_BYTE, peer,
                                    static_cast<int>(op.h.side_tag), c.rt->mpi_ext_comm, &op.req[1]);
          rc != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(comm, rc);
        return rc;
      }
    }
  }
  int rc;
  // Blocking modes block inside MPI only while the progress thread serves this rank.
  const bool blocking = mode != send_mode::nonblocking && may_block(*c.rt);
  const bool copy = b.contiguous && b.bytes <= copy_max();
  stats::mpi_wait_scope waiting(blocking);  // a blocking send's MPI calls wait for the receiver
  if (side) {
    // The header alone on the user's communicator, posted first: the receiver must match it
    // before it can receive the data, which a blocking send then waits for. The mode applies to
    // the header: a synchronous send is complete once the receive that matched it started.
    if (!tags) op.h.side_tag = side_tags();
    op.h.side_data = 1;
    set_side_bytes(op.h, b.bytes);
    stats::add(stats::counter::mpi_side_data);
    if (mode == send_mode::synchronous)
      rc = PMPI_Issend(&op.h, k_header, MPI_BYTE, dest, tag, comm, &op.req[0]);
    else if (blocking)
      rc = PMPI_Send(&op.h, k_header, MPI_BYTE, dest, tag, comm);  // eager: returns at once
    else
      rc = PMPI_Isend(&op.h, k_header, MPI_BYTE, dest, tag, comm, &op.req[0]);
    if (rc == MPI_SUCCESS) {
      const int data_tag = static_cast<int>(op.h.side_tag + 1);
      const int sent = blocking ? PMPI_Send(buf, count, type, peer, data_tag, c.rt->mpi_ext_comm)
                                : PMPI_Isend(buf, count, type, peer, data_tag, c.rt->mpi_ext_comm, &op.req[2]);
      if (sent != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(comm, sent);
        rc = sent;
      }
    }
  } else if (copy || !real_dest || count == 0) {
    // Header and data in one buffer (per thread for blocking sends: MPI is done with it on return).
    thread_local std::vector<std::byte> scratch;
    std::vector<std::byte>& out = mode == send_mode::nonblocking ? op.packed : scratch;
    // A NONE message of a few bytes goes without a header (ext.hpp, is_headerless).
    const std::size_t head = a == MDSM_NONE && is_headerless(b.bytes) ? 0 : sizeof(header);
    out.resize(head + b.bytes);  // empty for a headerless message without data: data() may be null
    if (head != 0) std::memcpy(out.data(), &op.h, head);
    if (b.bytes != 0) std::memcpy(out.data() + head, b.lo, b.bytes);
    const int n = static_cast<int>(out.size());
    switch (mode) {
      case send_mode::standard:
        rc = blocking ? PMPI_Send(out.data(), n, MPI_BYTE, dest, tag, comm)
                      : PMPI_Isend(out.data(), n, MPI_BYTE, dest, tag, comm, &op.req[0]);
        break;
      case send_mode::synchronous:
        rc = blocking ? PMPI_Ssend(out.data(), n, MPI_BYTE, dest, tag, comm)
                      : PMPI_Issend(out.data(), n, MPI_BYTE, dest, tag, comm, &op.req[0]);
        break;
      default: rc = PMPI_Isend(out.data(), n, MPI_BYTE, dest, tag, comm, &op.req[0]); break;
    }
  } else {
    op.type = header_and(&op.h, buf, count, type, op.own_type);
    switch (mode) {
      case send_mode::standard:
        rc = blocking ? PMPI_Send(MPI_BOTTOM, 1, op.type, dest, tag, comm)
                      : PMPI_Isend(MPI_BOTTOM, 1, op.type, dest, tag, comm, &op.req[0]);
        break;
      case send_mode::synchronous:
        rc = blocking ? PMPI_Ssend(MPI_BOTTOM, 1, op.type, dest, tag, comm)
                      : PMPI_Issend(MPI_BOTTOM, 1, op.type, dest, tag, comm, &op.req[0]);
        break;
      default: rc = PMPI_Isend(MPI_BOTTOM, 1, op.type, dest, tag, comm, &op.req[0]); break;
    }
  }
  if (mode == send_mode::nonblocking) return rc;
  waiting.stop();  // wait_send counts its own
  const int waited = wait_send(*c.rt, op, comm);
  return rc != MPI_SUCCESS ? rc : waited;
}

int wait_send(const detail::runtime& rt, send_op& op, MPI_Comm comm) {
  int rc = op.req[0] == MPI_REQUEST_NULL ? MPI_SUCCESS : wait_one(rt, &op.req[0], MPI_STATUS_IGNORE);
  for (MPI_Request* side : {&op.req[1], &op.req[2]}) {
    if (*side == MPI_REQUEST_NULL) continue;
    if (const int e = wait_one(rt, side, MPI_STATUS_IGNORE); e != MPI_SUCCESS && rc == MPI_SUCCESS) {
      PMPI_Comm_call_errhandler(comm, e);
      rc = e;
    }
  }
  return rc;
}

// ---- receiving -----------------------------------------------------------------------------

recv_op::~recv_op() {
  if (stype != MPI_DATATYPE_NULL && own_stype) PMPI_Type_free(&stype);
  if (req != MPI_REQUEST_NULL) {  // abandoned half-way (an error): let MPI finish it
    PMPI_Cancel(&req);
    PMPI_Request_free(&req);
  }
}

namespace {
thread_local staging_buffer t_recv_scratch;
}

int post_recv(recv_op& op, bool block) {
  op.at = recv_op::stage::data;
  op.rc = MPI_SUCCESS;
  // A message a probe took out of MPI matched before anything still in MPI.
  if (any_stashed() && take_stashed(op) && op.msg == MPI_MESSAGE_NULL) return op.rc;  // op.h, op.status: arrived
  const bool copy = !op.b.coherent && op.b.contiguous && op.b.bytes <= copy_max();
  const bool wait_here = block && may_block(*op.c.rt);
  void* at = MPI_BOTTOM;
  int n = 1;
  MPI_Datatype t = MPI_BYTE;
  if (copy || op.count == 0) {
    // Into one buffer; copied out (a receive into coherent memory is never copied by another
    // thread: requests finished by the progress thread must not write the coherent region).
    // A blocking receive borrows this thread's buffer (MDSM_Recv gives it back).
    if (block) op.packed.swap(t_recv_scratch);
    op.packed.resize(staging_bytes(op.b.bytes));
    at = op.packed.data();
    n = static_cast<int>(sizeof(header) + op.b.bytes);
  } else {
    op.stype = header_and(&op.h, op.buf, op.count, op.type, op.own_stype);
    t = op.stype;
  }
  stats::mpi_wait_scope waiting(wait_here);
  if (op.msg != MPI_MESSAGE_NULL)
    op.rc = wait_here ? PMPI_Mrecv(at, n, t, &op.msg, &op.status) : PMPI_Imrecv(at, n, t, &op.msg, &op.req);
  else
    op.rc = wait_here ? PMPI_Recv(at, n, t, op.source, op.tag, op.comm, &op.status)
                      : PMPI_Irecv(at, n, t, op.source, op.tag, op.comm, &op.req);
  return op.rc;
}

}  // namespace mdsm::mpi_ext

namespace mdsm::mpi_ext {

// A received message is an MDSM message: raises the error if not (ext.hpp).
int check_header(const header& h, int bytes, MPI_Comm comm, const MPI_Status& st) {
  if (h.magic != k_magic || h.annot > MDSM_RELEASE_NT ||
      (h.inline_cinfo && h.cinfo_len > (h.side_data ? k_inline_cinfo_side : k_inline_cinfo)) ||
      (h.side_data && bytes != k_header))
    return raise(comm, errc::not_mdsm,
                 detail::cat("MDSM_Recv: the message from rank ", st.MPI_SOURCE, " (tag ", st.MPI_TAG,
                             ") has no MDSM header: it was not sent by an MDSM_ call"));
  return MPI_SUCCESS;
}

bool truncated(int rc) {
  int cls = rc;
  if (rc != MPI_SUCCESS) PMPI_Error_class(rc, &cls);
  return cls == MPI_ERR_TRUNCATE;
}

namespace {

// Puts `n` bytes of user data, in packed order, into the first n bytes of op's (buf, count,
// type). For a receive in place, whose message was headerless: it landed in op.h.
void place_packed(recv_op& op, const std::byte* src, std::size_t n) {
  if (op.b.contiguous) {
    std::memcpy(op.b.lo, src, n);
    return;
  }
  int size = 0;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_size(op.type, &size);
  PMPI_Type_get_extent(op.type, &lb, &extent);
  const std::size_t whole = n / static_cast<std::size_t>(size), tail = n % static_cast<std::size_t>(size);
  int pos = 0;
  if (whole != 0)
    PMPI_Unpack(src, static_cast<int>(n), &pos, op.buf, static_cast<int>(whole), op.type, op.c.rt->mpi_ext_comm);
  if (tail == 0) return;
  // A partial element (the sender's type differs): the element's other bytes keep their values.
  std::vector<std::byte> elem(static_cast<std::size_t>(size));
  void* at = static_cast<std::byte*>(op.buf) + static_cast<std::ptrdiff_t>(whole) * extent;
  int ppos = 0;
  PMPI_Pack(at, 1, op.type, elem.data(), size, &ppos, op.c.rt->mpi_ext_comm);
  std::memcpy(elem.data(), src + whole * static_cast<std::size_t>(size), tail);
  ppos = 0;
  PMPI_Unpack(elem.data(), size, &ppos, at, 1, op.type, op.c.rt->mpi_ext_comm);
}

// A headerless NONE message (ext.hpp) has arrived, at `raw` (op.packed, or op.h for a receive in
// place): its data goes to the buffer and nothing follows. MPI saw room for a full header, so a
// message longer than the buffer is truncated here, as MPI would report it.
void headerless_arrived(recv_op& op, const std::byte* raw, int bytes) {
  const std::size_t sent = static_cast<std::size_t>(bytes);
  const std::size_t data = std::min(sent, op.b.bytes);
  if (data != 0) place_packed(op, raw, data);
  op.h = header{};  // after the copy: raw may be op.h
  set_received_bytes(&op.status, static_cast<MPI_Count>(data));
  op.at = recv_op::stage::done;
  if (sent > op.b.bytes) {
    op.rc = MPI_ERR_TRUNCATE;
    PMPI_Comm_call_errhandler(op.comm, op.rc);
  }
}

// The data message has arrived: check the header, copy the data out, start the side channel.
void data_arrived(recv_op& op, bool block) {
  const int bytes = static_cast<int>(net::received_bytes(op.status));
  if (is_headerless(static_cast<std::size_t>(bytes))) {
    const std::byte* raw = op.packed.empty() ? reinterpret_cast<const std::byte*>(&op.h) : op.packed.data();
    headerless_arrived(op, raw, bytes);
    return;
  }
  if (!op.packed.empty()) std::memcpy(&op.h, op.packed.data(), sizeof(header));
  if (const int rc = check_header(op.h, bytes, op.comm, op.status); rc != MPI_SUCCESS) {
    op.rc = rc;
    op.at = recv_op::stage::done;
    return;
  }
  // Open MPI 4.1.4 reports a truncated message's whole size: what arrived is what fitted.
  const std::size_t data = std::min(static_cast<std::size_t>(bytes - k_header), op.b.bytes);
  if (!op.packed.empty() && data != 0) std::memcpy(op.b.lo, op.packed.data() + sizeof(header), data);
  set_received_bytes(&op.status, static_cast<MPI_Count>(data));
  continue_on_side(op, block);
}

// The sender's mdsm rank, or an error raised and the receive ended.
int side_peer(recv_op& op) {
  const int peer = op.c.cs->mdsm_rank(op.status.MPI_SOURCE);
  if (peer < 0) {
    op.rc = raise(op.comm, errc::rank, detail::cat("MDSM_Recv: rank ", op.status.MPI_SOURCE, " is not in mdsm's job"));
    op.at = recv_op::stage::done;
  }
  return peer;
}

// Receives the consistency information the header names, if any, from the side channel.
void start_cinfo(recv_op& op, bool block) {
  if (op.h.cinfo_len == 0) {
    op.at = recv_op::stage::done;
    return;
  }
  const int peer = side_peer(op);
  if (peer < 0) return;
  if (op.h.inline_cinfo) {  // in the header: nothing more to receive
    op.cinfo.assign(op.h.cinfo, op.h.cinfo + op.h.cinfo_len);
    op.at = recv_op::stage::cinfo;
    return;
  }
  op.cinfo.resize(op.h.cinfo_len);
  const int n = static_cast<int>(op.cinfo.size());
  const int tag = static_cast<int>(op.h.side_tag);
  int rc;
  if (block && may_block(*op.c.rt)) {
    stats::mpi_wait_scope waiting;
    rc = PMPI_Recv(op.cinfo.data(), n, MPI_BYTE, peer, tag, op.c.rt->mpi_ext_comm, MPI_STATUS_IGNORE);
  } else
    rc = PMPI_Irecv(op.cinfo.data(), n, MPI_BYTE, peer, tag, op.c.rt->mpi_ext_comm, &op.req);
  if (rc != MPI_SUCCESS) {
    op.rc = rc;
    PMPI_Comm_call_errhandler(op.comm, rc);
    op.at = recv_op::stage::done;
    return;
  }
  op.at = recv_op::stage::cinfo;
}

}  // namespace

namespace {

// Matches the user's data on the side channel (blocking, or false while it has not arrived) and
// receives it: into the user's buffer when it fits, else whole into `overflow`, to be cut to the
// buffer — Open MPI 4.1.4 writes a truncated message whole, past the end of the receive buffer,
// which in the coherent region would be memory nobody made safe. The header says how many bytes
// the data has: when they fit, the receive is posted at once; otherwise a matched probe learns
// the data's real size before anything is written (the header's figure is not trusted for an
// allocation).
bool match_side_data(recv_op& op, bool block) {
  const int peer = op.c.cs->mdsm_rank(op.status.MPI_SOURCE);  // checked by continue_on_side
  const int tag = static_cast<int>(op.h.side_tag + 1);
  const MPI_Comm side = op.c.rt->mpi_ext_comm;
  const bool wait_here = block && may_block(*op.c.rt);
  stats::mpi_wait_scope waiting(wait_here);
  if (side_bytes(op.h) <= op.b.bytes) {
    op.side_matched = true;
    op.rc = wait_here ? PMPI_Recv(op.buf, op.count, op.type, peer, tag, side, &op.side_status)
                      : PMPI_Irecv(op.buf, op.count, op.type, peer, tag, side, &op.req);
    return true;
  }
  MPI_Message m = MPI_MESSAGE_NULL;
  MPI_Status st;
  int flag = 1, rc;
  if (wait_here) {
    rc = PMPI_Mprobe(peer, tag, side, &m, &st);
  } else if (!block) {
    rc = PMPI_Improbe(peer, tag, side, &flag, &m, &st);
  } else {
    net::no_switch_scope stay;  // MPI waits block the OS thread (docs/FIBERS.md)
    op.c.rt->progress->wait_until([&] {
      rc = PMPI_Improbe(peer, tag, side, &flag, &m, &st);
      return flag != 0 || rc != MPI_SUCCESS;
    });
  }
  if (rc == MPI_SUCCESS && !flag) return false;
  op.side_matched = true;
  if (rc == MPI_SUCCESS) {
    const std::size_t bytes = net::received_bytes(st);
    void* at = op.buf;
    int n = op.count;
    MPI_Datatype t = op.type;
    if (bytes > op.b.bytes) {
      op.overflow.resize(bytes);
      at = op.overflow.data();
      n = static_cast<int>(bytes);
      t = MPI_BYTE;
    }
    rc = wait_here ? PMPI_Mrecv(at, n, t, &m, &op.side_status) : PMPI_Imrecv(at, n, t, &m, &op.req);
  }
  op.rc = rc;
  return true;
}

}  // namespace

void continue_on_side(recv_op& op, bool block) {
  if (!op.h.side_data) {
    start_cinfo(op, block);
    return;
  }
  // The user's data, with the user's own (buffer, count, datatype) from the rank that sent the
  // header: MPI matches and moves it as it would the message without mdsm.
  if (side_peer(op) < 0) return;
  op.at = recv_op::stage::side_data;
  op.side_matched = false;
  match_side_data(op, block);
}

namespace {

// The consistency information has arrived: learn it, and start the acquire of a RELEASE.
void cinfo_arrived(recv_op& op) {
  const int peer = op.c.cs->mdsm_rank(op.status.MPI_SOURCE);
  try {
    if (op.h.annot == MDSM_REQUEST) {
      op.c.rt->engine->learn_request(peer, op.cinfo);
      op.at = recv_op::stage::done;
      return;
    }
    coherence::release_info info = op.c.rt->engine->decode_release(peer, op.cinfo);
    if (op.keep_release) {
      op.release = std::move(info);
      op.at = recv_op::stage::done;
      return;
    }
    stats::add(stats::counter::mpi_acquires);
    op.acq = op.c.rt->engine->begin_acquire(std::move(info));
  } catch (const error& e) {
    op.rc = raise(op.comm, errc::not_mdsm, detail::cat("MDSM_Recv: ", e.what()));
    op.at = recv_op::stage::done;
    return;
  }
  op.at = recv_op::stage::acquire;
}

}  // namespace

int prepare_recv(recv_op& op, void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                 const char* call) {
  op.c = enter(comm, call);
  if (op.c.rc != MPI_SUCCESS) return op.c.rc;
  op.buf = buf;
  op.count = count;
  op.type = type;
  op.source = source;
  op.tag = tag;
  op.comm = comm;
  if (source == MPI_PROC_NULL) return MPI_SUCCESS;
  return describe(op.c, comm, buf, count, type, true, op.b, call);
}

void recv_blocking(recv_op& op) {
  post_recv(op, true);
  advance(op, true);
  if (!op.packed.empty()) op.packed.swap(t_recv_scratch);
}

bool advance(recv_op& op, bool block) {
  for (;;) {
    switch (op.at) {
      case recv_op::stage::done: return true;
      case recv_op::stage::data: {
        if (op.req != MPI_REQUEST_NULL) {  // nonblocking: a posted receive
          int flag = 1;
          const int rc = block ? wait_one(*op.c.rt, &op.req, &op.status) : PMPI_Test(&op.req, &flag, &op.status);
          if (!flag) return false;
          if (rc != MPI_SUCCESS) op.rc = rc;
        }
        // A truncated message still delivers its header and what fitted (MPI has reported it).
        if (op.rc != MPI_SUCCESS && !truncated(op.rc)) {
          op.at = recv_op::stage::done;
          return true;
        }
        const int rc = op.rc;
        data_arrived(op, block);
        if (op.rc == MPI_SUCCESS) op.rc = rc;
        continue;
      }
      case recv_op::stage::side_data: {
        if (!op.side_matched && !match_side_data(op, block)) return false;
        if (op.req != MPI_REQUEST_NULL) {
          int flag = 1;
          const int rc = block ? wait_one(*op.c.rt, &op.req, &op.side_status)
                               : PMPI_Test(&op.req, &flag, &op.side_status);
          if (!flag) return false;
          op.rc = rc;
        }
        if (op.rc != MPI_SUCCESS) {  // the side channel's errors return: raised where MPI would
          PMPI_Comm_call_errhandler(op.comm, op.rc);
          op.at = recv_op::stage::done;
          return true;
        }
        std::size_t got = net::received_bytes(op.side_status);
        int rc = MPI_SUCCESS;
        if (!op.overflow.empty()) {
          // Truncated: the buffer gets what fits, the status says so, the error is MPI's. The
          // whole message was received, so nothing of it is left in flight.
          int pos = 0;
          PMPI_Unpack(op.overflow.data(), static_cast<int>(op.overflow.size()), &pos, op.buf, op.count, op.type,
                      op.c.rt->mpi_ext_comm);
          std::vector<std::byte>().swap(op.overflow);
          got = op.b.bytes;
          rc = MPI_ERR_TRUNCATE;
          PMPI_Comm_call_errhandler(op.comm, rc);
        }
        set_received_bytes(&op.status, static_cast<MPI_Count>(got));
        op.rc = MPI_SUCCESS;
        start_cinfo(op, block);  // a truncated message still carries its consistency
        if (op.rc == MPI_SUCCESS) op.rc = rc;
        continue;
      }
      case recv_op::stage::cinfo: {
        if (op.req != MPI_REQUEST_NULL) {
          int flag = 1;
          const int rc =
              block ? wait_one(*op.c.rt, &op.req, MPI_STATUS_IGNORE) : PMPI_Test(&op.req, &flag, MPI_STATUS_IGNORE);
          if (!flag) return false;
          if (rc != MPI_SUCCESS) {
            if (op.rc == MPI_SUCCESS) op.rc = rc;
            PMPI_Comm_call_errhandler(op.comm, rc);
            op.at = recv_op::stage::done;
            return true;
          }
        }
        cinfo_arrived(op);
        continue;
      }
      case recv_op::stage::acquire:
        if (op.acq != nullptr) {
          if (block) {
            try {
              op.c.rt->engine->wait_acquire(op.acq);
            } catch (const error& e) {
              op.rc = raise(op.comm, errc::not_initialized, detail::cat("MDSM_Recv: ", e.what()));
            }
          } else if (!op.acq->done.load(std::memory_order_acquire)) {
            return false;
          }
        }
        op.acq.reset();
        op.at = recv_op::stage::done;
        continue;
    }
  }
}

}  // namespace mdsm::mpi_ext
