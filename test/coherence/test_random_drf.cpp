// Randomized data-race-free programs: every read must return the value sequential consistency
// gives (the property lazy release consistency promises for DRF programs).
//
// A seed generates one global schedule for all ranks: a sequence of steps, each run by one rank
// (write a word, read a word, send a RELEASE / RELEASE_NT directly or through a relay that
// forwards it from its handler or stores it and forwards it later, receive a message and accept
// it) or by all (barrier, a barrier over a subset, a mutex phase, garbage collection). The
// generator keeps a vector clock per rank for the happened-before order the synchronization
// creates, and emits an access only if it is race free under that order: a write only if the
// word's last write and every read since are ordered before it, a read only if the word's last
// write is ordered before it; the read's expected value is that write's. Every rank generates the
// same schedule, runs its own steps in order, and checks every read. Because the schedule is one
// sequential execution, a rank only waits for messages sent earlier in it: no deadlock.
//
// The shared words lie on a few pages, several per page (at page ends, adjacent, scattered), so
// pages are written by several ranks at once (false sharing: twins, diffs and merging). Each seed
// also picks: progress thread on or off, garbage collection at every barrier or not, the words in
// the collective arena or in one rank's arena (the others fetch whole pages from it), 1- or
// 2-page coherence units. Each seed runs in a fresh mdsm session, so a replay is faithful.
//
//   MDSM_DRF_SEEDS=n   how many seeds (default 60, from 1)
//   MDSM_DRF_SEED=n    run only seed n (replay a failure; use the same number of ranks)
//   MDSM_DRF_TRACE=1   print each rank's program
//   MDSM_DRF_GC=1      collect at every barrier in every seed (0: in none); stresses collections
// A failure prints the seed, the rank, the step and the word, and aborts the job; a seed that
// hangs is reported after 60 s.
#include "support/session.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using mdsm::annotation;
using namespace mdsm_test;

namespace {

constexpr std::size_t k_page_words = 1024;  // 4-byte words per 4 KiB coherence unit

enum class kind : std::uint8_t {
  write,         // word, value
  read,          // word, value = expected
  send,          // msg, dest (first hop), annot
  forward,       // msg, dest: a stored message at this relay goes on to its final receiver
  receive,       // msg: wait for it; accept it here if it was stored
  barrier,       // all ranks
  sub_barrier,   // the subset barrier's participants
  mutex_phase,   // all ranks: barrier; participants lock, check, add their bit; barrier
  gc,            // all ranks: barrier; mdsm::gc()
};

struct step {
  kind k;
  std::uint32_t word = 0;   // write/read: word index; mutex_phase: counter index
  std::uint32_t value = 0;  // write: value; read: expected; mutex_phase: counter value before
  std::uint32_t msg = 0;
  int dest = -1;
  annotation annot = annotation::release;
  bool takes_part = false;     // mutex_phase
  std::uint32_t others = 0;    // mutex_phase: bits the other participants add
  std::size_t global = 0;      // index in the global schedule (for messages)
};

// How a message travels: straight to its receiver, or through a relay.
enum class route : std::uint8_t { direct, forward_in_handler, store_then_forward };

struct message_plan {
  int sender, relay, receiver;
  route how;
  bool accept_in_handler;  // at the final receiver; otherwise stored and accepted by its receive step
};

struct word_state {
  int writer = -1;  // -1: the initial zero, ordered before everything
  std::uint32_t time = 0;
  std::uint32_t value = 0;
  std::vector<std::uint32_t> reads;  // per rank: clock of its latest read since the write (0: none)
};

struct program {
  std::vector<std::vector<step>> per_rank;
  std::vector<message_plan> messages;
  std::vector<std::size_t> word_offset;  // word index -> offset in words from the array start
  std::size_t pages = 0;
  std::vector<std::size_t> counter_offset;  // mutex-phase counters
  std::vector<std::uint32_t> final_values, final_counters;
  std::vector<int> subset;  // participants of the subset barrier (empty: none)
  bool progress_thread = true;
  bool gc_at_barriers = false;  // MDSM_GC_THRESHOLD=1: every global barrier collects
  int owner = -1;               // >= 0: the words live in this rank's arena (mdsm::alloc), so the
                                // others start with no copy and fetch whole pages from it
  std::size_t unit_pages = 1;   // coherence unit: 2 puts two of the test's pages in one unit
  std::string summary;
};

// The generator's model of happened-before: vc[r][q] = newest clock of rank q ordered before
// rank r's current point. An event of rank q at clock t is ordered before r's current point if
// q == r or vc[r][q] >= t.
struct model {
  explicit model(int n) : n(n), vc(static_cast<std::size_t>(n), std::vector<std::uint32_t>(static_cast<std::size_t>(n), 0)) {
    for (int r = 0; r < n; ++r) vc[r][r] = 1;
  }
  bool ordered(int q, std::uint32_t t, int r) const { return q < 0 || q == r || vc[r][q] >= t; }
  std::vector<std::uint32_t> release(int r) {
    auto copy = vc[r];
    ++vc[r][r];
    return copy;
  }
  void acquire(int r, const std::vector<std::uint32_t>& m) {
    for (int q = 0; q < n; ++q) vc[r][q] = std::max(vc[r][q], m[q]);
  }
  void barrier(const std::vector<int>& members) {
    std::vector<std::uint32_t> join(static_cast<std::size_t>(n), 0);
    for (int r : members)
      for (int q = 0; q < n; ++q) join[q] = std::max(join[q], vc[r][q]);
    for (int r : members) {
      vc[r] = join;
      ++vc[r][r];
    }
  }
  int n;
  std::vector<std::vector<std::uint32_t>> vc;
};

program generate(std::uint64_t seed, int n) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  auto pick = [&](std::size_t bound) { return static_cast<std::size_t>(rng() % bound); };
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };

  program p;
  p.per_rank.resize(static_cast<std::size_t>(n));
  p.pages = 2 + pick(5);                    // 2..6 pages
  const std::size_t per_page = 2 + pick(7);  // 2..8 words per page
  for (std::size_t pg = 0; pg < p.pages; ++pg) {
    std::vector<std::size_t> offs;
    while (offs.size() < per_page) {
      std::size_t o;
      switch (pick(4)) {
        case 0: o = chance(50) ? 0 : k_page_words - 1; break;                      // page ends
        case 1: o = offs.empty() ? pick(k_page_words) : std::min(offs.back() + 1, k_page_words - 1); break;  // adjacent
        default: o = pick(k_page_words);
      }
      if (std::find(offs.begin(), offs.end(), o) == offs.end()) offs.push_back(o);
    }
    for (std::size_t o : offs) p.word_offset.push_back(pg * k_page_words + o);
  }
  // Counters for mutex phases live on the same pages, at offsets no ordinary word uses.
  const std::size_t counters = 1 + pick(2);
  while (p.counter_offset.size() < counters) {
    const std::size_t o = pick(p.pages) * k_page_words + pick(k_page_words);
    if (std::find(p.word_offset.begin(), p.word_offset.end(), o) == p.word_offset.end() &&
        std::find(p.counter_offset.begin(), p.counter_offset.end(), o) == p.counter_offset.end())
      p.counter_offset.push_back(o);
  }
  if (n >= 3) {
    for (int r = 0; r < n; ++r)
      if (chance(60)) p.subset.push_back(r);
    if (p.subset.size() < 2) p.subset = {0, n - 1};
  }
  p.progress_thread = !chance(25);
  p.gc_at_barriers = chance(20);
  if (const char* g = std::getenv("MDSM_DRF_GC"); g != nullptr && *g != '\0') p.gc_at_barriers = *g == '1';
  const bool all_accept_in_handler = chance(30), none_accept_in_handler = chance(30);

  model m(n);
  const std::size_t words = p.word_offset.size();
  std::vector<word_state> ws(words);
  for (auto& w : ws) w.reads.assign(static_cast<std::size_t>(n), 0);
  std::vector<std::uint32_t> counter_value(counters, 0);
  std::vector<std::vector<std::uint32_t>> message_vc;
  // Messages waiting at a relay to be forwarded, and at their receiver to be received.
  std::vector<std::vector<std::uint32_t>> at_relay(static_cast<std::size_t>(n)), inbox(static_cast<std::size_t>(n));
  std::size_t global = 0;
  auto emit = [&](int r, step s) {
    s.global = global++;
    p.per_rank[static_cast<std::size_t>(r)].push_back(s);
  };
  auto emit_all = [&](step s) {
    s.global = global++;
    for (auto& prog : p.per_rank) prog.push_back(s);
  };
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) everyone[r] = r;
  int reads = 0, writes = 0, sends = 0, barriers = 0, phases = 0, gcs = 0;

  auto receive = [&](int r, std::size_t slot) {
    const std::uint32_t id = inbox[r][slot];
    inbox[r].erase(inbox[r].begin() + static_cast<std::ptrdiff_t>(slot));
    m.acquire(r, message_vc[id]);
    step s{kind::receive};
    s.msg = id;
    emit(r, s);
  };
  auto forward = [&](int r, std::size_t slot) {
    const std::uint32_t id = at_relay[r][slot];
    at_relay[r].erase(at_relay[r].begin() + static_cast<std::ptrdiff_t>(slot));
    step s{kind::forward};
    s.msg = id;
    s.dest = p.messages[id].receiver;
    emit(r, s);
    inbox[p.messages[id].receiver].push_back(id);
  };

  const int steps = 120 + static_cast<int>(pick(200));
  for (int i = 0; i < steps; ++i) {
    const int r = static_cast<int>(pick(static_cast<std::size_t>(n)));
    const int what = static_cast<int>(pick(1000));
    if (what < 380) {  // write
      for (int attempt = 0; attempt < 8; ++attempt) {
        const std::size_t w = pick(words);
        word_state& st = ws[w];
        if (!m.ordered(st.writer, st.time, r)) continue;
        bool reads_ordered = true;
        for (int q = 0; q < n; ++q)
          if (st.reads[q] != 0 && !m.ordered(q, st.reads[q], r)) reads_ordered = false;
        if (!reads_ordered) continue;
        st.writer = r;
        st.time = m.vc[r][r];
        st.value = static_cast<std::uint32_t>(rng()) | 1u;
        std::fill(st.reads.begin(), st.reads.end(), 0);
        step s{kind::write};
        s.word = static_cast<std::uint32_t>(w);
        s.value = st.value;
        emit(r, s);
        ++writes;
        break;
      }
    } else if (what < 700) {  // read
      for (int attempt = 0; attempt < 8; ++attempt) {
        const std::size_t w = pick(words);
        word_state& st = ws[w];
        if (!m.ordered(st.writer, st.time, r)) continue;
        st.reads[r] = std::max(st.reads[r], m.vc[r][r]);
        step s{kind::read};
        s.word = static_cast<std::uint32_t>(w);
        s.value = st.value;
        emit(r, s);
        ++reads;
        break;
      }
    } else if (what < 830) {  // send
      const int dest = static_cast<int>((r + 1 + pick(static_cast<std::size_t>(n - 1))) % static_cast<std::size_t>(n));
      message_plan mp{r, -1, dest, route::direct,
                      all_accept_in_handler ? true : none_accept_in_handler ? false : chance(50)};
      if (n >= 3 && chance(35)) {
        int relay;
        do relay = static_cast<int>(pick(static_cast<std::size_t>(n)));
        while (relay == r || relay == dest);
        mp.relay = relay;
        mp.how = chance(50) ? route::forward_in_handler : route::store_then_forward;
      }
      const auto id = static_cast<std::uint32_t>(p.messages.size());
      p.messages.push_back(mp);
      message_vc.push_back(m.release(r));
      step s{kind::send};
      s.msg = id;
      s.dest = mp.relay >= 0 ? mp.relay : dest;
      s.annot = chance(40) ? annotation::release_nt : annotation::release;
      emit(r, s);
      ++sends;
      if (mp.how == route::store_then_forward) at_relay[mp.relay].push_back(id);
      else inbox[dest].push_back(id);
    } else if (what < 960) {  // receive or forward something waiting here
      if (!at_relay[r].empty() && chance(50)) forward(r, pick(at_relay[r].size()));
      else if (!inbox[r].empty()) receive(r, pick(inbox[r].size()));
    } else if (what < 975) {
      m.barrier(everyone);
      emit_all(step{kind::barrier});
      ++barriers;
    } else if (what < 985 && !p.subset.empty()) {
      m.barrier(p.subset);
      step s{kind::sub_barrier};
      s.global = global++;
      for (int q : p.subset) p.per_rank[static_cast<std::size_t>(q)].push_back(s);
      ++barriers;
    } else if (what < 993) {
      // Barrier (reads of the counter before it are ordered before the phase's writes), then the
      // participants update the counter under the mutex, then a barrier.
      m.barrier(everyone);
      const std::uint32_t c = static_cast<std::uint32_t>(pick(counters));
      std::uint32_t bits = 0;
      std::vector<bool> part(static_cast<std::size_t>(n));
      for (int q = 0; q < n; ++q)
        if ((part[q] = chance(70))) bits |= 1u << q;
      for (int q = 0; q < n; ++q) {
        step s{kind::mutex_phase};
        s.global = global;
        s.word = c;
        s.value = counter_value[c];
        s.takes_part = part[q];
        s.others = bits & ~(1u << q);
        p.per_rank[q].push_back(s);
      }
      ++global;
      counter_value[c] += bits;  // distinct bits: the sum is their union
      m.barrier(everyone);
      ++phases;
    } else {
      m.barrier(everyone);
      emit_all(step{kind::gc});
      ++gcs;
    }
  }
  // Drain: every message forwarded and received, then a barrier and a final check of every word.
  for (int r = 0; r < n; ++r)
    while (!at_relay[r].empty()) forward(r, 0);
  for (int r = 0; r < n; ++r)
    while (!inbox[r].empty()) receive(r, 0);
  m.barrier(everyone);
  emit_all(step{kind::barrier});
  for (const auto& w : ws) p.final_values.push_back(w.value);
  p.final_counters = counter_value;
  // Drawn last so that adding them kept the schedules of earlier seeds.
  if (chance(40)) p.owner = static_cast<int>(pick(static_cast<std::size_t>(n)));
  if (chance(20)) p.unit_pages = 2;
  std::ostringstream sum;
  sum << p.pages << " pages, " << words << " words, " << writes << " writes, " << reads << " reads, " << sends
      << " messages, " << barriers << " barriers, " << phases << " mutex phases, " << gcs << " gc, progress thread "
      << (p.progress_thread ? "on" : "off") << (p.gc_at_barriers ? ", gc at every barrier" : "");
  if (p.owner >= 0) sum << ", words in rank " << p.owner << "'s arena";
  if (p.unit_pages > 1) sum << ", " << p.unit_pages << "-page units";
  p.summary = sum.str();
  return p;
}

// MDSM_DRF_TRACE=1: prints this rank's program (to follow a failing seed step by step).
void dump(const program& p, int me) {
  static const char* names[] = {"write", "read", "send", "forward", "receive", "barrier", "sub_barrier", "mutex_phase", "gc"};
  const auto& prog = p.per_rank[static_cast<std::size_t>(me)];
  for (std::size_t i = 0; i < prog.size(); ++i) {
    const step& st = prog[i];
    std::fprintf(stderr, "[rank %d] step %zu (global %zu): %s", me, i, st.global, names[static_cast<int>(st.k)]);
    if (st.k == kind::write || st.k == kind::read)
      std::fprintf(stderr, " word %u (page %zu, offset %zu) value %u", st.word, p.word_offset[st.word] / k_page_words,
                   p.word_offset[st.word] % k_page_words, st.value);
    if (st.k == kind::send || st.k == kind::forward || st.k == kind::receive) {
      const message_plan& mp = p.messages[st.msg];
      std::fprintf(stderr, " msg %u %d->%d->%d %s%s", st.msg, mp.sender, mp.relay, mp.receiver,
                   st.k == kind::send ? mdsm::to_string(st.annot) : "", mp.accept_in_handler ? " (accepted in handler)" : "");
    }
    std::fprintf(stderr, "\n");
  }
}

// Runs one seed on this rank; returns "" or a description of the first wrong read.
std::string run(std::uint64_t seed, const program& p) {
  mdsm::options opts;
  opts.coherent_size = std::size_t{64} << 20;
  opts.progress_thread = p.progress_thread;
  opts.unit_pages = p.unit_pages;
  if (p.gc_at_barriers) setenv("MDSM_GC_THRESHOLD", "1", 1);
  else unsetenv("MDSM_GC_THRESHOLD");
  session s(opts);
  const int me = mdsm::rank();
  if (const char* t = std::getenv("MDSM_DRF_TRACE"); t != nullptr && *t == '1') dump(p, me);

  const std::size_t nmsg = p.messages.size();
  std::vector<std::atomic<bool>> arrived(nmsg);
  std::mutex mu;
  std::map<std::uint32_t, mdsm::stored_message> stored;  // at relays and receivers
  struct wire {
    std::uint32_t id;
  };
  auto h = mdsm::register_handler("drf.message", [&](mdsm::message& msg) {
    const std::uint32_t id = msg.as<wire>().id;
    if (id >= nmsg) {
      std::fprintf(stderr, "[rank %d] MDSM_DRF_SEED=%llu: message id %u out of range\n", me,
                   static_cast<unsigned long long>(seed), id);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const message_plan& mp = p.messages[id];
    if (mp.receiver != me) {  // at the relay
      if (mp.how == route::forward_in_handler) {
        msg.forward(mp.receiver);
      } else {
        std::lock_guard lk(mu);
        stored.emplace(id, msg.store());
        arrived[id].store(true);
      }
      return;
    }
    if (mp.accept_in_handler) {
      msg.accept();
    } else {
      std::lock_guard lk(mu);
      stored.emplace(id, msg.store());
    }
    arrived[id].store(true);
  });
  mdsm::barrier all;
  std::unique_ptr<mdsm::barrier> sub;
  if (!p.subset.empty()) sub = std::make_unique<mdsm::barrier>(std::span<const int>(p.subset));
  mdsm::mutex locks[2];
  const std::size_t bytes = p.pages * k_page_words * 4;
  std::uint32_t* base = nullptr;
  if (p.owner < 0) {
    base = static_cast<std::uint32_t*>(mdsm::alloc_collective(bytes));
  } else {
    long long addr = 0;
    if (me == p.owner) addr = reinterpret_cast<long long>(mdsm::alloc(bytes));
    MPI_Bcast(&addr, 1, MPI_LONG_LONG, p.owner, MPI_COMM_WORLD);  // fresh memory: zero everywhere
    base = reinterpret_cast<std::uint32_t*>(addr);
  }
  auto word = [&](std::uint32_t w) -> std::uint32_t& { return base[p.word_offset[w]]; };
  auto counter = [&](std::uint32_t c) -> std::uint32_t& { return base[p.counter_offset[c]]; };
  all.arrive_and_wait();

  std::string failure;
  auto fail = [&](std::size_t i, const step& st, const char* what, std::uint32_t got, std::uint32_t want) {
    std::ostringstream o;
    o << "MDSM_DRF_SEED=" << seed << " with " << mdsm::size() << " ranks (" << p.summary << "): rank " << me
      << ", step " << i << " (global " << st.global << "): " << what << " word " << st.word << " got " << got
      << ", expected " << want;
    if (failure.empty()) failure = o.str();
  };
  // Stored messages left by a relay's forward step for this rank come back through `stored`.
  auto take = [&](std::uint32_t id) {
    mdsm::wait_until([&] { return arrived[id].load(); });
    std::lock_guard lk(mu);
    auto it = stored.find(id);
    if (it == stored.end()) return mdsm::stored_message{};
    auto msg = std::move(it->second);
    stored.erase(it);
    return msg;
  };

  const auto& prog = p.per_rank[static_cast<std::size_t>(me)];
  for (std::size_t i = 0; i < prog.size() && failure.empty(); ++i) {
    const step& st = prog[i];
    switch (st.k) {
      case kind::write: word(st.word) = st.value; break;
      case kind::read: {
        const std::uint32_t got = word(st.word);
        if (got != st.value) fail(i, st, "read of", got, st.value);
        break;
      }
      case kind::send: mdsm::send_value(st.dest, h, wire{st.msg}, st.annot); break;
      case kind::forward: {
        auto msg = take(st.msg);
        if (!msg) fail(i, st, "no stored message to forward for", st.msg, 0);
        else msg.forward(st.dest);
        break;
      }
      case kind::receive: {
        auto msg = take(st.msg);
        if (msg) msg.accept();
        break;
      }
      case kind::barrier: all.arrive_and_wait(); break;
      case kind::sub_barrier: sub->arrive_and_wait(); break;
      case kind::mutex_phase: {
        all.arrive_and_wait();
        if (st.takes_part) {
          mdsm::mutex& mx = locks[st.word % 2];
          std::lock_guard lk(mx);
          std::uint32_t& c = counter(st.word);
          const std::uint32_t seen = c - st.value;  // the bits some participants added already
          const std::uint32_t mine = 1u << me;
          if ((seen & ~st.others) != 0) fail(i, st, "mutex-protected counter", c, st.value);
          c = c + mine;
        }
        all.arrive_and_wait();
        break;
      }
      case kind::gc:
        all.arrive_and_wait();
        mdsm::gc();
        break;
    }
  }
  if (failure.empty()) {
    for (std::uint32_t w = 0; w < p.final_values.size(); ++w)
      if (word(w) != p.final_values[w]) {
        fail(prog.size(), step{kind::read, w}, "final read of", word(w), p.final_values[w]);
        break;
      }
    for (std::uint32_t c = 0; c < p.final_counters.size(); ++c)
      if (counter(c) != p.final_counters[c]) {
        fail(prog.size(), step{kind::read, c}, "final read of counter", counter(c), p.final_counters[c]);
        break;
      }
  }
  // A failed rank stops early and its peers may wait for it forever (destroying the mdsm objects
  // is collective too), so the failure ends the job here.
  if (!failure.empty()) {
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", me, failure.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  all.arrive_and_wait();
  return failure;
}

// Prints the seed and aborts the job if one seed hangs (a protocol deadlock would otherwise end
// in a silent test timeout).
class watchdog {
 public:
  watchdog() : thread_([this] { loop(); }) {}
  ~watchdog() {
    stop_ = true;
    thread_.join();
  }
  void start(std::uint64_t seed) {
    seed_ = seed;
    since_ = now();
    armed_ = true;
  }
  void stop() { armed_ = false; }

 private:
  static long now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void loop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (armed_ && now() - since_ > 60000) {
        std::fprintf(stderr, "[rank %d] random DRF program MDSM_DRF_SEED=%llu hangs (60 s); aborting the job\n",
                     world_rank(), static_cast<unsigned long long>(seed_.load()));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }
  std::atomic<bool> stop_{false}, armed_{false};
  std::atomic<std::uint64_t> seed_{0};
  std::atomic<long> since_{0};
  std::thread thread_;
};

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::strtoull(v, nullptr, 0);
}

}  // namespace

TEST_CASE("random data-race-free programs read what sequential consistency gives", "[mpi][drf][np2+]") {
  MDSM_NEED_RANKS(2);
  const int n = world_size();
  std::uint64_t first = 1, count = env_number("MDSM_DRF_SEEDS", 60);
  if (const char* one = std::getenv("MDSM_DRF_SEED"); one != nullptr && *one != '\0') {
    first = env_number("MDSM_DRF_SEED", 1);
    count = 1;
  }
  if (world_rank() == 0)
    std::fprintf(stderr, "random DRF: seeds %llu..%llu on %d ranks (MDSM_DRF_SEED=n replays one)\n",
                 static_cast<unsigned long long>(first), static_cast<unsigned long long>(first + count - 1), n);
  watchdog dog;
  for (std::uint64_t seed = first; seed < first + count; ++seed) {
    const program p = generate(seed, n);
    CAPTURE(seed, p.summary);
    dog.start(seed);
    const std::string failure = run(seed, p);
    dog.stop();
    if (!failure.empty()) {
      std::fprintf(stderr, "[rank %d] %s\n", world_rank(), failure.c_str());
      FAIL(failure);  // the listener aborts the job: the other ranks may be waiting for this one
    }
  }
  unsetenv("MDSM_GC_THRESHOLD");
}
