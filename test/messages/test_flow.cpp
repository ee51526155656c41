// Flow control across real ranks (lib/net/flow.hpp): floods of messages to a rank that does not
// take them in keep every rank's memory bounded, lose nothing and keep per-sender order; ranks
// flooding each other both finish; handlers that send while their rank has no credits neither
// block nor lose anything, and a rank whose handlers pass a flood on to a rank that computes
// slows the flood's source instead of filling that rank.
//
// Memory is the process's peak resident size (VmHWM in /proc/self/status) above its resident
// size before the flood, with the peak reset first (writing 5 to /proc/self/clear_refs). Without
// flow control, MPI buffers every message the receiver has not taken in: over TCP (run with
// `tools/mdsmrun --mca btl self,tcp`, as the suite does) ~880 bytes each, so the 120,000
// messages of these floods grew the receiver by ~100 MB; with credits a few hundred KB.
//
// A rank "computes" here by spending a fixed time in plain MPI calls with its progress thread
// paused, like an MPI program's own communication phase: MPI moves incoming messages into its
// buffers, mdsm takes nothing in. FLOW_VERBOSE=1 (mdsmrun -x FLOW_VERBOSE) prints every rank's
// growth.
#include "support/session.hpp"

#include <mdsm/mdsm.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using mdsm::annotation;
using namespace mdsm_test;

namespace {

constexpr long k_total = 120'000;      // messages per flood, over all senders
constexpr long k_large_every = 1'000;  // every this many messages of a sender is a large one
constexpr std::size_t k_large_bytes = 200'000;
// The bound every rank's growth must stay under: credits allow ~1 MiB per pair; the rest is
// slack for the test's own allocations. The floods above reach several times this without them.
constexpr long k_bound_kb = 8 * 1024;

// Under a sanitizer the peak resident size says nothing about what mdsm holds: ASan keeps freed
// blocks in its quarantine (256 MiB by default) and TSan maps shadow memory as the process
// touches memory, so a bounded flood grows it too (55 MB at 3 ranks under ASan). The bound is
// checked in the normal build; sanitizer builds check everything else.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool k_memory_checked = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool k_memory_checked = false;
#else
constexpr bool k_memory_checked = true;
#endif
#else
constexpr bool k_memory_checked = true;
#endif

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') return std::atol(line.c_str() + n + 1);
  return -1;
}

// The growth of this process's peak resident size from construction on.
struct memory_watch {
  long before_kb;
  memory_watch() {
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current VmRSS
    before_kb = status_kb("VmRSS");
  }
  long growth_kb() const { return status_kb("VmHWM") - before_kb; }
};

// One message of a flood: who sent it, its place in the sender's sequence, and a check word.
struct item {
  int from;
  int seq;
  std::uint64_t check;
};
std::uint64_t check_of(int from, int seq) { return 0xC2B2AE3D27D4EB4Full * static_cast<std::uint64_t>(from * 7919 + seq + 1); }

bool is_large(int seq) { return seq % k_large_every == k_large_every - 1; }
std::byte large_byte(int from, int seq, std::size_t i) { return static_cast<std::byte>((i * 31 + seq + from) & 0xFF); }

// Sends message `seq` of this rank's flood to `dest`: an item, or an item followed by a large
// body (every k_large_every-th message).
void send_item(int dest, mdsm::handler_id h, int seq, std::vector<std::byte>& large) {
  const item it{mdsm::rank(), seq, check_of(mdsm::rank(), seq)};
  if (!is_large(seq)) return mdsm::send_value(dest, h, it, annotation::none);
  large.resize(k_large_bytes);
  std::memcpy(large.data(), &it, sizeof it);
  for (std::size_t i = sizeof it; i < large.size(); ++i) large[i] = large_byte(it.from, seq, i);
  mdsm::send(dest, h, large, annotation::none);
}

// Per-sender order and integrity of received items. Handlers run one at a time.
struct receiver {
  explicit receiver(int n) : next(static_cast<std::size_t>(n), 0) {}
  std::vector<int> next;
  std::atomic<long> got{0};
  std::atomic<long> bad{0};
  void take(const mdsm::message& m) {
    const auto p = m.payload();
    item it{};
    if (p.size() < sizeof it) {
      ++bad;
      return;
    }
    std::memcpy(&it, p.data(), sizeof it);
    bool ok = it.from == m.origin() && it.check == check_of(it.from, it.seq) &&
              it.seq == next[static_cast<std::size_t>(it.from)]++ &&
              p.size() == (is_large(it.seq) ? k_large_bytes : sizeof it);
    for (std::size_t i = sizeof it; ok && i < p.size(); i += 997) ok = p[i] == large_byte(it.from, it.seq, i);
    if (!ok) ++bad;
    got.fetch_add(1, std::memory_order_release);
  }
};

constexpr int k_tag_go_on = 4711;  // plain MPI, on MPI_COMM_WORLD: "stop computing"

// Spends `ms` in plain MPI calls (MPI progresses: it takes incoming messages into its buffers)
// with this rank's progress thread paused, so mdsm takes nothing in meanwhile; with `from` >= 0,
// stops early once rank `from` sends a k_tag_go_on message.
void compute_in_mpi(std::chrono::milliseconds ms, int from = -1) {
  mdsm::pause_progress_thread();
  int token = 0, done = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  if (from >= 0) MPI_Irecv(&token, 1, MPI_INT, from, k_tag_go_on, MPI_COMM_WORLD, &req);
  const auto end = std::chrono::steady_clock::now() + ms;
  while (!done && std::chrono::steady_clock::now() < end) {
    if (from >= 0) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    else MPI_Iprobe(MPI_ANY_SOURCE, k_tag_go_on, MPI_COMM_WORLD, &done, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (from >= 0 && !done) MPI_Wait(&req, MPI_STATUS_IGNORE);  // the message comes anyway
  mdsm::resume_progress_thread();
}

std::uint64_t stat_or_zero(const char* name) {
  const auto st = mdsm::statistics();
  const auto it = st.find(name);
  return it == st.end() ? 0 : it->second;
}

void report_growth(const char* what, long growth_kb) {
  if (growth_kb > k_bound_kb || std::getenv("FLOW_VERBOSE"))
    std::fprintf(stderr, "[rank %d] %s: peak memory grew by %ld KiB (bound %ld KiB)\n", mdsm::rank(), what, growth_kb,
                 k_bound_kb);
}

}  // namespace

TEST_CASE("flow: a flood of small and large messages to a rank that computes keeps memory bounded",
          "[mpi][flow][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const long per_sender = k_total / (n - 1);
  receiver in(n);
  const auto h = mdsm::register_handler("flow.flood", [&](mdsm::message& m) { in.take(m); });
  world_barrier();
  memory_watch mem;
  world_barrier();
  if (me != 0) {
    std::vector<std::byte> large;
    for (int seq = 0; seq < per_sender; ++seq) send_item(0, h, seq, large);
  } else {
    compute_in_mpi(std::chrono::milliseconds(500));
    mdsm::wait_until([&] { return in.got.load() == per_sender * (n - 1); });
    CHECK(in.bad.load() == 0);
    for (int r = 1; r < n; ++r) CHECK(in.next[static_cast<std::size_t>(r)] == per_sender);
  }
  world_barrier();
  const long growth = mem.growth_kb();
  report_growth("flood of a computing rank", growth);
  if (k_memory_checked) CHECK(growth < k_bound_kb);
  // The senders did run out of credits and wait (the receiver computed for 500 ms).
  if (me != 0) CHECK(stat_or_zero("flow_waits") > 0);
}

TEST_CASE("flow: ranks flooding each other at once all finish, with their progress threads paused",
          "[mpi][flow][np2+]") {
  // Every rank floods every other one; no progress thread runs, so frames are taken in only by
  // the senders themselves, while they wait for credits. A send that waited without delivering
  // would deadlock here. Twice: with the default window, and with a window of 16 credits, which
  // makes the waits frequent and caps the large frames' cost (49 credits) at the window. The
  // second flood is small: with 16 credits, a credit frame returns 8 of them, so on a loaded,
  // oversubscribed machine every 8 messages cost a round of the ranks' time slices.
  for (const char* window : {"", "16"}) {
    if (*window) setenv("MDSM_FLOW_WINDOW", window, 1);
    session s;
    unsetenv("MDSM_FLOW_WINDOW");
    const int me = mdsm::rank(), n = mdsm::size();
    const long per_pair = *window ? k_large_every : k_total / 2 / (n * (n - 1) / 2);
    receiver in(n);
    const auto h = mdsm::register_handler("flow.mutual", [&](mdsm::message& m) { in.take(m); });
    mdsm::pause_progress_thread();
    world_barrier();
    memory_watch mem;
    std::vector<std::byte> large;
    for (int seq = 0; seq < per_pair; ++seq)
      for (int k = 1; k < n; ++k) send_item((me + k) % n, h, seq, large);
    mdsm::wait_until([&] { return in.got.load() == per_pair * (n - 1); });
    mdsm::resume_progress_thread();
    world_barrier();
    CHECK(in.bad.load() == 0);
    for (int r = 0; r < n; ++r)
      if (r != me) CHECK(in.next[static_cast<std::size_t>(r)] == per_pair);
    const long growth = mem.growth_kb();
    report_growth(*window ? "mutual flood, window 16" : "mutual flood", growth);
    if (k_memory_checked) CHECK(growth < k_bound_kb);
    CHECK(stat_or_zero("flow_waits") > 0);
  }
}

TEST_CASE("flow: a handler that replies while its rank has no credits neither blocks nor loses a reply",
          "[mpi][flow][np2+]") {
  // Ranks 0 and 1 flood each other; rank 0's handler also answers every message of rank 1 with a
  // reply to rank 1 -- sent from the handler, which runs while rank 0's own flood waits for rank
  // 1's credits, so the replies go beyond the window (overdraft) instead of waiting.
  session s;
  const int me = mdsm::rank();
  const long count = k_total / 4;
  receiver in(mdsm::size());
  std::atomic<long> replies{0}, reply_bad{0};
  long next_reply = 0;
  const auto h_reply = mdsm::register_handler("flow.reply", [&](mdsm::message& m) {
    if (m.as<long>() != next_reply++) ++reply_bad;
    replies.fetch_add(1, std::memory_order_release);
  });
  const auto h = mdsm::register_handler("flow.answered", [&](mdsm::message& m) {
    in.take(m);
    if (mdsm::rank() == 0) {
      const long seq = in.next[1] - 1;
      mdsm::send_value(1, h_reply, seq, annotation::none);
    }
  });
  mdsm::pause_progress_thread();
  world_barrier();
  memory_watch mem;
  if (me <= 1) {
    std::vector<std::byte> large;
    for (int seq = 0; seq < count; ++seq) send_item(1 - me, h, seq, large);
    mdsm::wait_until([&] { return in.got.load() == count && (me == 0 || replies.load() == count); });
  }
  mdsm::resume_progress_thread();
  world_barrier();
  CHECK(in.bad.load() == 0);
  CHECK(reply_bad.load() == 0);
  const long growth = mem.growth_kb();
  report_growth("replies without credits", growth);
  if (k_memory_checked) CHECK(growth < k_bound_kb);
  if (me == 0) CHECK(stat_or_zero("flow_overdrafts") > 0);
}

TEST_CASE("flow: a handler passing a flood on to a rank that computes slows the flood's source",
          "[mpi][flow][np3+]") {
  // Rank 1 floods rank 0, whose handler forwards every message to rank 2, which computes. Rank
  // 0's forwards never wait (a handler); once they run three windows ahead of rank 2, rank 0
  // withholds rank 1's credits, so rank 1 waits and rank 2's memory stays bounded. Rank 2
  // computes until rank 0 has throttled (or for 20 s: without flow control it never does).
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank();
  const long count = k_total / 4;
  receiver in(mdsm::size());
  const auto h = mdsm::register_handler("flow.passed", [&](mdsm::message& m) {
    if (mdsm::rank() == 0) return m.forward(2);
    in.take(m);
  });
  world_barrier();
  memory_watch mem;
  world_barrier();
  if (me == 1) {
    std::vector<std::byte> large;
    for (int seq = 0; seq < count; ++seq) send_item(0, h, seq, large);
  } else if (me == 2) {
    compute_in_mpi(std::chrono::seconds(30), 0);
    mdsm::wait_until([&] { return in.got.load() == count; });
    CHECK(in.bad.load() == 0);
    CHECK(in.next[1] == count);
  } else if (me == 0) {
    // The progress thread forwards; this thread only watches for the throttle.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (stat_or_zero("flow_throttles") == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int token = 0;
    MPI_Send(&token, 1, MPI_INT, 2, k_tag_go_on, MPI_COMM_WORLD);
  }
  world_barrier();
  const long growth = mem.growth_kb();
  report_growth("flood passed on by a handler", growth);
  if (k_memory_checked) CHECK(growth < k_bound_kb);
  if (me == 0) CHECK(stat_or_zero("flow_throttles") > 0);
  if (me == 1) CHECK(stat_or_zero("flow_waits") > 0);
}

TEST_CASE("flow: sends in an unthrottled_sends scope never wait, so a lock the handlers take may be held",
          "[mpi][flow][np2+]") {
  // Rank 0 sends more than a window to rank 1, which takes nothing in meanwhile, while holding a
  // lock its own handler takes: a send that waited would deliver frames and could run that
  // handler on this thread, which would block on the lock. In the scope the sends overdraw.
  session s;
  const int me = mdsm::rank();
  const long count = 2'000;  // > the default window of 256 credits
  std::mutex mu;
  receiver in(mdsm::size());
  const auto h = mdsm::register_handler("flow.unthrottled", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    in.take(m);
  });
  world_barrier();
  int token = 0;
  if (me == 0) {
    {
      std::lock_guard lk(mu);
      mdsm::unthrottled_sends scope;
      std::vector<std::byte> large;
      for (int seq = 0; seq < count; ++seq) send_item(1, h, seq, large);
    }
    CHECK(stat_or_zero("flow_waits") == 0);
    CHECK(stat_or_zero("flow_overdrafts") > 0);
    MPI_Send(&token, 1, MPI_INT, 1, 4712, MPI_COMM_WORLD);
  } else if (me == 1) {
    mdsm::pause_progress_thread();
    MPI_Recv(&token, 1, MPI_INT, 0, 4712, MPI_COMM_WORLD, MPI_STATUS_IGNORE);  // rank 0 sent all
    mdsm::resume_progress_thread();
    mdsm::wait_until([&] { return in.got.load() == count; });
    CHECK(in.bad.load() == 0);
  }
  // The C form nests per thread and refuses an end without a begin.
  CHECK(mdsm_unthrottled_begin() == MDSM_SUCCESS);
  CHECK(mdsm_unthrottled_begin() == MDSM_SUCCESS);
  CHECK(mdsm_unthrottled_end() == MDSM_SUCCESS);
  CHECK(mdsm_unthrottled_end() == MDSM_SUCCESS);
  CHECK(mdsm_unthrottled_end() == MDSM_ERR_INVALID_ARGUMENT);
  world_barrier();
}
