// What every MDSM_ call shares: mdsm's MPI error codes, the per-communicator state, the
// annotation and buffer checks, and the wait that serves mdsm when blocking inside MPI is not
// allowed. The messages themselves: annotated.cpp (one message), point_to_point.cpp and probe.cpp
// (the blocking calls and probes), requests.cpp, collectives.cpp.
#include "mpi_ext/ext.hpp"

#include "api/c_guard.hpp"
#include "common/env.hpp"

#include <array>
#include <atomic>
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
  // nullptr, not MPI_COMM_NULL (a cast in Open MPI): constant-initialized, so no TLS guard.
  MPI_Comm comm = nullptr;
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
  // Probed messages never received go with the communicator (the fast paths come back).
  g_stashed.fetch_sub(static_cast<int>(cs->stash.size()), std::memory_order_release);
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

std::size_t copy_max_from_env() { return detail::env_size("MDSM_MPI_COPY_MAX", 3968); }

std::size_t side_min() {
  static const std::size_t v = detail::env_size("MDSM_MPI_SIDE_MIN", 8192);
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

namespace {
context enter_slow(MPI_Comm comm, const char* call, detail::runtime* rt);
}

context enter(MPI_Comm comm, const char* call, detail::runtime* rt) {
  // The common case in a small frame: the runtime known, the same communicator as last time.
  if (rt != nullptr && comm == t_last.comm && comm != MPI_COMM_NULL &&
      t_last.freed == g_states_freed.load(std::memory_order_acquire) && t_last.cs->session == rt->session)
    [[likely]] {
    context c;
    c.rt = rt;
    c.cs = t_last.cs;
    return c;
  }
  return enter_slow(comm, call, rt);
}

namespace {

[[gnu::noinline]] context enter_slow(MPI_Comm comm, const char* call, detail::runtime* rt) {
  context c;
  c.rt = rt;
  if (c.rt == nullptr && !mdsm::initialized()) {
    c.rc = raise(comm, errc::not_initialized, detail::cat(call, ": mdsm is not initialized; call mdsm_init first"));
    return c;
  }
  if (c.rt == nullptr) {
    try {
      c.rt = &detail::rt();  // rethrows an error a handler deferred
    } catch (const error& e) {
      c.rc = raise(comm, errc::not_initialized, e.what());
      return c;
    }
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

}  // namespace

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
  using placement_of = coherence::region_map::placement_of;
  const placement_of where = region.where(out.lo, out.span);
  if (where == placement_of::partly)
    return raise(comm, errc::buffer,
                 detail::cat(call, ": the buffer [", static_cast<const void*>(out.lo), ", +", out.span,
                             " bytes) lies partly inside the coherent region; a buffer must lie wholly inside it or "
                             "wholly outside it"));
  if (where == placement_of::outside) return MPI_SUCCESS;
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
  if (may_block(rt)) {
    stats::mpi_wait_scope waiting;
    return PMPI_Wait(req, status);
  }
  int rc = MPI_SUCCESS;
  net::no_switch_scope stay;  // MPI waits block the OS thread (docs/FIBERS.md)
  rt.progress->wait_until([&] {
    int flag = 0;
    rc = PMPI_Test(req, &flag, status);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  return rc;
}

int named_size_lookup(MPI_Datatype type) {
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

}  // namespace mdsm::mpi_ext
