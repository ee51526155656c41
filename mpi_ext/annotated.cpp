// The annotated point-to-point calls: MDSM_Send ... MDSM_Iprobe, and the shared pieces (errors,
// communicator state, buffers, the send and receive of one message). Requests: requests.cpp.
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

namespace {

// ---- errors --------------------------------------------------------------------------------

constexpr std::array<const char*, 6> k_error_text = {
    "mdsm: not initialized (call mdsm_init before any MDSM_ call)",
    "mdsm: invalid annotation (not MDSM_NONE, MDSM_REQUEST, MDSM_RELEASE or MDSM_RELEASE_NT)",
    "mdsm: a buffer lies partly inside the coherent region, or covers unallocated coherent memory",
    "mdsm: received a message that was not sent by an MDSM_ call (or a malformed one)",
    "mdsm: intercommunicators are not supported by MDSM_ calls",
    "mdsm: a rank of the communicator is not a rank of mdsm's communicator",
};
std::array<int, 6> g_error_codes{};
std::once_flag g_errors_once;

int error_code(errc e) {
  std::call_once(g_errors_once, [] {
    for (std::size_t i = 0; i < k_error_text.size(); ++i) {
      int cls = MPI_ERR_OTHER, code = MPI_ERR_OTHER;
      if (PMPI_Add_error_class(&cls) == MPI_SUCCESS && PMPI_Add_error_code(cls, &code) == MPI_SUCCESS)
        PMPI_Add_error_string(code, const_cast<char*>(k_error_text[i]));
      else
        code = MPI_ERR_OTHER;
      g_error_codes[i] = code;
    }
  });
  return g_error_codes[static_cast<std::size_t>(e)];
}

// ---- communicator state ----------------------------------------------------------------------

int g_keyval = MPI_KEYVAL_INVALID;
std::once_flag g_keyval_once;

// Each thread remembers the last communicator it used: an attribute lookup takes a lock in Open
// MPI, on every call. A state freed anywhere invalidates every thread's entry (a freed handle can
// come back for another communicator).
std::atomic<std::uint64_t> g_states_freed{0};
struct last_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  comm_state* cs = nullptr;
  std::uint64_t freed = 0;
};
thread_local last_comm t_last;

int delete_state(MPI_Comm, int, void* value, void*) {
  g_states_freed.fetch_add(1, std::memory_order_acq_rel);
  auto* cs = static_cast<comm_state*>(value);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (cs->coll != MPI_COMM_NULL && !finalized) PMPI_Comm_free(&cs->coll);
  delete cs;
  return MPI_SUCCESS;
}

// (Re)computes how `comm`'s ranks translate to mdsm's (a local operation: no collective step).
// The collectives' duplicate is kept: it belongs to the communicator, not to the session.
void translate(MPI_Comm comm, const detail::runtime& rt, comm_state& cs) {
  MPI_Group mine, theirs;
  PMPI_Comm_group(comm, &mine);
  PMPI_Comm_group(rt.user_comm, &theirs);
  int n = 0, m = 0;
  PMPI_Group_size(mine, &n);
  PMPI_Group_size(theirs, &m);
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<std::size_t>(i)] = i;
  cs.to_mdsm.resize(static_cast<std::size_t>(n));
  PMPI_Group_translate_ranks(mine, n, ranks.data(), theirs, cs.to_mdsm.data());
  PMPI_Group_free(&mine);
  PMPI_Group_free(&theirs);
  cs.identity = true;
  for (int i = 0; i < n; ++i) {
    int& r = cs.to_mdsm[static_cast<std::size_t>(i)];
    if (r == MPI_UNDEFINED) r = -1;
    if (r != i) cs.identity = false;
  }
  cs.congruent = cs.identity && n == m;
  cs.size = n;
  cs.session = rt.session;
}

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

bool valid_annotation(mdsm_annotation a) { return a >= MDSM_NONE && a <= MDSM_RELEASE_NT; }

}  // namespace

int checked_annotation(const mdsm_annotation* given, MPI_Comm comm, const char* call, mdsm_annotation& out) {
  // A C caller may pass any int: loading it as the enum would be undefined behaviour in C++, so
  // its bytes are read as an int and checked before they become an annotation.
  // (By address: even copying the parameter into this function's would load it as the enum.)
  int raw = 0;
  static_assert(sizeof *given == sizeof raw);
  std::memcpy(&raw, given, sizeof raw);
  if (raw < MDSM_NONE || raw > MDSM_RELEASE_NT)
    return raise(comm, errc::annotation,
                 detail::cat(call, ": annotation ", raw,
                             " is not MDSM_NONE, MDSM_REQUEST, MDSM_RELEASE or MDSM_RELEASE_NT"));
  out = static_cast<mdsm_annotation>(raw);
  return MPI_SUCCESS;
}

namespace {

}  // namespace

std::size_t copy_max() {
  static const std::size_t v = detail::env_size("MDSM_MPI_COPY_MAX", 16384);
  return v;
}

int raise(MPI_Comm comm, errc e, const std::string& message) {
  capi::last_error() = message;
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down) {
    std::fprintf(stderr, "%s\n", message.c_str());
    return MPI_ERR_OTHER;
  }
  const int code = error_code(e);
  PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
  return code;
}

context enter(MPI_Comm comm, const char* call) {
  context c;
  if (!mdsm::initialized()) {
    c.rc = raise(comm, errc::not_initialized, detail::cat(call, ": mdsm is not initialized; call mdsm_init first"));
    return c;
  }
  try {
    c.rt = &detail::rt();  // rethrows an error a handler deferred
  } catch (const error& e) {
    c.rc = raise(comm, errc::not_initialized, e.what());
    return c;
  }
  if (comm == MPI_COMM_NULL) {
    c.rc = PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_COMM);
    c.rc = MPI_ERR_COMM;
    return c;
  }
  const std::uint64_t freed = g_states_freed.load(std::memory_order_acquire);
  if (t_last.comm == comm && t_last.freed == freed && t_last.cs->session == c.rt->session) [[likely]] {
    c.cs = t_last.cs;
    return c;
  }
  std::call_once(g_keyval_once, [] { PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &g_keyval, nullptr); });
  void* v = nullptr;
  int flag = 0;
  PMPI_Comm_get_attr(comm, g_keyval, &v, &flag);
  if (flag) {
    c.cs = static_cast<comm_state*>(v);
    // Made under an earlier mdsm session: its ranks may translate to another communicator's.
    if (c.cs->session != c.rt->session) translate(comm, *c.rt, *c.cs);
    t_last = last_comm{comm, c.cs, freed};
    return c;
  }
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) {
    c.rc = raise(comm, errc::intercomm, detail::cat(call, ": an intercommunicator; MDSM_ calls take intracommunicators"));
    return c;
  }
  c.cs = new comm_state;
  translate(comm, *c.rt, *c.cs);
  PMPI_Comm_set_attr(comm, g_keyval, c.cs);
  t_last = last_comm{comm, c.cs, g_states_freed.load(std::memory_order_acquire)};
  return c;
}

int describe(context& c, MPI_Comm comm, const void* buf, int count, MPI_Datatype type, bool write, buffer& out,
             const char* call) {
  out = buffer{};
  if (count <= 0 || type == MPI_DATATYPE_NULL) return MPI_SUCCESS;  // MPI reports a bad count or type
  MPI_Count size = named_size(type), lb = 0, extent = size, true_lb = 0, true_extent = size;
  if (size == 0) {  // a derived type (or a rare predefined one): ask MPI
    if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS || size <= 0) return MPI_SUCCESS;
    PMPI_Type_get_extent_x(type, &lb, &extent);
    PMPI_Type_get_true_extent_x(type, &true_lb, &true_extent);
  }
  out.lo = const_cast<std::byte*>(static_cast<const std::byte*>(buf)) + true_lb;
  out.span = static_cast<std::size_t>((count - 1) * extent + true_extent);
  out.bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(size);
  out.contiguous = size == true_extent && (count == 1 || extent == size);
  const coherence::region_map& region = c.rt->engine->region();
  const bool first_in = region.contains(out.lo);
  const bool last_in = region.contains(out.lo + out.span - 1);
  const bool covers = out.lo < region.app_base() && out.lo + out.span > region.app_base();
  if (first_in != last_in || covers)
    return raise(comm, errc::buffer,
                 detail::cat(call, ": the buffer [", static_cast<const void*>(out.lo), ", +", out.span,
                             " bytes) lies partly inside the coherent region; a buffer must lie wholly inside it or "
                             "wholly outside it"));
  if (!first_in) return MPI_SUCCESS;
  out.coherent = true;
  bool ok = false;
  try {
    ok = c.rt->engine->prepare_access(out.lo, out.span, write);
  } catch (const error& e) {
    return raise(comm, errc::buffer, detail::cat(call, ": ", e.what()));
  }
  if (!ok)
    return raise(comm, errc::buffer,
                 detail::cat(call, ": the buffer [", static_cast<const void*>(out.lo), ", +", out.span,
                             " bytes) covers coherent memory that is not allocated"));
  return MPI_SUCCESS;
}

int wait_one(const detail::runtime& rt, MPI_Request* req, MPI_Status* status) {
  if (may_block(rt)) return PMPI_Wait(req, status);
  int rc = MPI_SUCCESS;
  rt.progress->wait_until([&] {
    int flag = 0;
    rc = PMPI_Test(req, &flag, status);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  return rc;
}

void set_received_bytes(MPI_Status* status, MPI_Count bytes) {
  // Open MPI keeps a status's count in bytes: counts and elements for any datatype follow from
  // it exactly as for the data message itself (test/mpi_ext checks derived types).
#if defined(OPEN_MPI) && OPEN_MPI
  status->_ucount = static_cast<std::size_t>(bytes);
#else
  PMPI_Status_set_elements_x(status, MPI_BYTE, bytes);
#endif
}

int named_size(MPI_Datatype type) {
  if (type == MPI_BYTE) return 1;  // most messages, without the table's guard
  struct named {
    MPI_Datatype type;
    int size;
  };
  // The common first: a linear search stops early for the types most messages use.
  static const std::vector<named> table = [] {
    const MPI_Datatype types[] = {MPI_BYTE, MPI_INT, MPI_DOUBLE, MPI_CHAR, MPI_LONG, MPI_LONG_LONG, MPI_FLOAT,
                                  MPI_UNSIGNED, MPI_UNSIGNED_LONG, MPI_UNSIGNED_LONG_LONG, MPI_UINT64_T, MPI_INT64_T,
                                  MPI_UINT32_T, MPI_INT32_T, MPI_UNSIGNED_CHAR, MPI_SIGNED_CHAR, MPI_SHORT,
                                  MPI_UNSIGNED_SHORT, MPI_UINT8_T, MPI_INT8_T, MPI_UINT16_T, MPI_INT16_T,
                                  MPI_LONG_DOUBLE, MPI_C_BOOL, MPI_AINT};
    std::vector<named> t;
    for (MPI_Datatype d : types) {
      int size = 0;
      PMPI_Type_size(d, &size);
      t.push_back(named{d, size});
    }
    return t;
  }();
  for (const named& n : table)
    if (n.type == type) return n.size;
  return 0;
}

// ---- sending -------------------------------------------------------------------------------

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
  static constexpr const char* k_call = "MDSM_Send";
  if (!valid_annotation(a))
    return raise(comm, errc::annotation, detail::cat(k_call, ": annotation ", static_cast<int>(a), " is not valid"));
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

int do_send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation a,
            send_mode mode, const char* call) {
  context c = enter(comm, call);
  if (c.rc != MPI_SUCCESS) return c.rc;
  if (mdsm::net::current_handler() != nullptr)
    return raise(comm, errc::not_initialized, mdsm::detail::cat(call, ": called from a message handler (it blocks)"));
  send_op op;
  return send(c, op, buf, count, type, dest, tag, comm, a, mode);
}

}  // namespace

extern "C" {

int MDSM_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, mdsm_annotation given) {
  mdsm_annotation a = MDSM_NONE;
  if (const int rc = checked_annotation(&given, comm, "MDSM_Send", a); rc != MPI_SUCCESS) return rc;
  if (dest == MPI_PROC_NULL) return PMPI_Send(buf, count, type, dest, tag, comm);
  if (a == MDSM_NONE)
    if (const int rc = fast_send_none(buf, count, type, dest, tag, comm, false); rc != -1) return rc;
  return do_send(buf, count, type, dest, tag, comm, a, send_mode::standard, "MDSM_Send");
}

int MDSM_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               mdsm_annotation given) {
  mdsm_annotation a = MDSM_NONE;
  if (const int rc = checked_annotation(&given, comm, "MDSM_Ssend", a); rc != MPI_SUCCESS) return rc;
  if (dest == MPI_PROC_NULL) return PMPI_Ssend(buf, count, type, dest, tag, comm);
  if (a == MDSM_NONE)
    if (const int rc = fast_send_none(buf, count, type, dest, tag, comm, true); rc != -1) return rc;
  return do_send(buf, count, type, dest, tag, comm, a, send_mode::synchronous, "MDSM_Ssend");
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
