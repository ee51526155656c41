// mpi_ext internals shared by context.cpp (checks, communicator state, waits), the point-to-point
// operations (annotated.cpp) and calls (point_to_point.cpp, probe.cpp), requests.cpp and the collectives
// (collectives.cpp). The wire format and the protocol are described in docs/MPI.md.
//
// An MDSM message is one MPI message on the user's communicator: a 64-byte header, then the
// user's data, so that matching, wildcards, ordering and truncation are MPI's own. The
// consistency information of a REQUEST or RELEASE rides in the header when it fits (48 bytes);
// otherwise it travels as a second message on mdsm's side channel (runtime::mpi_ext_comm, ranks
// are mdsm ranks), sent first, under a tag unique to the sender that the header names; the
// receiver takes it after the data message has matched. Large data (side_min()) goes on the side
// channel too, with the user's own datatype, and the message on the user's communicator is the
// header alone: it still does the matching, and MPI moves the data as it would without mdsm.
//
// All MPI calls here use the PMPI_ names: libmdsm_safe replaces the MPI_ ones with these calls.
#pragma once

#include "api/runtime.hpp"

#include <mdsm/mdsm_mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

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
  // 1: this message is the header alone; the user's data follows on the side channel under
  // side_tag + 1 (docs/MPI.md, "Large messages").
  std::uint8_t side_data = 0;
  std::uint8_t reserved = 0;
  std::uint32_t cinfo_len = 0;  // bytes of consistency information; 0: none
  // The consistency information's tag on the side channel, when not inline (and the data's,
  // plus one, when side_data). Even, so that both tags of a message are its own.
  std::uint32_t side_tag = 0;
  std::byte cinfo[k_inline_cinfo];  // cinfo_len bytes valid when inline_cinfo (never read beyond)
};
static_assert(sizeof(header) == 64);
inline constexpr int k_header = static_cast<int>(sizeof(header));

// A header alone (side_data) also says how many bytes its data has, in the last 8 bytes of
// `cinfo`, so the receiver can post the data's receive straight away when it fits (no matched
// probe first; docs/MPI.md "Large messages"): its inline information has 40 bytes, not 48.
inline constexpr std::size_t k_inline_cinfo_side = k_inline_cinfo - sizeof(std::uint64_t);
inline std::uint64_t side_bytes(const header& h) {
  std::uint64_t n;
  std::memcpy(&n, h.cinfo + k_inline_cinfo_side, sizeof n);
  return n;
}
inline void set_side_bytes(header& h, std::uint64_t n) { std::memcpy(h.cinfo + k_inline_cinfo_side, &n, sizeof n); }

// Headerless messages: a NONE message with fewer than k_header bytes of contiguous data is sent as
// its data alone, the very bytes plain MPI would send. Every other MDSM message is at least a
// header long, so a message's size alone tells it apart: fewer than k_header bytes are NONE data,
// found without looking inside (a receive posts room for a header, so such a message always fits
// MPI's count; a probe reports its size). The price: a plain MPI message that short is
// indistinguishable from one, and an MDSM receive takes it as NONE data (and a plain receive
// takes a small NONE message's data) -- documented in docs/MPI.md. Small messages are where a
// header costs most (docs/BENCHMARKS.md).
inline bool is_headerless(std::size_t bytes) { return bytes < static_cast<std::size_t>(k_header); }
// The user's bytes a probe reports for a message of `bytes` bytes on the user's communicator
// (not a header alone: probe.cpp looks into those).
inline std::size_t probed_data(std::size_t bytes) { return is_headerless(bytes) ? bytes : bytes - k_header; }

// Up to this many bytes of contiguous user data are copied behind the header into one buffer
// (sender) or received into one and copied out (receiver); above it, and for non-contiguous
// datatypes, a struct datatype {header, user buffer} lets MPI move the data itself, without an
// extra copy. 3,968 bytes: a copied message (4,032 bytes with the header) still goes eagerly on
// Open MPI's shared-memory transport (whose 4 KiB limit counts ob1's own header: 4,040 bytes of
// payload do, 4,048 do not); above it the message takes a rendezvous anyway, and the two copies
// cost more than the struct (header_and). Measured in docs/MPI.md; MDSM_MPI_COPY_MAX overrides it.
// Inline: the short paths of every small message ask it.
std::size_t copy_max_from_env();
inline std::size_t copy_max() {
  static const std::size_t v = copy_max_from_env();
  return v;
}

// From this many bytes of user data (contiguous or not) the data goes on the side channel with
// the user's datatype: a struct datatype {header, buffer} makes Open MPI's shared-memory transport
// pipeline data above its eager limit through fragments where a plain message takes one CMA copy;
// from 8 KiB that costs more than the header's own message. Measured in docs/MPI.md;
// MDSM_MPI_SIDE_MIN overrides it (receivers size their staging buffers by their own value:
// give every rank the same).
std::size_t side_min();

// Room for a receive of up to `data` bytes of user data through a staging buffer: the header,
// then at least as many bytes as any MDSM message on a user's communicator carries (its data goes
// on the side channel from side_min()). Open MPI 4.1.4 writes a truncated contiguous message above
// its eager limit whole, past the end of the receive buffer (one CMA copy of the sender's size):
// with a larger MDSM_MPI_COPY_MAX such a message could be an MDSM one, and the staging buffer takes
// what a too-small receive would otherwise spill onto the heap. The receive itself still posts
// header + data bytes, so MPI reports the truncation.
inline std::size_t staging_bytes(std::size_t data) { return sizeof(header) + std::max(data, side_min()); }

// A vector whose resize leaves new elements uninitialized: staging buffers MPI receives into.
template <class T>
struct default_init_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = default_init_allocator<U>;
  };
  default_init_allocator() = default;
  template <class U>
  default_init_allocator(const default_init_allocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using staging_buffer = std::vector<std::byte, default_init_allocator<std::byte>>;

// Per-communicator state, cached in an attribute of the user's communicator.
struct comm_state {
  bool identity = false;     // comm rank r is mdsm rank r
  std::vector<int> to_mdsm;  // otherwise: comm rank -> mdsm rank (-1: not an mdsm rank)
  bool congruent = false;    // the same group, in the same order, as mdsm's communicator
  int size = 0;              // of the communicator
  MPI_Comm coll = MPI_COMM_NULL;  // collectives' own duplicate, made by the first collective
  std::uint64_t session = 0;  // the mdsm session whose ranks to_mdsm translates to
  int mdsm_rank(int r) const { return identity ? r : to_mdsm[static_cast<std::size_t>(r)]; }
  // Messages MDSM_Probe / MDSM_Iprobe took out of MPI (probe.cpp), in the order they matched;
  // every receive takes from here first. Any application thread; guarded by stash_mu.
  struct stashed {
    MPI_Status status{};  // MPI's status of the message on this communicator
    // received: `h` is the whole message (a header alone, 64 bytes); else `msg` is the matched,
    // not yet received message (one that another thread's receive raced a probe for).
    bool received = false;
    header h{};
    MPI_Message msg = MPI_MESSAGE_NULL;
  };
  std::mutex stash_mu;
  std::deque<stashed> stash;
};

// The runtime and the state of `comm`, or an error code (already reported through the
// communicator's error handler) in `rc`.
struct context {
  detail::runtime* rt = nullptr;
  comm_state* cs = nullptr;
  int rc = MPI_SUCCESS;
};
// `rt`: the runtime, when the caller already has it (the fast paths): not looked up again.
context enter(MPI_Comm comm, const char* call, detail::runtime* rt = nullptr);

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

// {header, user buffer} as one datatype at absolute addresses (MPI_BOTTOM): a message in place.
// Making and committing one costs more under MPI_THREAD_MULTIPLE than everything else mpi_ext
// adds to a 64 KiB message (docs/MPI.md, "Cost"), and programs send from and receive into the same
// buffers again and again, so each thread keeps the last 8 it made for predefined datatypes, whose
// handles never name another type (a freed derived type's handle may: those are made afresh).
// `owned`: the caller frees the type; otherwise the thread's cache does, and the caller must not.
MPI_Datatype header_and(const header* h, const void* buf, int count, MPI_Datatype type, bool& owned);

// Sends one annotated message: the side-channel message first, then the data message (and the
// user's data on the side channel after it, when large).
enum class send_mode { standard, synchronous, nonblocking };
struct send_op {
  header h{};  // zeroed: unused inline bytes go on the wire
  std::vector<std::byte> cinfo;           // consistency information (h.cinfo_len bytes)
  std::vector<std::byte> packed;          // header + data, when copied (nonblocking only)
  MPI_Datatype type = MPI_DATATYPE_NULL;  // {header, user buffer}, when not copied
  bool own_type = false;                  // freed by this op (else header_and's, kept)
  // The message on the user's communicator, the consistency information and the user's data on
  // the side channel.
  MPI_Request req[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  send_op() = default;
  send_op(const send_op&) = delete;
  send_op& operator=(const send_op&) = delete;
  ~send_op();
};
// Encodes the consistency information of an `a` (REQUEST, RELEASE, RELEASE_NT) message to
// mdsm rank `peer` into `w` (cleared first) and counts its bytes. MPI_SUCCESS, or an error code
// raised on comm.
int encode_cinfo(detail::runtime& rt, int peer, mdsm_annotation a, net::byte_writer& w, MPI_Comm comm);
// Blocking modes return once the send is complete; nonblocking leaves op.req to complete.
// `encoded`: the consistency information, already encoded for `dest` by the caller (the fast
// path, when it did not fit in the header); it must not be encoded twice, since encoding tells
// the engine that dest now knows what it carries. Returns an MPI error code (raised on comm).
int send(context& c, send_op& op, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         mdsm_annotation a, send_mode mode, const std::span<const std::byte>* encoded = nullptr);
// Waits for op's requests (a nonblocking send's end). Returns MPI's code, the first error first;
// a side-channel error is raised on `comm` (the side channel's own errors return).
int wait_send(const detail::runtime& rt, send_op& op, MPI_Comm comm);

// Receives one annotated message, in stages, blocking or not (requests advance it piecemeal).
struct recv_op {
  // data: the message on the user's communicator; side_data: the user's data on the side channel
  // (large messages); cinfo: the consistency information; acquire: a RELEASE's acquire.
  enum class stage { data, side_data, cinfo, acquire, done };
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
  staging_buffer packed;                  // header + data, when copied (staging_bytes)
  MPI_Datatype stype = MPI_DATATYPE_NULL;  // {header, user buffer}, when not copied
  bool own_stype = false;                  // freed by this op (else header_and's, kept)
  MPI_Request req = MPI_REQUEST_NULL;      // the data message, then the side-channel ones
  MPI_Message msg = MPI_MESSAGE_NULL;      // taken from the stash: received with MPI_Mrecv
  MPI_Status side_status{};                // the user's data's, when it came on the side channel
  bool side_matched = false;               // that data's message is matched (its size known)
  std::vector<std::byte> overflow;         // it, when larger than the buffer (truncation)
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
// Posts the receive (blocking: completes it); a message a probe stashed comes first. Returns an
// MPI error code.
int post_recv(recv_op& op, bool block);
// The message on the user's communicator has arrived (op.h, op.status set, any data in the
// header's message already in place): receives what follows on the side channel, the user's
// data (large messages), then the consistency information, blocking or posted.
void continue_on_side(recv_op& op, bool block);
// post_recv and advance to the end, on the calling thread.
void recv_blocking(recv_op& op);
// A received message of `bytes` bytes (not headerless: callers take those first) with header h
// is an MDSM message: MPI_SUCCESS, else the error raised on comm.
int check_header(const header& h, int bytes, MPI_Comm comm, const MPI_Status& st);
// Whether an MPI return code is of class MPI_ERR_TRUNCATE.
bool truncated(int rc);
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
// size), found without asking MPI; 0 for any other datatype. MPI_BYTE, the most common, inline.
int named_size_lookup(MPI_Datatype type);
inline int named_size(MPI_Datatype type) { return type == MPI_BYTE ? 1 : named_size_lookup(type); }

// Sets what MPI_Get_count / MPI_Get_elements report for `status`: `bytes` of user data.
inline void set_received_bytes(MPI_Status* status, MPI_Count bytes) {
  // Open MPI keeps a status's count in bytes: counts and elements for any datatype follow from
  // it exactly as for the data message itself (test/mpi_ext checks derived types).
#if defined(OPEN_MPI) && OPEN_MPI
  status->_ucount = static_cast<std::size_t>(bytes);
#else
  PMPI_Status_set_elements_x(status, MPI_BYTE, bytes);
#endif
}

// ---- the stash of probed messages (probe.cpp) -------------------------------------------------

// Entries in all communicators' stashes: while none, receives go straight to MPI (one load).
extern std::atomic<int> g_stashed;
inline bool any_stashed() { return g_stashed.load(std::memory_order_acquire) != 0; }
// Takes the first stashed message of op.comm that op.source and op.tag match into op: op.h and
// op.status (received), or op.msg. True if it took one.
bool take_stashed(recv_op& op);

}  // namespace mdsm::mpi_ext
