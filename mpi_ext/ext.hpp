// mpi_ext internals shared by context.cpp (checks, communicator state, waits), the point-to-point
// calls (annotated.cpp), requests.cpp and the collectives
// (collectives.cpp). The wire format and the protocol are described in docs/MPI.md.
//
// An MDSM message is one MPI message on the user's communicator: a 64-byte header, then the
// user's data, so that matching, wildcards, ordering and truncation are MPI's own. The
// consistency information of a REQUEST or RELEASE rides in the header when it fits (48 bytes);
// otherwise it travels as a second message on mdsm's side channel (runtime::mpi_ext_comm, ranks
// are mdsm ranks), sent first, under a tag unique to the sender that the header names; the
// receiver takes it after the data message has matched.
//
// All MPI calls here use the PMPI_ names: libmdsm_safe replaces the MPI_ ones with these calls.
#pragma once

#include "api/runtime.hpp"

#include <mdsm/mdsm_mpi.h>

#include <cstdint>
#include <optional>
#include <string>

namespace mdsm::mpi_ext {

inline constexpr std::uint32_t k_magic = 0x4d44534du;  // "MDSM"

// Consistency information up to this size rides in the header itself: a RELEASE or REQUEST that
// carries no new intervals (or a few notices) costs one MPI message, not two. The header is one
// cache line either way, so NONE messages pay 64 bytes where MPI's own header is about as large.
inline constexpr std::size_t k_inline_cinfo = 48;

struct header {
  std::uint32_t magic = k_magic;
  std::uint8_t annot = 0;
  std::uint8_t inline_cinfo = 0;  // 1: the consistency information is `cinfo` below
  std::uint8_t reserved[2] = {};
  std::uint32_t cinfo_len = 0;  // bytes of consistency information; 0: none
  std::uint32_t cinfo_tag = 0;  // its tag on the side channel, when not inline
  std::byte cinfo[k_inline_cinfo];  // cinfo_len bytes valid when inline_cinfo (never read beyond)
};
static_assert(sizeof(header) == 64);
inline constexpr int k_header = static_cast<int>(sizeof(header));

// Up to this many bytes of contiguous user data are copied behind the header into one buffer
// (sender) or received into one and copied out (receiver); above it, and for non-contiguous
// datatypes, a struct datatype {header, user buffer} lets MPI move the data itself, without an
// extra copy. Measured in docs/MPI.md; MDSM_MPI_COPY_MAX overrides it.
std::size_t copy_max();

// Per-communicator state, cached in an attribute of the user's communicator.
struct comm_state {
  bool identity = false;     // comm rank r is mdsm rank r
  std::vector<int> to_mdsm;  // otherwise: comm rank -> mdsm rank (-1: not an mdsm rank)
  bool congruent = false;    // the same group, in the same order, as mdsm's communicator
  int size = 0;              // of the communicator
  MPI_Comm coll = MPI_COMM_NULL;  // collectives' own duplicate, made by the first collective
  std::uint64_t session = 0;  // the mdsm session whose ranks to_mdsm translates to
  int mdsm_rank(int r) const { return identity ? r : to_mdsm[static_cast<std::size_t>(r)]; }
};

// The runtime and the state of `comm`, or an error code (already reported through the
// communicator's error handler) in `rc`.
struct context {
  detail::runtime* rt = nullptr;
  comm_state* cs = nullptr;
  int rc = MPI_SUCCESS;
};
context enter(MPI_Comm comm, const char* call);

// Reports an mdsm error on `comm` the MPI way: the thread's last-error message is set, the
// communicator's error handler is invoked with one of mdsm's MPI error codes, and the code is
// returned (under MPI_ERRORS_ARE_FATAL the handler ends the job).
enum class errc { not_initialized, annotation, buffer, not_mdsm, intercomm, rank };
int raise(MPI_Comm comm, errc e, const std::string& message);

// The bytes a (buf, count, datatype) buffer spans, and whether they are one contiguous block.
struct buffer {
  std::byte* lo = nullptr;  // first byte (buf + true lower bound)
  std::size_t span = 0;     // bytes from lo to the last byte
  std::size_t bytes = 0;    // bytes of data (count x type size)
  bool contiguous = false;  // the data is exactly [lo, lo + bytes)
  bool coherent = false;    // the span lies in the coherent region
};
// Describes the buffer and, when it lies in the coherent region, makes it safe for MPI: valid
// (a send buffer) or writable (a receive buffer). Returns MPI_SUCCESS or a raised error.
int describe(context& c, MPI_Comm comm, const void* buf, int count, MPI_Datatype type, bool write, buffer& out,
             const char* call);

// An annotation as a C caller passed it (any int, read through its address): checked, then stored in `out`. Returns
// MPI_SUCCESS or the raised error. Every MDSM_ entry point taking an annotation calls it first.
int checked_annotation(const mdsm_annotation* given, MPI_Comm comm, const char* call, mdsm_annotation& out);

// Sends one annotated message: the side-channel message first, then the data message.
enum class send_mode { standard, synchronous, nonblocking };
struct send_op {
  header h{};  // zeroed: unused inline bytes go on the wire
  std::vector<std::byte> cinfo;           // consistency information (h.cinfo_len bytes)
  std::vector<std::byte> packed;          // header + data, when copied (nonblocking only)
  MPI_Datatype type = MPI_DATATYPE_NULL;  // {header, user buffer}, when not copied
  MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // data, side channel
  send_op() = default;
  send_op(const send_op&) = delete;
  send_op& operator=(const send_op&) = delete;
  ~send_op();
};
// Blocking modes return once the send is complete; nonblocking leaves op.req to complete.
// Returns an MPI error code (raised on comm).
int send(context& c, send_op& op, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         mdsm_annotation a, send_mode mode);

// Receives one annotated message, in stages, blocking or not (requests advance it piecemeal).
struct recv_op {
  enum class stage { data, cinfo, acquire, done };
  stage at = stage::done;
  header h;
  context c;
  void* buf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int source = MPI_ANY_SOURCE;
  int tag = MPI_ANY_TAG;
  MPI_Comm comm = MPI_COMM_NULL;
  buffer b;
  std::vector<std::byte> packed;          // header + data, when copied
  MPI_Datatype stype = MPI_DATATYPE_NULL;  // {header, user buffer}, when not copied
  MPI_Request req = MPI_REQUEST_NULL;      // the data message, then the side-channel one
  std::vector<std::byte> cinfo;
  MPI_Status status{};  // the data message's, counts made the user's once it arrived
  int rc = MPI_SUCCESS;
  coherence::acquire_ptr acq;
  // Set by the caller: a RELEASE's consistency information is decoded into `release` and not
  // acquired (a barrier's root acquires all arrivals as one group).
  bool keep_release = false;
  std::optional<coherence::release_info> release;
  recv_op() = default;
  recv_op(const recv_op&) = delete;
  recv_op& operator=(const recv_op&) = delete;
  ~recv_op();
};
// Fills in a receive and makes its buffer safe (op.c from enter()). Returns an MPI error code.
int prepare_recv(recv_op& op, void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                 const char* call);
// Posts the receive (blocking: completes it). Returns an MPI error code.
int post_recv(recv_op& op, bool block);
// The data message has arrived (op.h, op.status set): receives the consistency information
// from the side channel, if the header names any (blocking, or posted).
void start_side_channel(recv_op& op, bool block);
// post_recv and advance to the end, on the calling thread.
void recv_blocking(recv_op& op);
// Moves the receive on; with `block` to the end. True once done (op.rc tells how it ended).
bool advance(recv_op& op, bool block);

// Blocking inside MPI is allowed only while the progress thread serves this rank (it runs and is
// not paused): otherwise a rank blocked in MPI would answer no page or diff request, and a peer
// faulting before it sends the awaited message would wait forever.
inline bool may_block(const detail::runtime& rt) { return rt.progress->serving(); }
// Waits for one MPI request: inside MPI when may_block, else by testing it from
// net::progress::wait_until, which delivers mdsm's frames meanwhile. Returns MPI's code.
int wait_one(const detail::runtime& rt, MPI_Request* req, MPI_Status* status);

// The size of a predefined datatype most messages use (contiguous, lower bound 0, extent =
// size), found without asking MPI; 0 for any other datatype.
int named_size(MPI_Datatype type);

// Sets what MPI_Get_count / MPI_Get_elements report for `status`: `bytes` of user data.
void set_received_bytes(MPI_Status* status, MPI_Count bytes);

}  // namespace mdsm::mpi_ext
