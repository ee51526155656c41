// One-sided access to other ranks' copies of the non-coherent region: get, put, fetch-and-add and
// compare-and-swap, with mdsm's own messages on a channel of their own (net::channel::noncoherent),
// served by the target's progress engine like the coherence protocol's diff requests. (Not MPI
// RMA: Open MPI's osc/pt2pt refuses MPI_THREAD_MULTIPLE and osc/rdma needs an RDMA network, so
// windows fail across hosts over TCP; docs/ARCHITECTURE.md.)
//
// Operations (the frame header's `handler` field) and their payloads, all integers u64 unless
// said; the header's token matches a reply to its request:
//   op_get            addr, len                 -> op_get_reply per chunk: offset, bytes
//   op_put            addr, bytes               one frame per chunk; the last carries the token
//                                               -> op_put_ack (empty) once it is applied
//   op_fetch_add      addr, value               -> op_atomic_reply: old value
//   op_compare_swap   addr, expected, desired   -> op_atomic_reply: old value
//   op_free           addr                      -> op_free_reply: i32 status, message bytes
// Every address and length is checked against the region before use; a bad one is a malformed
// frame (the origin checked it too, so only a corrupt peer sends one).
//
//   op_put_body       addr, len, tag            the bytes follow as one MPI message on tag `tag`
//                                               of body_comm_ -> op_put_ack once received
//   op_get_body       addr, len, tag            the target sends the bytes as one MPI message on
//                                               tag `tag` of body_comm_ (no reply frame)
//
// Large transfers (k_body_min .. k_body_max bytes; a coherent local buffer is staged in a private
// copy first, so MPI never reads or writes the coherent region; the
// lower bound is MDSM_NONCOHERENT_BODY_MIN, where a huge value turns bodies off, and at least
// k_body_min_unaligned_get for a get into a destination that is not page aligned) move
// their bytes as one MPI message between the user's buffer and the region (a body), so MPI copies
// them once (one CMA copy on one host) instead of three times through frames. The origin posts
// its side first (MPI_Isend of a put's source, MPI_Irecv into a get's destination), then sends the
// frame; the target receives a put's body in its handler (posted already, so the receive does not
// wait for the origin's application; it may wait for the origin's MPI progress, as the transport's
// large frames do) and posts a get's body with MPI_Isend. Every transfer in flight has its own tag
// (up to k_tags at once; beyond, transfers take the framed path), so bodies match their frames
// whatever the order of threads. Body requests are completed by retire_bodies, called by waits,
// tests and every non-coherent frame. A put_nb whose body is in flight reads its source until it
// completes.
// Smaller transfers are split into chunks of k_chunk_bytes (a put's frames, a get's replies), so
// no frame approaches the transport's frame limit and a transfer flows under the credit window.
// Frames of one sender arrive in order, so a put's chunks are applied before its ack, and the
// operations one thread issues to one rank are applied in issue order.
//
// Direct access (a target on this host): each rank maps the region of every rank of its host
// (its shared-memory file, noncoherent_region::backing, opened through /proc/<pid>/fd), so a get
// or put is a memcpy and an atomic a hardware atomic on the target's word, by the calling thread,
// complete when it returns; the target's threads take no part (its application is never
// interrupted for it). Where a region cannot be mapped (MDSM_NONCOHERENT_MAP=0, or the kernel
// refuses) a get or put is one process_vm_readv/writev between the local buffer and the target's
// region instead, and atomics travel as messages. Where the kernel refuses that copy as well
// (another user, ptrace restrictions, MDSM_NONCOHERENT_DIRECT=0; or midway, on a local page it
// cannot access), or an operation of this rank to the same target still travels as messages
// (issue order: it must be applied first), the operation takes the message path below.
// The kernel never sees coherent memory: a get into it lands in `staged`, a put from it is copied
// there first (a fault on this thread fetches its pages). Whether a rank of this host can be
// reached so is probed at start-up: read a nonce the rank published, from the process whose pid
// it published (so a pid that names another process, as in another pid namespace, fails).
//
// Local target (rank == this rank): a plain memmove or a hardware atomic on the word, at once.
// Atomics at the target are hardware atomics (std::atomic_ref) too, so remote and local atomics
// on a word are atomic with respect to each other.
//
// Threads: any application thread, and handlers (the non-blocking forms; a handler never waits).
// Replies are taken by whoever holds the progress lock. `ops_` (token -> operation) is guarded
// by ops_mutex_, never held across a send or a wait. An nc_operation is written by the handler
// taking its replies until `remaining` reaches 0 (release), then only by its request's owner.
#pragma once

#include "coherence/region_map.hpp"
#include "net/progress.hpp"
#include "net/transport.hpp"
#include "regions/noncoherent_region.hpp"

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mdsm::detail {

// One get, put, atomic or remote free in flight; an nc_request holds it, and so does the token
// table until its last reply.
struct nc_operation {
  std::atomic<std::uint32_t> remaining{0};  // replies outstanding; 0: complete at the target
  std::uint64_t value = 0;                   // an atomic's old value; a free's status
  std::byte* dst = nullptr;                  // a get's replies land here
  std::size_t bytes = 0;
  // A get into coherent memory: the replies land in `staged` (a handler must not write coherent
  // memory) and the application thread that completes the request copies them to coherent_dst.
  std::byte* coherent_dst = nullptr;
  std::vector<std::byte> staged;  // also a put's copy of a coherent source, a failed remote free's message
  bool finished = false;           // the owner's side is done (the copy made)
  MPI_Request body = MPI_REQUEST_NULL;  // a body in flight (retire_bodies completes it)
  int tag = -1;                         // its tag on body_comm_
  int target = -1;
  const char* what = "";
};

}  // namespace mdsm::detail

namespace mdsm::regions {

class one_sided {
 public:
  static constexpr std::size_t k_chunk_bytes = std::size_t{256} << 10;
  // Bodies from 4 KiB (above vader's eager limit a frame takes a rendezvous anyway), except for
  // a get into a destination that is not page aligned: Open MPI receives a body there at a
  // quarter of the speed (BENCHMARKS.md), so such gets take frames below 64 KiB.
  static constexpr std::size_t k_body_min = std::size_t{4} << 10;
  static constexpr std::size_t k_body_min_unaligned_get = std::size_t{64} << 10;
  static constexpr std::size_t k_body_max = std::size_t{1} << 30;  // MPI counts are int
  static constexpr int k_tags = 32767;                              // MPI_TAG_UB is at least this
  enum op : std::uint32_t {
    op_get = 1,
    op_get_reply = 2,
    op_put = 3,
    op_put_ack = 4,
    op_fetch_add = 5,
    op_compare_swap = 6,
    op_atomic_reply = 7,
    op_free = 8,
    op_free_reply = 9,
    op_put_body = 10,
    op_get_body = 11,
  };
  using op_ptr = std::shared_ptr<detail::nc_operation>;

  // Claims the noncoherent channel. `coherent`: the coherent region, which a handler's local
  // buffers must not lie in.
  one_sided(net::transport& t, net::progress& p, noncoherent_region& r, const coherence::region_map& coherent);
  ~one_sided();
  one_sided(const one_sided&) = delete;
  one_sided& operator=(const one_sided&) = delete;

  // Start an operation; it is complete when remaining == 0 (at once for a local target). Throw
  // mdsm::error for a bad rank, a remote range outside the region, a null buffer, a misaligned
  // word, or a coherent local buffer in a handler.
  op_ptr get(void* dst, int rank, const void* src, std::size_t n);
  op_ptr put(int rank, void* dst, const void* src, std::size_t n);
  op_ptr fetch_add(int rank, std::uint64_t* word, std::uint64_t value);
  op_ptr compare_swap(int rank, std::uint64_t* word, std::uint64_t expected, std::uint64_t desired);

  // Waits for completion (application threads only: MDSM_ERR_HANDLER_CONTEXT in a handler), then
  // finishes it (a staged get is copied into coherent memory).
  void wait(detail::nc_operation& op);
  // True (and finished) once complete; from an application thread it first delivers pending
  // frames. Any context.
  bool test(detail::nc_operation& op);

  // nc_free: this rank's allocation at once; another rank's by a round trip to its owner.
  // Application threads only.
  void free(void* p);

 private:
  static void on_frame(void* ctx, const net::inbound_frame& f);
  void serve_get(const net::inbound_frame& f);
  void serve_put(const net::inbound_frame& f);
  void serve_atomic(const net::inbound_frame& f);
  void serve_free(const net::inbound_frame& f);
  void take_get_reply(const net::inbound_frame& f);
  void take_reply(const net::inbound_frame& f);  // put ack, atomic and free replies
  void serve_put_body(const net::inbound_frame& f);
  void serve_get_body(const net::inbound_frame& f);
  // A free tag for a body, or -1 if k_tags are in flight.
  int claim_tag();
  void release_tag(int tag);
  void add_body(const op_ptr& op);
  // Completes the body requests that are done (decrementing their operations' `remaining`) and
  // drops completed get-body sends. Any context; returns at once if another thread is at it.
  void retire_bodies();
  void retire_bodies_if_any() {
    if (bodies_in_flight_.load(std::memory_order_acquire) != 0) retire_bodies();
  }
  bool coherent_overlap(const void* p, std::size_t n) const noexcept;
  // Start-up (collective): which ranks of this host a direct copy reaches (direct_), and whose
  // regions are mapped here (mapped_).
  void probe_direct();
  // Maps rank r's region (its backing `fd` in process `pid`); nullptr if it cannot.
  std::byte* map_region_of(int pid, std::uint64_t fd) const;
  // Rank r's byte at `remote` (an address of the region) in its region mapped here. Pre: mapped_[r].
  std::byte* mapped_at(int rank, const void* remote) const noexcept {
    return mapped_[static_cast<std::size_t>(rank)] + (reinterpret_cast<std::uintptr_t>(remote) -
                                                      reinterpret_cast<std::uintptr_t>(region_.base()));
  }
  // Whether an operation to `rank` may go directly now: it is reachable so, and none of this
  // rank's operations to it still travel as messages (they must be applied first).
  bool direct_now(int rank) const noexcept {
    return direct_[static_cast<std::size_t>(rank)] &&
           framed_[static_cast<std::size_t>(rank)].load(std::memory_order_acquire) == 0;
  }
  // A direct copy of n bytes between `local` and `remote` at `rank` (write: local -> remote).
  // False, having perhaps copied part, if it cannot: the caller takes the message path.
  bool copy_direct(int rank, void* local, void* remote, std::size_t n, bool write);
  // `op` travels as messages from now until the last of its `parts` (replies, a body's
  // completion) arrives (complete_part); while any operation to its target does, no direct copy
  // to that rank overtakes it. Called once nothing can fail before its frame is sent.
  void start_framed(detail::nc_operation& op, std::uint32_t parts) {
    op.remaining.store(parts, std::memory_order_relaxed);
    framed_[static_cast<std::size_t>(op.target)].fetch_add(1, std::memory_order_acq_rel);
  }
  void complete_part(detail::nc_operation& op) {
    if (op.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1)
      framed_[static_cast<std::size_t>(op.target)].fetch_sub(1, std::memory_order_release);
  }

  void check_rank(int rank, const char* what) const;
  void check_remote(const void* p, std::size_t n, const char* what) const;
  void check_local(const void* p, std::size_t n, const char* what) const;
  op_ptr start(const char* what, int rank, std::size_t bytes);
  std::uint32_t track(const op_ptr& op);
  op_ptr find(std::uint32_t token);
  void forget(std::uint32_t token);
  op_ptr atomic(std::uint32_t code, const char* what, int rank, std::uint64_t* word, std::uint64_t a,
                std::uint64_t b);
  void send(int dest, std::uint32_t code, std::uint32_t token, std::span<const std::byte> fields,
            std::span<const std::byte> bytes = {});
  void finish(detail::nc_operation& op);

  net::transport& transport_;
  net::progress& progress_;
  noncoherent_region& region_;
  const coherence::region_map& coherent_;
  int rank_;
  std::uint64_t body_min_;  // MDSM_NONCOHERENT_BODY_MIN, default k_body_min
  std::mutex ops_mutex_;
  std::unordered_map<std::uint32_t, op_ptr> ops_;
  std::uint32_t next_token_ = 1;  // 0: no reply expected
  std::vector<bool> tags_;        // tags in use (ops_mutex_)
  int next_tag_ = 0;
  MPI_Comm body_comm_ = MPI_COMM_NULL;  // bodies only: a duplicate, so no frame can match them
  std::mutex bodies_mutex_;             // guards bodies_ and sends_
  std::vector<op_ptr> bodies_;          // this rank's operations with a body in flight
  std::vector<MPI_Request> sends_;      // get bodies this rank sends as a target
  std::atomic<std::size_t> bodies_in_flight_{0};  // bodies_.size() + sends_.size()
  std::vector<int> pids_;                          // by rank, for the direct copies
  std::vector<char> direct_;                       // by rank: a direct copy reaches it
  std::vector<std::byte*> mapped_;                 // by rank: its region mapped here, or nullptr
  std::unique_ptr<std::atomic<std::uint32_t>[]> framed_;  // by rank: operations in messages
};

}  // namespace mdsm::regions
