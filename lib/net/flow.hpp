// Flow control: credits per sender -> receiver pair, so that no rank can fill another's memory
// with frames it has not taken in. MPI buffers unexpected messages without limit: over TCP, a
// rank flooded with small messages while it computed grew by ~880 bytes a message (100,000
// messages: 88 MB; 1M: 830 MB), where shared memory made the senders block.
//
// Credits. Every frame except the transport's own control frames (credit frames, large-frame
// announcements) costs credits: one per started k_credit_bytes of the frame, at most a window.
// A receiver counts, per source, the credits of every frame it takes in (out of its receive ring
// or, for a large frame, the body) and returns them: the running count (mod 2^32) rides in the
// `credit` header field of every frame it sends to that source, and once half a window is
// unreported it sends a credit frame (a control frame without payload). Half, not less: a sender
// that streams takes each credit frame in with a wait, so fewer of them cost less (a quarter
// cost an 8-byte stream ~2% more), and the half still in flight keeps the receiver busy. A sender keeps per
// destination the credits it charged (`sent`) and the newest count returned (`returned`);
// sent - returned, the *outstanding* credits, bounds what the receiver holds of its frames.
// The window is agreed at start-up (the smallest any rank asks for: MDSM_FLOW_WINDOW).
//
// Who waits. A send from an application thread claims its credits only while its outstanding
// credits are below the window; otherwise it waits at the wait point (progress::wait_until),
// which delivers this rank's incoming frames meanwhile -- so two ranks flooding each other
// both keep taking frames in and returning credits. Its frames carry k_flag_waits.
// A send from a handler (user handlers, the coherence protocol's service, forwards) never
// waits: a handler runs in the delivery context, so waiting there stops this rank's delivery
// and the credits it owes others, and two ranks whose handlers waited for each other's credits
// would deadlock. Nor do the coherence protocol's requests (bounded: each waits for its reply)
// or sends made while holding a lock the handlers take (lib/sync's object locks); those run in
// an unthrottled_scope (net/context.hpp). Such a send charges its credits and goes out even
// beyond the window: an *overdraft*, always delivered in order, never queued or dropped.
//
// Bounding the overdraft. A rank whose outstanding credits towards some peer exceed
// k_throttle_windows windows (its handlers ran ahead of that peer: an application thread's
// claims stop below 2 windows) is *throttled*: it keeps taking frames in, but withholds the
// credits of frames carrying k_flag_waits until every peer is back under the limit. The
// application floods that feed its handlers then wait at their sources. Deadlock-free: credits
// of frames sent without waiting are never withheld and every rank keeps delivering, so once
// nothing is in flight a rank's outstanding credits towards a peer are what the peer withholds
// from its application threads (< 2 windows) plus what is unreported (< half a window) --
// under the limit, so no cycle of throttled ranks can hold. A flood passed on by handlers over
// several hops is bounded at its first hop only.
//
// Threads: `sent` is claimed and charged by any sending thread (atomic read-modify-write);
// `reported` is stored by any sender (a piggybacked count; a stale store only causes an early
// credit frame). `returned`, `counted`, `withheld` and the throttle are written by the holder of
// the progress lock (it takes frames in); the others read them relaxed.
#pragma once

#include "net/context.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mdsm::net {

class flow_control {
 public:
  // A frame costs one credit per started k_credit_bytes: small frames one, a frame of the ring's
  // size (16 KiB) four, a large one its bytes' worth up to a window. What an unconsumed frame
  // holds in the receiver's MPI (its unexpected-message buffer) is about its size for eager
  // messages, one eager fragment above, so credits bound bytes, not just frames.
  static constexpr std::size_t k_credit_bytes = 4096;
  static constexpr std::uint32_t k_default_window = 256;  // credits: 1 MiB of frames per pair
  static constexpr std::uint32_t k_min_window = 4;
  static constexpr std::uint32_t k_max_window = std::uint32_t{1} << 24;  // keeps every difference < 2^31
  static constexpr std::uint32_t k_throttle_windows = 3;

  // Sizes the state for `size` ranks and `window` credits (as agreed by all ranks, in the
  // transport's constructor). Before any frame is sent or received.
  void configure(int size, std::uint32_t window);

  std::uint32_t window() const noexcept { return window_; }
  std::uint32_t cost(std::size_t frame_bytes) const noexcept {
    if (frame_bytes <= k_credit_bytes) [[likely]]
      return 1;
    return static_cast<std::uint32_t>(std::min<std::size_t>((frame_bytes + k_credit_bytes - 1) / k_credit_bytes, window_));
  }

  // ---- sending side (any thread) ----

  // Claims `cost` credits towards `dest` if its outstanding credits are below the window.
  // False: the window is full (or another sender raced this one); wait, then try again.
  bool try_claim(int dest, std::uint32_t cost) noexcept {
    peer& p = peers_[static_cast<std::size_t>(dest)];
    std::uint32_t s = p.sent.load(std::memory_order_relaxed);
    if (s - p.returned.load(std::memory_order_relaxed) >= window_) return false;
    return p.sent.compare_exchange_strong(s, s + cost, std::memory_order_relaxed);
  }
  bool window_full(int dest) const noexcept {
    const peer& p = peers_[static_cast<std::size_t>(dest)];
    return p.sent.load(std::memory_order_relaxed) - p.returned.load(std::memory_order_relaxed) >= window_;
  }
  // Charges `cost` credits without waiting (a send that must not wait). Returns true if the frame
  // goes beyond the window (an overdraft, counted in the statistics).
  bool charge(int dest, std::uint32_t cost) noexcept {
    peer& p = peers_[static_cast<std::size_t>(dest)];
    const std::uint32_t before = p.sent.fetch_add(cost, std::memory_order_seq_cst) -
                                 p.returned.load(std::memory_order_relaxed);
    if (before + cost > throttle_limit_) [[unlikely]]
      review_.store(true, std::memory_order_seq_cst);  // seq_cst: see review()
    return before + cost > window_;
  }
  // The count to piggyback on a frame to `dest` (it is reported by that frame).
  std::uint32_t report(int dest) noexcept {
    peer& p = peers_[static_cast<std::size_t>(dest)];
    const std::uint32_t v = p.counted.load(std::memory_order_relaxed);
    p.reported.store(v, std::memory_order_relaxed);
    return v;
  }

  // ---- receiving side (the progress lock's holder) ----

  // A frame of `cost` credits from `src` was taken in; `waits`: it carries k_flag_waits. Returns
  // true when a credit frame to `src` is due (send it with report(src)).
  bool take_in(int src, std::uint32_t cost, bool waits) noexcept {
    peer& p = peers_[static_cast<std::size_t>(src)];
    if (waits & throttled_) [[unlikely]] {
      p.withheld += cost;
      return false;
    }
    const std::uint32_t c = p.counted.load(std::memory_order_relaxed) + cost;
    p.counted.store(c, std::memory_order_relaxed);
    return c - p.reported.load(std::memory_order_relaxed) >= report_every_;
  }
  // `src` reports having returned `count` credits in all. False if that is more than this rank
  // ever sent it (a malformed frame). An older count (frames of two of its threads crossing) is
  // ignored.
  bool take_report(int src, std::uint32_t count) noexcept {
    peer& p = peers_[static_cast<std::size_t>(src)];
    const std::uint32_t r = p.returned.load(std::memory_order_relaxed);
    const std::uint32_t news = count - r;
    if (news == 0 || static_cast<std::int32_t>(news) < 0) return true;
    if (news > p.sent.load(std::memory_order_relaxed) - r) [[unlikely]]
      return false;
    p.returned.store(count, std::memory_order_relaxed);
    if (throttled_) [[unlikely]]
      review_.store(true, std::memory_order_relaxed);
    return true;
  }
  // A charge went over the throttle limit, or credits came back while throttled: review() due.
  bool review_due() const noexcept { return review_.load(std::memory_order_relaxed); }
  // Re-evaluates the throttle. When it ends, the withheld credits are counted again; `due` is
  // called for every peer a credit frame is then due to. Returns true if the throttle began.
  template <class Due>
  bool review(Due&& due) {
    // seq_cst with charge(): a charge this scan misses sets review_ again after this store.
    review_.store(false, std::memory_order_seq_cst);
    const bool over = over_limit();
    if (over == throttled_) return false;
    throttled_ = over;
    if (over) return true;
    for (int r = 0; r < size_; ++r) {
      peer& p = peers_[static_cast<std::size_t>(r)];
      if (p.withheld == 0) continue;
      p.counted.store(p.counted.load(std::memory_order_relaxed) + p.withheld, std::memory_order_relaxed);
      p.withheld = 0;
      if (p.counted.load(std::memory_order_relaxed) - p.reported.load(std::memory_order_relaxed) >= report_every_)
        due(r);
    }
    return false;
  }
  bool throttled() const noexcept { return throttled_; }

 private:
  bool over_limit() const noexcept;

  struct alignas(64) peer {
    std::atomic<std::uint32_t> sent{0};      // credits charged by frames to this peer (any sender)
    std::atomic<std::uint32_t> returned{0};  // the newest count the peer returned (lock holder)
    std::atomic<std::uint32_t> counted{0};   // credits of its frames taken in and not withheld (lock holder)
    std::atomic<std::uint32_t> reported{0};  // the last count sent to it (any sender)
    std::uint32_t withheld = 0;              // credits of its k_flag_waits frames withheld (lock holder)
  };
  int size_ = 0;
  std::uint32_t window_ = k_default_window;
  std::uint32_t report_every_ = k_default_window / 2;  // a credit frame once this many are unreported
  std::uint32_t throttle_limit_ = k_throttle_windows * k_default_window;
  std::unique_ptr<peer[]> peers_;
  std::atomic<bool> review_{false};
  bool throttled_ = false;  // lock holder
};

}  // namespace mdsm::net
