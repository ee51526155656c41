// Soak: a long mixed run -- locks, barriers, a work queue, RELEASE chains around the ring, and
// writes to own, shared and falsely shared pages -- that checks every value it reads and that
// resident memory and consistency metadata level off instead of growing with the run.
//
//   soak [--seconds S] [--csv FILE]
//
// Each round: every rank adds to counters under a few mutexes; writes its own block of pages, a
// few words of one page every rank writes (false sharing) and a word of a page another rank
// reads after the barrier; sends a RELEASE message with a pointer to what it wrote to the next
// rank, which forwards it once more (3+ ranks), so each message is checked two hops away; pushes work items
// pointing at its data and pops until the queue's round terminates, checking each item's
// bytes; then a barrier (which collects garbage past MDSM_GC_THRESHOLD). Rank 0 ends the run
// after S seconds (a flag in coherent memory, read after the barrier).
//
// Checks, all ranks: every value read is the one written; the counters add up. Plateau: the
// largest VmRSS and metadata_bytes in the last quarter of the rounds exceed those of the second
// quarter by at most 10% + 8 MiB (RSS) and 10% + 1 MiB (metadata), and metadata stays below
// 2 x MDSM_GC_THRESHOLD. Exit status 1 on any failure, with the reason.
#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr int k_mutexes = 4;
constexpr int k_lock_ops = 50;     // per rank and round
constexpr int k_block_pages = 8;   // each rank's own block
constexpr int k_items = 16;        // work items per rank and round
constexpr std::size_t k_page_words = 4096 / sizeof(std::uint64_t);

std::uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      std::uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}

// The value rank r writes at word w of round k: distinct for every (rank, word, round).
std::uint64_t stamp(int r, std::size_t w, std::uint64_t k) { return (k << 32) ^ (static_cast<std::uint64_t>(r) << 24) ^ w; }

struct shared_state {
  std::uint64_t counters[k_mutexes];
  std::uint64_t stop;
};

struct chain_msg {
  const std::uint64_t* data;  // the sender's block
  std::uint64_t round;
  int writer;
};

struct item {
  const std::uint64_t* data;
  std::uint64_t round;
  int writer;
  int index;
};

int failures = 0;
void fail(const char* what, int rank, std::uint64_t round, std::uint64_t got, std::uint64_t want) {
  if (failures++ < 10)
    std::fprintf(stderr, "soak: rank %d round %llu: %s: read %llx, want %llx\n", rank,
                 static_cast<unsigned long long>(round), what, static_cast<unsigned long long>(got),
                 static_cast<unsigned long long>(want));
}

void fail_growth(const char* what, int rank, std::uint64_t later, std::uint64_t earlier) {
  if (failures++ < 10)
    std::fprintf(stderr, "soak: rank %d: %s: %.2f MiB in the last quarter of the run, %.2f MiB in the second\n", rank,
                 what, later / 1048576.0, earlier / 1048576.0);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20;
  const char* csv = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv = argv[++i];
  }
  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), n = mdsm::size();
  const int next = (me + 1) % n;

  auto* st = static_cast<shared_state*>(mdsm::alloc_collective(sizeof(shared_state)));
  // Each rank's block, page aligned: k_block_pages pages per rank.
  auto* blocks = mdsm::alloc_collective_array<std::uint64_t>(static_cast<std::size_t>(n) * k_block_pages * k_page_words);
  // One page every rank writes a few words of (false sharing), and one word per rank that the
  // next rank reads the following round.
  auto* shared_page = mdsm::alloc_collective_array<std::uint64_t>(k_page_words);
  std::vector<std::unique_ptr<mdsm::mutex>> locks;
  for (int i = 0; i < k_mutexes; ++i) locks.push_back(std::make_unique<mdsm::mutex>(i % n));
  mdsm::barrier b;
  mdsm::work_queue q(mdsm::work_queue::order::fifo);
  if (me == 0) *st = shared_state{};

  std::mutex stored_mu;  // the handler (progress thread) stores, the application thread takes
  std::vector<mdsm::stored_message> stored;
  const auto chain = mdsm::register_handler("soak.chain", [&](mdsm::message& m) {
    std::lock_guard lk(stored_mu);
    stored.push_back(m.store());
  });
  b.arrive_and_wait();

  std::uint64_t* mine = blocks + static_cast<std::size_t>(me) * k_block_pages * k_page_words;
  struct sample {
    double t;
    std::uint64_t rss, meta;
  };
  std::vector<sample> samples;
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t round = 0;
  std::uint64_t chained = 0, popped = 0;
  for (;; ++round) {
    // Locks: counters under the mutexes.
    for (int i = 0; i < k_lock_ops; ++i) {
      auto& m = *locks[static_cast<std::size_t>((i + me) % k_mutexes)];
      std::lock_guard lk(m);
      ++st->counters[(i + me) % k_mutexes];
    }
    // Writes: a few words on every page of the own block (a different word each round, so every
    // page is rewritten partially), false sharing, and the word the next rank reads.
    for (int p = 0; p < k_block_pages; ++p)
      for (std::size_t w = round % 8; w < k_page_words; w += 64) mine[p * k_page_words + w] = stamp(me, p * k_page_words + w, round);
    for (std::size_t w = static_cast<std::size_t>(me); w < k_page_words / 2; w += static_cast<std::size_t>(n))
      shared_page[w] = stamp(me, w, round);
    shared_page[k_page_words / 2 + static_cast<std::size_t>(me)] = stamp(me, 0, round);
    // RELEASE chain: to the next rank, which checks and forwards once more.
    const chain_msg out{mine, round, me};
    mdsm::send(next, chain, std::as_bytes(std::span<const chain_msg, 1>(&out, 1)), mdsm::annotation::release);
    // Queue: items pointing at this rank's block.
    for (int i = 0; i < k_items; ++i) q.push_value(item{mine, round, me, i});
    while (auto it = q.pop_value<item>()) {
      const std::size_t w = static_cast<std::size_t>(it->index % k_block_pages) * k_page_words + it->round % 8;
      const std::uint64_t got = it->data[w];
      if (got != stamp(it->writer, w, it->round)) fail("queue item's data", me, round, got, stamp(it->writer, w, it->round));
      ++popped;
    }
    // Chain messages: a fresh one from the previous rank is forwarded on (at 3+ ranks), so the
    // next rank becomes consistent with its writer through this rank's records; a forwarded one
    // (origin != source), or any one at 1-2 ranks, is accepted and its data checked.
    const int want_msgs = n > 2 ? 2 : 1;
    for (int got_msgs = 0; got_msgs < want_msgs; ++got_msgs) {
      mdsm::wait_until([&] {
        std::lock_guard lk(stored_mu);
        return !stored.empty();
      });
      mdsm::stored_message sm;
      {
        std::lock_guard lk(stored_mu);
        sm = std::move(stored.front());
        stored.erase(stored.begin());
      }
      const chain_msg c = sm.as<chain_msg>();
      if (n > 2 && sm.origin() == sm.source()) {
        sm.forward(next);
        continue;
      }
      sm.accept();
      const std::size_t w = c.round % 8;
      if (c.data[w] != stamp(c.writer, w, c.round)) fail("chain message's data", me, round, c.data[w], stamp(c.writer, w, c.round));
      ++chained;
    }
    b.arrive_and_wait();
    // After the barrier: the previous rank's word and the false-shared words of every rank.
    const int prev = (me + n - 1) % n;
    const std::uint64_t pw = shared_page[k_page_words / 2 + static_cast<std::size_t>(prev)];
    if (pw != stamp(prev, 0, round)) fail("previous rank's word", me, round, pw, stamp(prev, 0, round));
    for (std::size_t w = 0; w < k_page_words / 2; w += 97) {
      const int writer = static_cast<int>(w % static_cast<std::size_t>(n));
      if (shared_page[w] != stamp(writer, w, round)) fail("false-shared word", me, round, shared_page[w], stamp(writer, w, round));
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back({t, rss_bytes(), mdsm::statistic("metadata_bytes")});
    if (me == 0 && t >= seconds) st->stop = 1;
    b.arrive_and_wait();
    if (st->stop) break;
    b.arrive_and_wait();  // nobody writes the next round before everyone read `stop`
  }
  const std::uint64_t rounds = round + 1;
  {
    std::lock_guard lk(*locks[0]);
    std::uint64_t sum = 0;
    for (int i = 0; i < k_mutexes; ++i) sum += st->counters[i];
    const std::uint64_t want = rounds * static_cast<std::uint64_t>(n) * k_lock_ops;
    if (sum != want) fail("lock counters' sum", me, round, sum, want);
  }

  // Plateau over the samples (rounds of similar work).
  const std::size_t s = samples.size();
  const std::uint64_t threshold = mdsm::gc_threshold();
  auto max_in = [&](std::size_t from, std::size_t to, auto field) {
    std::uint64_t m = 0;
    for (std::size_t i = from; i < to; ++i) m = std::max(m, samples[i].*field);
    return m;
  };
  bool plateau_checked = false;
  if (s >= 8) {
    plateau_checked = true;
    const std::uint64_t rss_q2 = max_in(s / 4, s / 2, &sample::rss), rss_q4 = max_in(3 * s / 4, s, &sample::rss);
    const std::uint64_t meta_q2 = max_in(s / 4, s / 2, &sample::meta), meta_q4 = max_in(3 * s / 4, s, &sample::meta);
    const std::uint64_t meta_max = max_in(0, s, &sample::meta);
    if (rss_q4 > rss_q2 + rss_q2 / 10 + (8u << 20)) fail_growth("resident memory keeps growing", me, rss_q4, rss_q2);
    if (meta_q4 > meta_q2 + meta_q2 / 10 + (1u << 20)) fail_growth("metadata keeps growing", me, meta_q4, meta_q2);
    if (threshold != 0 && meta_max > 2 * threshold) fail_growth("metadata above 2 x MDSM_GC_THRESHOLD", me, meta_max, 2 * threshold);
  }
  if (me == 0 && csv != nullptr) {
    if (std::FILE* f = std::fopen(csv, "w")) {
      std::fprintf(f, "t_s,rss_mib,metadata_mib\n");
      for (const auto& x : samples) std::fprintf(f, "%.3f,%.2f,%.3f\n", x.t, x.rss / 1048576.0, x.meta / 1048576.0);
      std::fclose(f);
    }
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) {
    std::printf("soak: %d ranks, %llu rounds in %.1f s, %llu chain messages and %llu items checked on rank 0; "
                "rank 0: RSS %.1f MiB -> %.1f MiB, metadata %.2f MiB -> %.2f MiB (max %.2f; GC threshold %.1f MiB)%s\n",
                n, static_cast<unsigned long long>(rounds), samples.back().t, static_cast<unsigned long long>(chained),
                static_cast<unsigned long long>(popped), samples.front().rss / 1048576.0,
                samples.back().rss / 1048576.0, samples.front().meta / 1048576.0, samples.back().meta / 1048576.0,
                max_in(0, s, &sample::meta) / 1048576.0, threshold / 1048576.0,
                plateau_checked ? "" : " (too few rounds to check the plateau)");
    std::printf(all_failures == 0 ? "soak passed\n" : "soak FAILED (%d problems)\n", all_failures);
  }
  mdsm::finalize();
  return all_failures == 0 ? 0 : 1;
}
