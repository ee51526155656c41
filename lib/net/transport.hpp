// MPI transport: mdsm's private communicators, frame sending, and the receive side that the
// progress engine drives.
//
// Receiving uses a ring of preposted MPI_Irecv(ANY_SOURCE) buffers of `inline_max` bytes on one
// tag. MPI matches them in posting order and never lets two messages from one sender overtake
// each other, so completing the ring strictly in order preserves per-sender order end to end.
// (Measured on this machine: a preposted ring costs what a raw MPI_Recv round trip costs;
// MPI_Improbe + MPI_Mrecv costs 16% more.) A frame larger than `inline_max` is announced by a
// small control frame in the ring and its bytes follow on a second tag; the receiver takes the
// body when it reaches the announcement, so large frames keep their place in the order too.
//
// Flow control (net/flow.hpp): every send claims credits from the destination's window before
// its frame is built; an application thread whose window is full waits for them at the wait
// point (the progress engine installs it: set_window_waiter), anything else overdraws. The
// transport writes the per-hop header fields (the credits returned to the destination, the
// flags) into every frame it sends, and counts the credits of every frame it takes in.
//
// Threads: send() may be called from any thread. poll() and drain() only by the holder of the
// progress lock (lib/net/progress.hpp), which is what makes handlers run one at a time.
#pragma once

#include "net/context.hpp"
#include "net/doorbells.hpp"
#include "net/flow.hpp"
#include "net/wire.hpp"
#include "stats/counters.hpp"

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace mdsm::net {

// The bytes a completed receive holds. Open MPI keeps them in the status: what MPI_Get_count
// computes for MPI_BYTE, without the call and the datatype-size division on every frame.
inline std::size_t received_bytes(const MPI_Status& st) {
#if defined(OPEN_MPI) && OPEN_MPI
  return st._ucount;
#else
  int count = 0;
  PMPI_Get_count(&st, MPI_BYTE, &count);
  return static_cast<std::size_t>(count);
#endif
}

// Copies n bytes, sizeof(Word) <= n <= 2 * sizeof(Word), as two words that may overlap.
template <class Word>
inline void copy_two_words(std::byte* dst, const std::byte* src, std::size_t n) {
  Word first, last;
  std::memcpy(&first, src, sizeof first);
  std::memcpy(&last, src + n - sizeof last, sizeof last);
  std::memcpy(dst, &first, sizeof first);
  std::memcpy(dst + n - sizeof last, &last, sizeof last);
}

template <class T>
inline void store_field(std::byte* frame, std::size_t at, const T& v) {
  std::memcpy(frame + at, &v, sizeof v);
}

// Copies n bytes; payloads of up to 16 bytes (a pointer, an index: the common small message)
// without a call to memcpy. Pre: the ranges do not overlap.
inline void copy_small(std::byte* dst, const std::byte* src, std::size_t n) {
  if (n > 16) std::memcpy(dst, src, n);
  else if (n >= 8) copy_two_words<std::uint64_t>(dst, src, n);
  else if (n >= 4) copy_two_words<std::uint32_t>(dst, src, n);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
}

// A received frame, as its channel's consumer sees it. Small (built for every frame): the parts
// are computed from the validated header. The bytes are valid only while the consumer runs.
struct inbound_frame {
  frame_header header;
  int source;        // rank the frame came from (the last forwarder)
  std::byte* bytes;  // the whole frame, in the transport's receive buffer

  std::span<const std::byte> payload() const noexcept { return {bytes + sizeof header, header.payload_len}; }
  std::span<const std::byte> cinfo() const noexcept {
    return {bytes + sizeof header + header.payload_len, header.cinfo_len};
  }
  // header + payload + cinfo, for forwarding unchanged (mutable: the transport writes the new
  // hop's header fields in place when it sends it on)
  std::span<std::byte> whole() const noexcept {
    return {bytes, sizeof header + header.payload_len + header.cinfo_len};
  }
};

class transport {
 public:
  // Frames up to this size are assembled on the sender's stack (MPI_Send is done with the buffer
  // when it returns): no staging buffer to look up, and the bytes are in L1 when MPI copies them.
  static constexpr std::size_t k_stack_frame_max = 256;
  // Frames up to this size are sent with MPI_Send. Open MPI's eager limits (vader 4 KiB, tcp
  // 64 KiB, self 128 KiB) and MPICH's are all larger, so such a send completes locally.
  static constexpr std::size_t k_eager_send_max = 1024;

  static constexpr int k_ring_tag = 0;  // the receive ring's tag on the private communicator

  using frame_handler = void (*)(void* ctx, const inbound_frame& frame);
  // Waits (delivering frames) until dest's window is no longer full (see set_window_waiter).
  using window_waiter = void (*)(void* ctx, int dest);

  // Collective over `base`: duplicates it twice (point-to-point traffic and collectives, so
  // neither can match the other or the user's traffic), and agrees on the credit window: the
  // smallest `window` any rank asks for (net/flow.hpp).
  transport(MPI_Comm base, std::size_t inline_max, std::uint32_t window = flow_control::k_default_window);
  ~transport();
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm collective_comm() const noexcept { return coll_comm_; }
  std::size_t inline_max() const noexcept { return inline_max_; }

  // The consumer of a channel's frames (nullptr: frames on it are reported and dropped). The
  // control channel is the transport's own.
  void set_handler(channel c, frame_handler fn, void* ctx);

  // How an application thread waits for credits: the progress engine's wait point (it must
  // deliver this rank's frames while it waits, see net/flow.hpp). Without one (before the engine
  // exists, or after), sends never wait.
  void set_window_waiter(window_waiter fn, void* ctx) noexcept { waiter_ = {fn, ctx}; }
  bool window_full(int dest) const noexcept { return flow_.window_full(dest); }
  std::uint32_t flow_window() const noexcept { return flow_.window(); }

  // Sends header + payload as one frame (no consistency information: NONE messages, protocol
  // requests and replies; annotated frames are built in place and go through send_frame). The
  // lengths in `h` are filled in here. Asynchronous: returns once the bytes are copied. A frame
  // that fits k_stack_frame_max is assembled on the caller's stack and sent from there, inline
  // (the NONE message path); a larger one goes through send_staged. `counts` is the caller's
  // statistics block. From an application thread, first waits while dest's window is full
  // (delivering frames: handlers may run on this thread). Pre: 0 <= dest < size().
  void send(int dest, const frame_header& h, std::span<const std::byte> payload) {
    send(dest, h, payload, stats::local());
  }
  [[gnu::always_inline]] void send(int dest, const frame_header& h, std::span<const std::byte> payload,
                                   stats::storage::block& counts) {
    MDSM_ASSERT(dest >= 0 && dest < size_, "send to a rank out of range");
    if (payload.size() > k_stack_frame_max - sizeof h) [[unlikely]]
      return send_staged(dest, h, payload);
    alignas(16) std::byte frame[k_stack_frame_max];
    const auto n = static_cast<std::uint32_t>(payload.size());
    // Field by field: the compiler then stores the caller's header straight into the frame
    // (a copy of the whole struct went through a temporary).
    store_field(frame, offsetof(frame_header, magic), h.magic);
    store_field(frame, offsetof(frame_header, chan), h.chan);
    store_field(frame, offsetof(frame_header, annot), h.annot);
    store_field(frame, offsetof(frame_header, handler), h.handler);
    store_field(frame, offsetof(frame_header, origin), h.origin);
    store_field(frame, offsetof(frame_header, payload_len), n);
    store_field(frame, offsetof(frame_header, cinfo_len), std::uint32_t{0});
    store_field(frame, offsetof(frame_header, token), h.token);
    store_field(frame, offsetof(frame_header, reserved), std::array<std::uint8_t, 3>{});
    copy_small(frame + sizeof h, payload.data(), n);
    // Credits once the frame is built (a wait may run handlers on this thread: they send from
    // their own stack frames, so this one stays intact; the header is built straight into it).
    // A frame this small costs one credit.
    const std::uint8_t flags = claim(dest, 1);
    write_hop(frame, dest, flags);
    send_eager(frame, sizeof h + n, dest, counts);
    bells_->knock(dest);
  }

  // send() for a frame whose sender then waits for an answer (a coherence request): never waits
  // inside MPI. MPI_Send of a small frame can: when vader's fast box to dest is full it waits for
  // dest to take fragments in, spinning in MPI's progress without yielding the core, while dest's
  // application computes and its progress thread naps (matmul's requests spent ~0.25-0.5 ms each
  // so). Here the frame goes with MPI_Isend and, if MPI cannot take it at once, travels in the
  // in-flight list; the sender goes on to its own wait, which yields.
  void send_request(int dest, const frame_header& h, std::span<const std::byte> payload) {
    MDSM_ASSERT(dest >= 0 && dest < size_, "send to a rank out of range");
    send_staged(dest, h, payload, {}, true);
  }

  // Sends header + `head` + `body` as one frame, assembled straight in the staging buffer (a
  // request's fields and the bytes it carries, copied once). Otherwise as send().
  void send_parts(int dest, const frame_header& h, std::span<const std::byte> head, std::span<const std::byte> body) {
    MDSM_ASSERT(dest >= 0 && dest < size_, "send to a rank out of range");
    send_staged(dest, h, head, body);
  }

  // Sends an already assembled frame (forwarding, or a frame built in place); the transport
  // writes the per-hop header fields into it, the rest goes unchanged. Small frames go straight
  // from `frame`, larger ones through a copy. From an application thread whose window to dest is
  // full, it waits first, with the frame copied aside (a handler run meanwhile on this thread may
  // reuse the buffer it was built in). Pre: 0 <= dest < size(), the header's lengths match
  // frame.size().
  void send_frame(int dest, std::span<std::byte> frame);

  // Test hook: sends arbitrary bytes into dest's receive ring, as a corrupt peer would.
  void send_raw_for_test(int dest, std::span<const std::byte> bytes);

  // Delivers up to `max_frames` received frames to their channel handlers and retires completed
  // sends. Returns the number of frames delivered. Pre: caller holds the progress lock.
  std::size_t poll(std::size_t max_frames);

  // A buffer of at least `len` bytes kept from a completed large send, or nullptr; `capacity` gets
  // its size. Any thread (the staging buffers use it).
  std::unique_ptr<std::byte[]> take_spare(std::size_t len, std::size_t& capacity);

  // The doorbells of this host's ranks: ring(dest) after sending a frame that expects a reply.
  // Every frame but a credit frame knocks (wakes dest's progress thread from a deep nap).
  doorbells& bells() noexcept { return *bells_; }

  // Frames this rank has sent / received so far (termination detection at finalize).
  // Not for hot paths (sums the per-thread statistics).
  std::uint64_t frames_sent() const;
  std::uint64_t frames_received() const noexcept { return received_.load(std::memory_order_relaxed); }

 private:
  // Sends a frame of at most k_eager_send_max bytes with one MPI_Send. Blocking, but it never
  // waits for the receiver: a frame this small goes eagerly (the bytes are copied out and
  // MPI_Send returns), so handlers may send. Against MPI_Isend + MPI_Test it saves the request
  // and the test, a sixth of a small message's cost.
  void send_eager(const std::byte* frame, std::size_t len, int dest) { send_eager(frame, len, dest, stats::local()); }
  void send_eager(const std::byte* frame, std::size_t len, int dest, stats::storage::block& counts) {
    stats::add(counts, stats::counter::frames_sent);
    stats::add(counts, stats::counter::frame_bytes_sent, len);
    const int rc = PMPI_Send(frame, static_cast<int>(len), MPI_BYTE, dest, k_ring_tag, comm_);
    if (rc != MPI_SUCCESS) [[unlikely]]
      send_failed(rc);
  }
  [[noreturn, gnu::cold]] static void send_failed(int rc);

  // Claims `cost` credits towards dest (net/flow.hpp): waits for them if this thread may wait,
  // overdraws otherwise. Returns the header flags of the frame. Inline: on every send.
  std::uint8_t claim(int dest, std::uint32_t cost) {
    if (!sends_may_wait()) [[unlikely]]
      return overdraw(dest, cost);
    if (!flow_.try_claim(dest, cost)) [[unlikely]]
      await_credits(dest, cost);
    return k_flag_waits;
  }
  std::uint8_t overdraw(int dest, std::uint32_t cost);
  [[gnu::noinline]] void await_credits(int dest, std::uint32_t cost);
  // The per-hop header fields of a frame about to go to dest: the credits returned so far and
  // the flags.
  void write_hop(std::byte* frame, int dest, std::uint8_t flags) noexcept {
    const std::uint32_t credit = flow_.report(dest);
    std::memcpy(frame + offsetof(frame_header, credit), &credit, sizeof credit);
    std::memcpy(frame + offsetof(frame_header, flags), &flags, sizeof flags);
  }
  // A credit frame to `dest`: a header without payload whose credit field is the report.
  void send_credit(int dest);
  // The throttle's review (net/flow.hpp), at the end of a poll.
  [[gnu::noinline]] void review_flow();

  struct pending_send {
    MPI_Request request;
    std::unique_ptr<std::byte[]> buffer;
    std::size_t capacity = 0;
  };
  struct spare {
    std::unique_ptr<std::byte[]> buffer;
    std::size_t capacity;
  };
  static constexpr std::size_t k_spare_max = std::size_t{1} << 20;  // larger buffers are not kept
  static constexpr std::size_t k_spares = 4;
  // send() for a payload too large for the stack: assembled in the staging buffer, then post().
  // The payload is `payload` followed by `more`.
  // `never_block`: never MPI_Send (send_request).
  void send_staged(int dest, frame_header h, std::span<const std::byte> payload, std::span<const std::byte> more = {},
                   bool never_block = false);
  // Sends the frame of `len` bytes in this thread's staging buffer (see transport.cpp); its
  // credits are claimed and its per-hop fields written. `flags`: claim's result.
  void post(std::size_t len, int dest, std::uint8_t flags, bool never_block = false);
  // post() without the per-hop fields and the knock: the staged frame to MPI, by its size.
  void send_staged_frame(std::size_t len, int dest, bool never_block);
  void isend_staged(std::size_t len, int dest, int tag);
  // Returns the buffer if the send completed at once (free for reuse), nullptr if it travels
  // with the request on the in-flight list.
  std::unique_ptr<std::byte[]> isend(std::unique_ptr<std::byte[]> buffer, std::size_t len, int dest, int tag,
                                     std::size_t capacity = 0);
  void post_receive(std::size_t slot);
  void retire_sends();
  // Validates a received frame and hands it to its channel's consumer. Inline into poll: it is
  // on the path of every message.
  [[gnu::always_inline]] inline void deliver(std::span<std::byte> bytes, int source);
  [[gnu::cold]] void take_in_short(std::size_t len, int source);
  static void on_control(void* ctx, const inbound_frame& f);
  static void on_unclaimed(void* ctx, const inbound_frame& f);
  void take_large(std::span<const std::byte> announcement, int source);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm coll_comm_ = MPI_COMM_NULL;
  std::unique_ptr<doorbells> bells_;
  int rank_ = 0;
  int size_ = 0;
  std::size_t inline_max_;

  struct slot {
    frame_handler fn = nullptr;
    void* ctx = nullptr;
  };
  slot handlers_[k_channel_max + 1];
  struct {
    window_waiter fn = nullptr;
    void* ctx = nullptr;
  } waiter_;
  flow_control flow_;

  // Receive ring; touched only by the progress-lock holder. Slot i's buffer is at
  // ring_base_ + i * ring_stride_, inside ring_memory_.
  static constexpr std::size_t k_ring_slots = 16;
  std::byte* ring_slot(std::size_t i) const noexcept { return ring_base_ + i * ring_stride_; }
  std::unique_ptr<std::byte[]> ring_memory_;
  std::byte* ring_base_ = nullptr;
  std::size_t ring_stride_ = 0;
  std::array<MPI_Request, k_ring_slots> ring_requests_{};
  std::size_t ring_head_ = 0;
  // The slot before ring_head_ completed and is not posted again yet.
  bool repost_pending_ = false;
  std::size_t repost_slot() const noexcept { return (ring_head_ + k_ring_slots - 1) % k_ring_slots; }
  // Frames taken from the ring. Written only by the progress-lock holder, but read by finalize's
  // termination detection on the application thread while the progress thread still polls: an
  // atomic (relaxed; on x86 the same plain load and store as before), or that read is a data race
  // (TSan reported it).
  std::atomic<std::uint64_t> received_{0};

  // Sends that did not complete at once. Guarded by send_mutex_.
  std::mutex send_mutex_;
  std::vector<pending_send> inflight_;
  std::vector<spare> spares_;           // buffers of completed large sends (send_mutex_)
  std::vector<std::byte> large_body_;   // take_large's receive buffer (progress lock)
  std::atomic<std::size_t> inflight_count_{0};
  // Serialises a large frame's announcement and body so two threads cannot interleave them.
  std::mutex large_mutex_;
  // The frames_sent statistic when this transport was made: frames are counted per thread (an
  // atomic shared by all senders would cost every send a locked add).
  std::uint64_t sent_base_ = 0;
};

}  // namespace mdsm::net
