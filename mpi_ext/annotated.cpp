// The annotated point-to-point calls, MDSM_Send ... MDSM_Iprobe, and the send and receive of one
// message that requests.cpp and collectives.cpp use too. Shared checks and state: context.cpp.
#include "mpi_ext/ext.hpp"

#include "api/c_guard.hpp"
#include "common/env.hpp"
#include "messages/current.hpp"
#include "net/context.hpp"
#include "stats/counters.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace mdsm::mpi_ext {

// ---- sending -------------------------------------------------------------------------------

namespace {

// The side channel's tags: unique per sender among its messages in flight.
std::atomic<std::uint32_t> g_next_tag{0};
int side_tag() {
  static const std::uint32_t modulus = [] {
    void* v = nullptr;
    int flag = 0;
    PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag);
    const std::uint32_t ub = flag ? static_cast<std::uint32_t>(*static_cast<int*>(v)) : 32767u;
    return std::min<std::uint32_t>(ub, 1u << 30) + 1u;
  }();
  return static_cast<int>(g_next_tag.fetch_add(1, std::memory_order_relaxed) % modulus);
}

}  // namespace

send_op::~send_op() {
  if (type != MPI_DATATYPE_NULL) PMPI_Type_free(&type);
}

namespace {

// {header, user buffer} as one datatype at absolute addresses (MPI_BOTTOM).
MPI_Datatype header_and(const header* h, const void* buf, int count, MPI_Datatype type) {
  int lengths[2] = {k_header, count};
  MPI_Aint where[2];
  PMPI_Get_address(h, &where[0]);
  PMPI_Get_address(buf, &where[1]);
  MPI_Datatype types[2] = {MPI_BYTE, type};
  MPI_Datatype t;
  PMPI_Type_create_struct(2, lengths, where, types, &t);
  PMPI_Type_commit(&t);
  return t;
}

}  // namespace

int send(context& c, send_op& op, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         mdsm_annotation a, send_mode mode) {
  // `a` is valid: every entry point checked it (checked_annotation).
  static constexpr const char* k_call = "MDSM_Send";
  const bool real_dest = dest != MPI_PROC_NULL && dest >= 0 && dest < c.cs->size;
  buffer b;
  if (real_dest)
    if (const int rc = describe(c, comm, buf, count, type, false, b, k_call); rc != MPI_SUCCESS) return rc;
  op.h.annot = static_cast<std::uint8_t>(a);
  stats::add(stats::by_annotation(stats::counter::mpi_sends_none, static_cast<unsigned>(a)));
  if (real_dest && a != MDSM_NONE) {
    const int peer = c.cs->mdsm_rank(dest);
    if (peer < 0)
      return raise(comm, errc::rank, detail::cat(k_call, ": rank ", dest, " of the communicator is not in mdsm's job"));
    thread_local net::byte_writer w;
    w.clear();
    try {
      if (a == MDSM_REQUEST) c.rt->engine->encode_request(w);
      else c.rt->engine->encode_release(peer, a == MDSM_RELEASE, w);
    } catch (const error& e) {
      return raise(comm, errc::not_initialized, e.what());
    }
    op.h.cinfo_len = static_cast<std::uint32_t>(w.size());
    stats::add(stats::counter::mpi_cinfo_bytes_sent, w.size());
    if (w.size() <= k_inline_cinfo) {
      op.h.inline_cinfo = 1;
      std::memcpy(op.h.cinfo, w.bytes().data(), w.size());
    } else {
      op.cinfo.assign(w.bytes().begin(), w.bytes().end());
      op.h.cinfo_tag = static_cast<std::uint32_t>(side_tag());
      stats::add(stats::counter::mpi_side_messages);
      // MPI_ERRORS_RETURN on the side channel: a failure is reported on the user's communicator.
      if (const int rc = PMPI_Isend(op.cinfo.data(), static_cast<int>(op.cinfo.size()), MPI_BYTE, peer,
                                    static_cast<int>(op.h.cinfo_tag), c.rt->mpi_ext_comm, &op.req[1]);
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
  if (copy || !real_dest || count == 0) {
    // Header and data in one buffer (per thread for blocking sends: MPI is done with it on return).
    thread_local std::vector<std::byte> scratch;
    std::vector<std::byte>& out = mode == send_mode::nonblocking ? op.packed : scratch;
    out.resize(sizeof(header) + b.bytes);
    std::memcpy(out.data(), &op.h, sizeof(header));
    if (b.bytes != 0) std::memcpy(out.data() + sizeof(header), b.lo, b.bytes);
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
    op.type = header_and(&op.h, buf, count, type);
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
  if (mode != send_mode::nonblocking && rc == MPI_SUCCESS && op.req[0] != MPI_REQUEST_NULL)
    rc = wait_one(*c.rt, &op.req[0], MPI_STATUS_IGNORE);
  if (mode != send_mode::nonblocking && op.req[1] != MPI_REQUEST_NULL) {
    const int side = wait_one(*c.rt, &op.req[1], MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && side != MPI_SUCCESS) {
      PMPI_Comm_call_errhandler(comm, side);
      rc = side;
    }
  }
  return rc;
}

// ---- receiving -----------------------------------------------------------------------------

recv_op::~recv_op() {
  if (stype != MPI_DATATYPE_NULL) PMPI_Type_free(&stype);
  if (req != MPI_REQUEST_NULL) {  // abandoned half-way (an error): let MPI finish it
    PMPI_Cancel(&req);
    PMPI_Request_free(&req);
  }
}

namespace {
thread_local std::vector<std::byte> t_recv_scratch;
}

int post_recv(recv_op& op, bool block) {
  op.at = recv_op::stage::data;
  const bool copy = !op.b.coherent && op.b.contiguous && op.b.bytes <= copy_max();
  if (copy || op.count == 0) {
    // Into one buffer; copied out (a receive into coherent memory is never copied by another
    // thread: requests finished by the progress thread must not write the coherent region).
    // A blocking receive borrows this thread's buffer (MDSM_Recv gives it back).
    if (block) op.packed.swap(t_recv_scratch);
    op.packed.resize(sizeof(header) + op.b.bytes);
    const int n = static_cast<int>(op.packed.size());
    if (block && may_block(*op.c.rt))
      op.rc = PMPI_Recv(op.packed.data(), n, MPI_BYTE, op.source, op.tag, op.comm, &op.status);
    else
      op.rc = PMPI_Irecv(op.packed.data(), n, MPI_BYTE, op.source, op.tag, op.comm, &op.req);
  } else {
    op.stype = header_and(&op.h, op.buf, op.count, op.type);
    if (block && may_block(*op.c.rt))
      op.rc = PMPI_Recv(MPI_BOTTOM, 1, op.stype, op.source, op.tag, op.comm, &op.status);
    else
      op.rc = PMPI_Irecv(MPI_BOTTOM, 1, op.stype, op.source, op.tag, op.comm, &op.req);
  }
  return op.rc;
}

}  // namespace mdsm::mpi_ext

namespace mdsm::mpi_ext {

namespace {

// A received message is an MDSM message: raises the error if not.
int check_header(const header& h, int bytes, MPI_Comm comm, const MPI_Status& st) {
  if (bytes < k_header)
    return raise(comm, errc::not_mdsm,
                 detail::cat("MDSM_Recv: the message from rank ", st.MPI_SOURCE, " (tag ", st.MPI_TAG, ") has ", bytes,
                             " bytes, fewer than an MDSM header: it was not sent by an MDSM_ call"));
  if (h.magic != k_magic || h.annot > MDSM_RELEASE_NT || (h.inline_cinfo && h.cinfo_len > k_inline_cinfo))
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

// The data message has arrived: check the header, copy the data out, start the side channel.
void data_arrived(recv_op& op, bool block) {
  const int bytes = static_cast<int>(net::received_bytes(op.status));
  if (bytes >= k_header && !op.packed.empty()) std::memcpy(&op.h, op.packed.data(), sizeof(header));
  if (const int rc = check_header(op.h, bytes, op.comm, op.status); rc != MPI_SUCCESS) {
    op.rc = rc;
    op.at = recv_op::stage::done;
    return;
  }
  const std::size_t data = static_cast<std::size_t>(bytes - k_header);
  if (!op.packed.empty() && data != 0) std::memcpy(op.b.lo, op.packed.data() + sizeof(header), data);
  set_received_bytes(&op.status, static_cast<MPI_Count>(data));
  start_side_channel(op, block);
}

}  // namespace

void start_side_channel(recv_op& op, bool block) {
  if (op.h.cinfo_len == 0) {
    op.at = recv_op::stage::done;
    return;
  }
  const int peer = op.c.cs->mdsm_rank(op.status.MPI_SOURCE);
  if (peer < 0) {
    op.rc = raise(op.comm, errc::rank, detail::cat("MDSM_Recv: rank ", op.status.MPI_SOURCE, " is not in mdsm's job"));
    op.at = recv_op::stage::done;
    return;
  }
  if (op.h.inline_cinfo) {  // in the header: nothing more to receive
    op.cinfo.assign(op.h.cinfo, op.h.cinfo + op.h.cinfo_len);
    op.at = recv_op::stage::cinfo;
    return;
  }
  op.cinfo.resize(op.h.cinfo_len);
  const int n = static_cast<int>(op.cinfo.size());
  const int tag = static_cast<int>(op.h.cinfo_tag);
  int rc;
  if (block && may_block(*op.c.rt))
    rc = PMPI_Recv(op.cinfo.data(), n, MPI_BYTE, peer, tag, op.c.rt->mpi_ext_comm, MPI_STATUS_IGNORE);
  else
    rc = PMPI_Irecv(op.cinfo.data(), n, MPI_BYTE, peer, tag, op.c.rt->mpi_ext_comm, &op.req);
  if (rc != MPI_SUCCESS) {
    op.rc = rc;
    PMPI_Comm_call_errhandler(op.comm, rc);
    op.at = recv_op::stage::done;
    return;
  }
  op.at = recv_op::stage::cinfo;
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

// ---- the C API -----------------------------------------------------------------------------

using namespace mdsm::mpi_ext;

namespace {

// A per-thread buffer that only grows.
struct scratch_buffer {
  std::unique_ptr<std::byte[]> p;
  std::size_t capacity = 0;
  std::byte* get(std::size_t n) {
    if (n > capacity) {
      p = std::make_unique<std::byte[]>(n);
      capacity = n;
    }
    return p.get();
  }
};
thread_local scratch_buffer t_send_buf, t_recv_buf;

// The common case, in few instructions: a predefined datatype, data small enough to copy, the
// buffer outside the coherent region, mdsm up and not in a handler. nullptr: take the general
// path (which also reports whatever is wrong).
mdsm::detail::runtime* fast_eligible(const void* buf, int count, MPI_Datatype type, std::size_t& bytes) {
  const int size = named_size(type);
  if (size == 0 || count < 0 || mdsm::net::current_handler() != nullptr) return nullptr;
  bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(size);
  if (bytes > copy_max()) return nullptr;
  mdsm::detail::runtime* rt = nullptr;
  try {
    rt = &mdsm::detail::rt();
  } catch (const mdsm::error&) {  // not initialized, or a handler's error to report
    return nullptr;
  }
  if (!may_block(*rt)) return nullptr;
  const auto& region = rt->engine->region();
  const std::byte* lo = static_cast<const std::byte*>(buf);
  if (bytes != 0 && (region.contains(lo) || region.contains(lo + bytes - 1) ||
                     (lo < region.app_base() && lo + bytes > region.app_base())))
    return nullptr;
  return rt;
}

// NONE: header and data in one buffer, one MPI call. -1: take the general path.
int fast_send_none(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync) {
  std::size_t bytes = 0;
  if (fast_eligible(buf, count, type, bytes) == nullptr) return -1;
  std::byte* out = t_send_buf.get(sizeof(header) + bytes);
  // A NONE header: the magic, then zeros (no annotation, no consistency information).
  std::memset(out, 0, sizeof(header));
  std::memcpy(out, &k_magic, sizeof k_magic);
  if (bytes != 0) std::memcpy(out + sizeof(header), buf, bytes);
  mdsm::stats::add(mdsm::stats::counter::mpi_sends_none);
  const int n = static_cast<int>(sizeof(header) + bytes);
  return sync ? PMPI_Ssend(out, n, MPI_BYTE, dest, tag, comm) : PMPI_Send(out, n, MPI_BYTE, dest, tag, comm);
}

// Any annotation: receives into this thread's buffer and copies out; the side channel only when
// the header names one. -1: take the general path.
int fast_recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) {
  std::size_t bytes = 0;
  if (fast_eligible(buf, count, type, bytes) == nullptr) return -1;
  std::byte* in = t_recv_buf.get(sizeof(header) + bytes);
  MPI_Status st;
  int rc = PMPI_Recv(in, static_cast<int>(sizeof(header) + bytes), MPI_BYTE, source, tag, comm, &st);
  if (rc != MPI_SUCCESS && !truncated(rc)) {
    if (status != MPI_STATUS_IGNORE) *status = st;
    return rc;
  }
  const int got = static_cast<int>(mdsm::net::received_bytes(st));
  // The header's fixed fields first; the whole header only when it carries information.
  header h;
  if (got >= k_header) std::memcpy(static_cast<void*>(&h), in, offsetof(header, cinfo));
  if (got < k_header || h.magic != k_magic || h.annot > MDSM_RELEASE_NT ||
      (h.inline_cinfo && h.cinfo_len > k_inline_cinfo)) [[unlikely]]
    return check_header(h, got, comm, st);
  if (h.inline_cinfo) std::memcpy(h.cinfo, in + offsetof(header, cinfo), h.cinfo_len);
  const std::size_t data = static_cast<std::size_t>(got - k_header);
  if (data != 0) std::memcpy(buf, in + sizeof h, data);
  set_received_bytes(&st, static_cast<MPI_Count>(data));
  if (h.cinfo_len != 0) {
    recv_op op;
    op.c = enter(comm, "MDSM_Recv");
    if (op.c.rc != MPI_SUCCESS) return op.c.rc;
    op.h = h;
    op.status = st;
    op.comm = comm;
    start_side_channel(op, true);
    advance(op, true);
    if (rc == MPI_SUCCESS) rc = op.rc;
  }
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

// MDSM_Send and MDSM_Ssend (`sync`). `given` as the C caller passed it (checked_annotation).
int blocking_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                  const mdsm_annotation* given, bool sync) {
  const char* call = sync ? "MDSM_Ssend" : "MDSM_Send";
  mdsm_annotation a = MDSM_NONE;
  if (const int rc = checked_annotation(given, comm, call, a); rc != MPI_SUCCESS) return rc;
  if (dest == MPI_PROC_NULL)
    return sync ? PMPI_Ssend(buf, count, type, dest, tag, comm) : PMPI_Send(buf, count, type, dest, tag, comm);
  if (a == MDSM_NONE)
    if (const int rc = fast_send_none(buf, count, type, dest, tag, comm, sync); rc != -1) return rc;
  context c = enter(comm, call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, mdsm::detail::cat(call, ": called from a message handler (it blocks)"));
  send_op op;
  return send(c, op, buf, count, type, dest, tag, comm, a, sync ? send_mode::synchronous : send_mode::standard);
}

}  // namespace

extern "C" {

int MDSM_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation a) {
  return blocking_send(buf, count, type, dest, tag, comm, &a, false);
}

int MDSM_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation a) {
  return blocking_send(buf, count, type, dest, tag, comm, &a, true);
}

int MDSM_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (source == MPI_PROC_NULL) return PMPI_Recv(buf, count, type, source, tag, comm, status);
  if (const int rc = fast_recv(buf, count, type, source, tag, comm, status); rc != -1) return rc;
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, "MDSM_Recv: called from a message handler (it blocks)");
  recv_op op;
  if (const int rc = prepare_recv(op, buf, count, type, source, tag, comm, "MDSM_Recv"); rc != MPI_SUCCESS) return rc;
  recv_blocking(op);
  if (status != MPI_STATUS_IGNORE) *status = op.status;
  return op.rc;
}

int MDSM_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  MPI_Status st;
  const int rc = PMPI_Probe(source, tag, comm, &st);
  if (rc == MPI_SUCCESS && source != MPI_PROC_NULL) {
    int bytes = 0;
    PMPI_Get_count(&st, MPI_BYTE, &bytes);
    set_received_bytes(&st, bytes >= k_header ? bytes - k_header : 0);
  }
  if (status != MPI_STATUS_IGNORE) *status = st;
  return rc;
}

int MDSM_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  MPI_Status st;
  const int rc = PMPI_Iprobe(source, tag, comm, flag, &st);
  if (rc == MPI_SUCCESS && *flag && source != MPI_PROC_NULL) {
    int bytes = 0;
    PMPI_Get_count(&st, MPI_BYTE, &bytes);
    set_received_bytes(&st, bytes >= k_header ? bytes - k_header : 0);
  }
  if (status != MPI_STATUS_IGNORE && *flag) *status = st;
  return rc;
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
  int rc = MDSM_Recv(recvbuf, recvcount, recvtype, source, recvtag, comm, status);
  int sent = wait_one(*c.rt, &out.req[0], MPI_STATUS_IGNORE);
  if (const int side = wait_one(*c.rt, &out.req[1], MPI_STATUS_IGNORE); sent == MPI_SUCCESS) sent = side;
  return rc != MPI_SUCCESS ? rc : sent;
}

}  // extern "C"
