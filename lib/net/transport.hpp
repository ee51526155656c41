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
// Threads: send() may be called from any thread. poll() and drain() only by the holder of the
// progress lock (lib/net/progress.hpp), which is what makes handlers run one at a time.
#pragma once

#include "net/wire.hpp"

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace mdsm::net {

struct inbound_frame {
  frame_header header;
  int source;                          // rank the frame came from (the last forwarder)
  std::span<const std::byte> payload;  // valid only while the channel handler runs
  std::span<const std::byte> cinfo;
  std::span<const std::byte> whole;    // header + payload + cinfo, for forwarding unchanged
};

class transport {
 public:
  using frame_handler = void (*)(void* ctx, const inbound_frame& frame);

  // Collective over `base`: duplicates it twice (point-to-point traffic and collectives, so
  // neither can match the other or the user's traffic).
  transport(MPI_Comm base, std::size_t inline_max);
  ~transport();
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm collective_comm() const noexcept { return coll_comm_; }
  std::size_t inline_max() const noexcept { return inline_max_; }

  void set_handler(channel c, frame_handler fn, void* ctx);

  // Sends header+payload+cinfo as one frame; the lengths in `h` are filled in here.
  // Asynchronous: returns once the bytes are copied. Pre: 0 <= dest < size().
  void send(int dest, frame_header h, std::span<const std::byte> payload, std::span<const std::byte> cinfo);

  // Sends an already assembled frame unchanged (forwarding, or a frame built in place). Small
  // frames go straight from `frame`, larger ones through a copy. Pre: 0 <= dest < size(), the
  // header's lengths match frame.size().
  void send_frame(int dest, std::span<const std::byte> frame);

  // Test hook: sends arbitrary bytes into dest's receive ring, as a corrupt peer would.
  void send_raw_for_test(int dest, std::span<const std::byte> bytes);

  // Delivers up to `max_frames` received frames to their channel handlers and retires completed
  // sends. Returns the number of frames delivered. Pre: caller holds the progress lock.
  std::size_t poll(std::size_t max_frames);

  // Frames this rank has sent / received so far (termination detection at finalize).
  // Not for hot paths (sums the per-thread statistics).
  std::uint64_t frames_sent() const;
  std::uint64_t frames_received() const noexcept { return received_; }

 private:
  struct pending_send {
    MPI_Request request;
    std::unique_ptr<std::byte[]> buffer;
  };
  // Sends the frame of `len` bytes in this thread's staging buffer (see transport.cpp).
  void post(std::size_t len, int dest);
  void send_eager(const std::byte* frame, std::size_t len, int dest);
  void isend_staged(std::size_t len, int dest, int tag);
  // Returns the buffer if the send completed at once (free for reuse), nullptr if it travels
  // with the request on the in-flight list.
  std::unique_ptr<std::byte[]> isend(std::unique_ptr<std::byte[]> buffer, std::size_t len, int dest, int tag);
  void post_receive(std::size_t slot);
  void retire_sends();
  void deliver(std::span<const std::byte> bytes, int source);
  void take_large(std::span<const std::byte> announcement, int source);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm coll_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  std::size_t inline_max_;

  struct slot {
    frame_handler fn = nullptr;
    void* ctx = nullptr;
  };
  slot handlers_[k_channel_max + 1];

  // Receive ring; touched only by the progress-lock holder.
  std::vector<std::unique_ptr<std::byte[]>> ring_buffers_;
  std::vector<MPI_Request> ring_requests_;
  std::size_t ring_head_ = 0;
  bool repost_pending_ = false;  // ring slot repost_slot_ completed and is not posted again yet
  std::size_t repost_slot_ = 0;
  std::uint64_t received_ = 0;

  // Sends that did not complete at once. Guarded by send_mutex_.
  std::mutex send_mutex_;
  std::vector<pending_send> inflight_;
  std::atomic<std::size_t> inflight_count_{0};
  // Serialises a large frame's announcement and body so two threads cannot interleave them.
  std::mutex large_mutex_;
  // The frames_sent statistic when this transport was made: frames are counted per thread (an
  // atomic shared by all senders would cost every send a locked add).
  std::uint64_t sent_base_ = 0;
};

}  // namespace mdsm::net
