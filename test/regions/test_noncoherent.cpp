// The non-coherent region: allocation gives job-unique addresses (collective ones the same
// everywhere), get/put/atomics reach exactly the target rank's copy -- blocking and non-blocking,
// small and several MiB, from application threads and from handlers -- and misuse is a clear
// error. Run at 1-4 ranks and over TCP (test/meson.build).
#include "support/session.hpp"

#include <mdsm/mdsm.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace mdsm_test;

namespace {

// The byte at offset i of the pattern written by rank r (never the same for two ranks or two
// nearby offsets).
std::byte pattern(int r, std::size_t i) { return static_cast<std::byte>((i * 131 + static_cast<std::size_t>(r) * 29 + 7) & 0xff); }

void fill(std::byte* p, std::size_t n, int r, std::size_t from = 0) {
  for (std::size_t i = 0; i < n; ++i) p[i] = pattern(r, from + i);
}

// Index of the first byte that differs from rank r's pattern, or n. Compared with one memcmp
// first: under TSan every byte Open MPI wrote on another thread (ordered by MPI, which TSan cannot
// see) is a suppressed but costly race report when read one by one (minutes for 5 MiB, when the
// progress thread happened to run MPI's copy); the byte loop runs only to name a mismatch.
std::size_t first_mismatch(const std::byte* p, std::size_t n, int r, std::size_t from = 0) {
  std::vector<std::byte> want(n);
  fill(want.data(), n, r, from);
  if (std::memcmp(p, want.data(), n) == 0) return n;
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != want[i]) return i;
  return n;
}

std::vector<std::uint64_t> all_gather(const std::vector<std::uint64_t>& mine) {
  std::vector<std::uint64_t> out(mine.size() * static_cast<std::size_t>(world_size()));
  MPI_Request req;
  MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, out.data(), static_cast<int>(mine.size()),
                 MPI_UINT64_T, MPI_COMM_WORLD, &req);
  mdsm::wait_until([&] {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  return out;
}

// Whether this rank's gets and puts to `target` should be direct copies (one_sided.hpp): another
// rank of this host, MDSM_NONCOHERENT_DIRECT not 0, and a kernel that lets a process read another
// of the same user (Yama's ptrace_scope above 0 refuses it to all but root).
bool expect_direct(int target) {
  if (target == mdsm::rank()) return false;
  if (const char* d = std::getenv("MDSM_NONCOHERENT_DIRECT"); d != nullptr && std::string(d) == "0") return false;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int here = 0;
  MPI_Comm_size(node, &here);
  MPI_Comm_free(&node);
  if (here != world_size()) return false;
  int scope = 0;
  if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
    if (std::fscanf(f, "%d", &scope) != 1) scope = 0;
    std::fclose(f);
  }
  return scope == 0 || geteuid() == 0;
}

std::uint64_t load(const std::uint64_t* w) {
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(w)).load(std::memory_order_acquire);
}


}  // namespace

TEST_CASE("noncoherent: allocations are unique in the job, collective ones the same everywhere",
          "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const std::size_t sizes[] = {8, 100, 4096, 3 << 20, 17};
  std::vector<std::uint64_t> mine;
  for (std::size_t b : sizes) {
    auto* p = static_cast<std::byte*>(mdsm::nc_alloc(b));
    CHECK(mdsm::is_noncoherent(p));
    CHECK(mdsm::is_noncoherent(p + b - 1));
    CHECK_FALSE(mdsm::is_coherent(p));
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 16 == 0);
    std::memset(p, 0xab, b);  // this rank's bytes, usable at once
    mine.push_back(reinterpret_cast<std::uintptr_t>(p));
    mine.push_back(b);
  }
  // No two allocations of the job overlap.
  const auto all = all_gather(mine);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (std::size_t i = 0; i < all.size(); i += 2) ranges.emplace_back(all[i], all[i + 1]);
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) REQUIRE(ranges[i - 1].first + ranges[i - 1].second <= ranges[i].first);
  CHECK(ranges.size() == std::size(sizes) * static_cast<std::size_t>(n));
  // A collective allocation has one address on every rank.
  auto* c = mdsm::nc_alloc_collective(4096);
  CHECK(mdsm::is_noncoherent(c));
  const auto cs = all_gather({reinterpret_cast<std::uintptr_t>(c)});
  CHECK(std::all_of(cs.begin(), cs.end(), [&](std::uint64_t a) { return a == cs[0]; }));
  for (std::size_t i = 0; i < ranges.size(); ++i)  // and it is none of the ranks' own
    CHECK((ranges[i].first + ranges[i].second <= cs[0] || ranges[i].first >= cs[0] + 4096));
  if (n > 1)  // ranks passing different sizes are told so, on every rank
    CHECK_THROWS_MATCHES(mdsm::nc_alloc_collective(64 * static_cast<std::size_t>(me + 1)), mdsm::error,
                         code_is(MDSM_ERR_MISMATCH));
  // Another rank's allocation is freed by its owner; freeing it twice is a clear error.
  world_barrier();
  if (n > 1) {
    const int next = (me + 1) % n;
    void* theirs = reinterpret_cast<void*>(all[static_cast<std::size_t>(next) * mine.size()]);
    mdsm::nc_free(theirs);
    auto msg = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::nc_free(theirs); });
    CHECK(contains(msg, "not the start of a live allocation"));
  }
  world_barrier();
  for (std::size_t i = n > 1 ? 2 : 0; i < mine.size(); i += 2) mdsm::nc_free(reinterpret_cast<void*>(mine[i]));
  error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::nc_free(c); });  // collective: needs nc_free_collective
  mdsm::nc_free_collective(c);
  int local = 0;
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::nc_free(&local); });
  void* p = nullptr;
  CHECK(mdsm_nc_alloc(64, &p) == MDSM_SUCCESS);
  CHECK(mdsm_is_noncoherent(p) == 1);
  CHECK(mdsm_nc_free(p) == MDSM_SUCCESS);
  CHECK(mdsm_nc_free(p) == MDSM_ERR_INVALID_ARGUMENT);
  world_barrier();
}

TEST_CASE("noncoherent: each rank puts a pattern into the next rank's copy and gets it back",
          "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  constexpr std::size_t k_bytes = 3 * 4096 + 5;
  auto* buf = static_cast<std::byte*>(mdsm::nc_alloc_collective(k_bytes));
  std::memset(buf, 0, k_bytes);
  world_barrier();
  std::vector<std::byte> out(k_bytes), in(k_bytes);
  fill(out.data(), k_bytes, me);
  mdsm::put(next, buf, out.data(), k_bytes);
  world_barrier();
  // Our copy holds what the previous rank put, and only that.
  REQUIRE(first_mismatch(buf, k_bytes, prev) == k_bytes);
  world_barrier();  // before the previous rank writes our copy again, below
  mdsm::get(in.data(), next, buf, k_bytes);
  REQUIRE(first_mismatch(in.data(), k_bytes, me) == k_bytes);
  // Odd sizes at odd offsets: only the bytes named change.
  for (std::size_t off : {std::size_t{1}, std::size_t{4093}, std::size_t{8191}}) {
    for (std::size_t len : {std::size_t{1}, std::size_t{7}, std::size_t{4097}}) {
      if (off + len > k_bytes) continue;
      std::vector<std::byte> piece(len);
      fill(piece.data(), len, me + 100, off);
      mdsm::put(next, buf + off, piece.data(), len);
      std::vector<std::byte> back(len + 2);
      mdsm::get(back.data(), next, buf + off - 1, len + 2);
      CHECK(back[0] == pattern(me, off - 1));  // the bytes around are the earlier put's
      CHECK(first_mismatch(back.data() + 1, len, me + 100, off) == len);
      if (off + len < k_bytes) CHECK(back[len + 1] == pattern(me, off + len));
      mdsm::put(next, buf + off, out.data() + off, len);  // restore
    }
  }
  // A zero-byte transfer does nothing and completes at once.
  mdsm::put(next, buf, out.data(), 0);
  mdsm::get(in.data(), next, buf, 0);
  world_barrier();
  mdsm::nc_free_collective(buf);
}

TEST_CASE("noncoherent: many non-blocking gets and puts, completed in any order", "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr std::size_t k_requests = 96, k_piece = 200;
  auto* buf = static_cast<std::byte*>(mdsm::nc_alloc_collective(k_requests * k_piece * static_cast<std::size_t>(n)));
  world_barrier();
  std::mt19937 rng(static_cast<unsigned>(me) * 7919u + 1);
  // Every rank writes piece i of its own slice in every rank's copy (targets interleaved).
  std::vector<std::byte> out(k_requests * k_piece);
  fill(out.data(), out.size(), me);
  std::byte* slice = buf + static_cast<std::size_t>(me) * k_requests * k_piece;
  std::vector<mdsm::nc_request> reqs;
  std::vector<int> target_of;
  for (int t = 0; t < n; ++t)
    for (std::size_t i = 0; i < k_requests; ++i) {
      reqs.push_back(mdsm::put_nb(t, slice + i * k_piece, out.data() + i * k_piece, k_piece));
      target_of.push_back(t);
    }
  std::shuffle(reqs.begin(), reqs.end(), rng);
  // Half by wait(), half by polling test(), in a random order.
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    if (i % 2) {
      reqs[i].wait();
    } else {
      mdsm::wait_until([&] { return reqs[i].test(); });
    }
    CHECK(reqs[i].test());  // stays complete
    CHECK(reqs[i].value() == 0);
  }
  world_barrier();
  for (int r = 0; r < n; ++r)
    REQUIRE(first_mismatch(buf + static_cast<std::size_t>(r) * k_requests * k_piece, k_requests * k_piece, r) ==
            k_requests * k_piece);
  // Gets of every rank's slice from every rank, into private memory, completed in reverse.
  std::vector<std::byte> in(static_cast<std::size_t>(n) * static_cast<std::size_t>(n) * k_requests * k_piece);
  std::vector<mdsm::nc_request> gets;
  for (int t = 0; t < n; ++t)
    for (std::size_t i = 0; i < static_cast<std::size_t>(n) * k_requests; ++i)
      gets.push_back(mdsm::get_nb(in.data() + (static_cast<std::size_t>(t) * n * k_requests + i) * k_piece, t,
                                  buf + i * k_piece, k_piece));
  for (auto it = gets.rbegin(); it != gets.rend(); ++it) it->wait();
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < n; ++r) {
      const std::byte* got = in.data() + (static_cast<std::size_t>(t) * n + static_cast<std::size_t>(r)) * k_requests * k_piece;
      REQUIRE(first_mismatch(got, k_requests * k_piece, r) == k_requests * k_piece);
    }
  // A moved-from request is the null request.
  mdsm::nc_request moved = std::move(gets[0]);
  CHECK(moved);
  CHECK_FALSE(gets[0]);
  world_barrier();
  mdsm::nc_free_collective(buf);
}

TEST_CASE("noncoherent: transfers of several MiB, to and from private, non-coherent and coherent memory",
          "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const std::size_t k_bytes = (std::size_t{5} << 20) + 123;
  auto* buf = static_cast<std::byte*>(mdsm::nc_alloc_collective(k_bytes));
  std::vector<std::byte> out(k_bytes), in(k_bytes);
  fill(out.data(), k_bytes, me);
  world_barrier();
  mdsm::put(next, buf, out.data(), k_bytes);
  world_barrier();
  REQUIRE(first_mismatch(buf, k_bytes, prev) == k_bytes);
  mdsm::get(in.data(), next, buf, k_bytes);
  REQUIRE(first_mismatch(in.data(), k_bytes, me) == k_bytes);
  // From and into coherent memory (the get lands in a buffer; wait() copies it on this thread).
  const std::size_t k_coh = (std::size_t{1} << 20) + 77;
  auto* coh = static_cast<std::byte*>(mdsm::alloc(k_coh));
  std::memset(coh, 0, k_coh);
  auto r = mdsm::get_nb(coh, next, buf + 11, k_coh);
  r.wait();
  REQUIRE(first_mismatch(coh, k_coh, me, 11) == k_coh);
  fill(coh, k_coh, me + 50);
  world_barrier();
  mdsm::put(next, buf + 3, coh, k_coh);
  world_barrier();
  REQUIRE(first_mismatch(buf + 3, k_coh, prev + 50) == k_coh);
  // Into this rank's own copy at another offset (local: a plain copy).
  mdsm::get(buf + 2 * k_coh + 100, me, buf + 3, k_coh);
  REQUIRE(first_mismatch(buf + 2 * k_coh + 100, k_coh, prev + 50) == k_coh);
  world_barrier();
  mdsm::free(coh);
  mdsm::nc_free_collective(buf);
}

TEST_CASE("noncoherent: fetch_add from every rank on one word is exact and every old value distinct",
          "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int k_adds = 300;
  auto* words = static_cast<std::uint64_t*>(mdsm::nc_alloc_collective(4 * sizeof(std::uint64_t)));
  std::memset(words, 0, 4 * sizeof(std::uint64_t));
  world_barrier();
  const int owner = n - 1;  // its own adds take the local path, the others' come by message
  std::vector<std::uint64_t> olds;
  for (int i = 0; i < k_adds; ++i) {
    if (i % 3 == 0) {
      auto r = mdsm::fetch_add_nb(owner, &words[1], 1);
      r.wait();
      olds.push_back(r.value());
    } else {
      olds.push_back(mdsm::fetch_add(owner, &words[1], 1));
    }
    mdsm::fetch_add(owner, &words[2], static_cast<std::uint64_t>(me) + 1);  // different amounts
  }
  const auto all = all_gather(olds);
  std::set<std::uint64_t> distinct(all.begin(), all.end());
  CHECK(distinct.size() == all.size());
  CHECK(*distinct.begin() == 0);
  CHECK(*distinct.rbegin() == static_cast<std::uint64_t>(n) * k_adds - 1);
  world_barrier();
  CHECK(mdsm::fetch_add(owner, &words[1], 0) == static_cast<std::uint64_t>(n) * k_adds);
  CHECK(mdsm::fetch_add(owner, &words[2], 0) == static_cast<std::uint64_t>(n) * (n + 1) / 2 * k_adds);
  if (me == owner) CHECK(load(&words[1]) == static_cast<std::uint64_t>(n) * k_adds);
  else CHECK(load(&words[1]) == 0);  // our own copy was never touched
  // Wrapping modulo 2^64.
  if (me == 0) {
    CHECK(mdsm::compare_swap(owner, &words[3], 0, ~std::uint64_t{0}) == 0);
    CHECK(mdsm::fetch_add(owner, &words[3], 2) == ~std::uint64_t{0});
    CHECK(mdsm::fetch_add(owner, &words[3], 0) == 1);
  }
  world_barrier();
  mdsm::nc_free_collective(words);
}

TEST_CASE("noncoherent: atomics on one word from mapped peers, from peers sending messages and from its owner",
          "[mpi][noncoherent][np1]") {
  // Odd ranks start without mapped regions (their atomics travel as messages and the owner's
  // progress engine runs them), even ranks with them (hardware atomics through the mapping), and
  // the owner adds locally: all on one word at once, every add counted once, every old value seen
  // once; compare_swap increments from everyone as well.
  const char* before = std::getenv("MDSM_NONCOHERENT_MAP");
  const std::string saved = before != nullptr ? before : "";
  setenv("MDSM_NONCOHERENT_MAP", world_rank() % 2 == 1 ? "0" : "1", 1);
  {
    session s;
    const int n = mdsm::size();
    constexpr int k_adds = 2000, k_swaps = 300;
    auto* words = static_cast<std::uint64_t*>(mdsm::nc_alloc_collective(2 * sizeof(std::uint64_t)));
    words[0] = words[1] = 0;
    world_barrier();
    std::vector<std::uint64_t> olds;
    for (int i = 0; i < k_adds; ++i) olds.push_back(mdsm::fetch_add(0, &words[0], 1));
    for (int i = 0; i < k_swaps; ++i) {
      std::uint64_t seen = mdsm::fetch_add(0, &words[1], 0);
      for (;;) {
        const std::uint64_t was = mdsm::compare_swap(0, &words[1], seen, seen + 1);
        if (was == seen) break;
        seen = was;
      }
    }
    const auto all = all_gather(olds);
    std::set<std::uint64_t> distinct(all.begin(), all.end());
    CHECK(distinct.size() == all.size());
    CHECK(*distinct.rbegin() == static_cast<std::uint64_t>(n) * k_adds - 1);
    world_barrier();
    CHECK(mdsm::fetch_add(0, &words[0], 0) == static_cast<std::uint64_t>(n) * k_adds);
    CHECK(mdsm::fetch_add(0, &words[1], 0) == static_cast<std::uint64_t>(n) * k_swaps);
    world_barrier();
    mdsm::nc_free_collective(words);
  }
  if (before != nullptr) setenv("MDSM_NONCOHERENT_MAP", saved.c_str(), 1);
  else unsetenv("MDSM_NONCOHERENT_MAP");
}

TEST_CASE("noncoherent: compare_swap as a lock around a get/put counter, and as a counter",
          "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int k_rounds = 60;
  auto* w = static_cast<std::uint64_t*>(mdsm::nc_alloc_collective(3 * sizeof(std::uint64_t)));
  std::memset(w, 0, 3 * sizeof(std::uint64_t));
  world_barrier();
  std::uint64_t* lock = &w[0];
  std::uint64_t* counter = &w[1];
  std::uint64_t* cas_counter = &w[2];
  const std::uint64_t tag = static_cast<std::uint64_t>(me) + 1;
  for (int i = 0; i < k_rounds; ++i) {
    while (mdsm::compare_swap(0, lock, 0, tag) != 0) {
    }
    // Inside the lock: a plain read-modify-write by get and put (ordered: same thread, same rank).
    std::uint64_t v = 0;
    mdsm::get(&v, 0, counter, sizeof v);
    ++v;
    mdsm::put(0, counter, &v, sizeof v);
    REQUIRE(mdsm::compare_swap(0, lock, tag, 0) == tag);  // we held it
    // A counter by compare_swap alone: retry until the swap takes.
    std::uint64_t seen = mdsm::fetch_add(0, cas_counter, 0);
    for (;;) {
      const std::uint64_t old = mdsm::compare_swap(0, cas_counter, seen, seen + 1);
      if (old == seen) break;
      seen = old;
    }
  }
  world_barrier();
  if (me == 0) {
    CHECK(load(counter) == static_cast<std::uint64_t>(n) * k_rounds);
    CHECK(load(cas_counter) == static_cast<std::uint64_t>(n) * k_rounds);
    CHECK(load(lock) == 0);
  }
  // A failed swap changes nothing and returns the value.
  CHECK(mdsm::compare_swap(0, lock, 12345, 1) == 0);
  world_barrier();
  mdsm::nc_free_collective(w);
}

namespace {
// What the handler of the next test saw.
struct poke_state {
  std::mutex mu;
  std::vector<mdsm::nc_request> requests;  // issued in the handler, finished by the application
  std::atomic<int> pokes{0};
  std::atomic<int> refused_blocking{0}, refused_wait{0}, refused_coherent{0};
  std::byte* coherent = nullptr;
};
poke_state* g_poke = nullptr;

struct poke {
  std::uint64_t value;
  std::uint64_t* slot;     // in the sender's copy: put value there
  std::uint64_t* counter;  // in the sender's copy: fetch_add 1 there
};
}  // namespace

TEST_CASE("noncoherent: a handler issues non-blocking puts and atomics; blocking calls are refused there",
          "[mpi][noncoherent][np1]") {
  session s;
  poke_state state;
  g_poke = &state;
  const int me = mdsm::rank(), n = mdsm::size(), next = (me + 1) % n;
  state.coherent = static_cast<std::byte*>(mdsm::alloc(64));
  auto* w = static_cast<std::uint64_t*>(mdsm::nc_alloc_collective(2 * sizeof(std::uint64_t)));
  std::memset(w, 0, 2 * sizeof(std::uint64_t));
  const mdsm::handler_id h = mdsm::register_handler("test.nc.poke", [](mdsm::message& m) {
    const auto p = m.as<poke>();
    poke_state& st = *g_poke;
    std::uint64_t v = p.value;  // put_nb copies it: a local may go out of scope
    auto put = mdsm::put_nb(m.origin(), p.slot, &v, sizeof v);
    auto add = mdsm::fetch_add_nb(m.origin(), p.counter, 1);
    try {
      mdsm::get(&v, m.origin(), p.slot, sizeof v);
    } catch (const mdsm::error& e) {
      if (e.code() == MDSM_ERR_HANDLER_CONTEXT && std::string(e.what()).find("get_nb") != std::string::npos)
        ++st.refused_blocking;
    }
    try {
      add.wait();
    } catch (const mdsm::error& e) {
      if (e.code() == MDSM_ERR_HANDLER_CONTEXT) ++st.refused_wait;
    }
    try {
      mdsm::get_nb(st.coherent, m.origin(), p.slot, 8);
    } catch (const mdsm::error& e) {
      if (e.code() == MDSM_ERR_HANDLER_CONTEXT) ++st.refused_coherent;
    }
    (void)put.test();  // test() is allowed in a handler
    {
      std::lock_guard lk(st.mu);
      st.requests.push_back(std::move(put));
      st.requests.push_back(std::move(add));
    }
    st.pokes.fetch_add(1, std::memory_order_release);
  });
  world_barrier();
  const std::uint64_t value = 0x5eed0000 + static_cast<std::uint64_t>(me);
  const poke p{value, &w[0], &w[1]};
  mdsm::send_value(next, h, p, mdsm::annotation::none);
  // The next rank's handler writes our copy; we only watch it.
  mdsm::wait_until([&] { return load(&w[0]) == value && load(&w[1]) == 1; });
  mdsm::wait_until([&] { return state.pokes.load(std::memory_order_acquire) == 1; });
  std::vector<mdsm::nc_request> reqs;
  {
    std::lock_guard lk(state.mu);
    reqs.swap(state.requests);
  }
  REQUIRE(reqs.size() == 2);
  for (auto& r : reqs) r.wait();  // the application finishes what the handler started
  CHECK(reqs[1].value() == 0);    // the counter's old value
  CHECK(state.refused_blocking.load() == 1);
  CHECK(state.refused_wait.load() == 1);
  CHECK(state.refused_coherent.load() == 1);
  world_barrier();
  mdsm::free(state.coherent);
  mdsm::nc_free_collective(w);
  g_poke = nullptr;
}

TEST_CASE("noncoherent: misuse is a clear error and changes nothing", "[mpi][noncoherent][np1]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  auto* w = static_cast<std::uint64_t*>(mdsm::nc_alloc_collective(64));
  std::memset(w, 0, 64);
  int local = 0;
  std::uint64_t v = 0;
  auto* coh = static_cast<std::uint64_t*>(mdsm::alloc(64));
  // Remote addresses outside the region: private, coherent, running past the end.
  auto msg = error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::get(&v, me, &local, sizeof local); });
  CHECK(contains(msg, "non-coherent region"));
  CHECK(contains(msg, "nc_alloc"));
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::put(me, coh, &v, sizeof v); });
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::fetch_add(me, coh, 1); });
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::get_nb(&v, me, w, std::size_t{1} << 62); });
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::put_nb(me, w, &v, ~std::size_t{0}); });
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::compare_swap_nb(me, nullptr, 0, 1); });
  // Ranks out of range.
  msg = error_of(MDSM_ERR_INVALID_RANK, [&] { mdsm::get(&v, n, w, 8); });
  CHECK(contains(msg, "outside [0, "));
  error_of(MDSM_ERR_INVALID_RANK, [&] { mdsm::put(-1, w, &v, 8); });
  error_of(MDSM_ERR_INVALID_RANK, [&] { mdsm::fetch_add(n + 7, w, 1); });
  error_of(MDSM_ERR_INVALID_RANK, [&] { mdsm::compare_swap_nb(-3, w, 0, 1); });
  // Misaligned atomics.
  auto* odd = reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::byte*>(w) + 4);
  msg = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::fetch_add(me, odd, 1); });
  CHECK(contains(msg, "8-byte aligned"));
  error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::compare_swap(n - 1, odd, 0, 1); });
  // Null local buffers.
  error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::get(nullptr, me, w, 8); });
  error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::put_nb(n - 1, w, nullptr, 8); });
  // Null requests.
  mdsm::nc_request none;
  CHECK_FALSE(none);
  error_of(MDSM_ERR_INVALID_HANDLE, [&] { none.wait(); });
  error_of(MDSM_ERR_INVALID_HANDLE, [&] { (void)none.test(); });
  error_of(MDSM_ERR_INVALID_HANDLE, [&] { (void)none.value(); });
  // Nothing was written anywhere.
  world_barrier();
  for (int i = 0; i < 8; ++i) CHECK(load(&w[i]) == 0);
  // The C API: status codes and messages.
  CHECK(mdsm_get(&v, me, &local, sizeof local) == MDSM_ERR_NOT_IN_REGION);
  CHECK(contains(mdsm_last_error(), "non-coherent region"));
  CHECK(mdsm_put(n, w, &v, 8) == MDSM_ERR_INVALID_RANK);
  CHECK(mdsm_fetch_add(me, odd, 1, nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  mdsm_request req{0};
  CHECK(mdsm_request_wait(&req, nullptr) == MDSM_ERR_INVALID_HANDLE);
  CHECK(contains(mdsm_last_error(), "null request"));
  req.id = 987654321;
  int done = 0;
  CHECK(mdsm_request_test(&req, &done, nullptr) == MDSM_ERR_INVALID_HANDLE);
  CHECK(contains(mdsm_last_error(), "unknown"));
  CHECK(mdsm_request_free(&req) == MDSM_ERR_INVALID_HANDLE);
  CHECK(mdsm_request_wait(nullptr, nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_get_nb(&v, me, w, 8, nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  world_barrier();
  mdsm::free(coh);
  mdsm::nc_free_collective(w);
}

TEST_CASE("noncoherent: the C API's requests", "[mpi][noncoherent][np1]") {
  session s;
  int me = 0, n = 0;
  REQUIRE(mdsm_rank(&me) == MDSM_SUCCESS);
  REQUIRE(mdsm_size(&n) == MDSM_SUCCESS);
  const int next = (me + 1) % n;
  void* p = nullptr;
  REQUIRE(mdsm_nc_alloc_collective(4096, &p) == MDSM_SUCCESS);
  auto* w = static_cast<std::uint64_t*>(p);
  std::memset(w, 0, 4096);
  world_barrier();
  std::uint64_t value = 1000 + static_cast<std::uint64_t>(me);
  mdsm_request put{0};
  REQUIRE(mdsm_put_nb(next, &w[1], &value, sizeof value, &put) == MDSM_SUCCESS);
  CHECK(put.id != 0);
  int done = 0;
  while (!done) REQUIRE(mdsm_request_test(&put, &done, nullptr) == MDSM_SUCCESS);
  CHECK(put.id == 0);  // released
  CHECK(mdsm_request_wait(&put, nullptr) == MDSM_ERR_INVALID_HANDLE);
  mdsm_request add{0};
  REQUIRE(mdsm_fetch_add_nb(0, &w[0], 5, &add) == MDSM_SUCCESS);
  std::uint64_t old = ~std::uint64_t{0};
  REQUIRE(mdsm_request_wait(&add, &old) == MDSM_SUCCESS);
  CHECK(old % 5 == 0);
  CHECK(old < 5 * static_cast<std::uint64_t>(n));
  mdsm_request cas{0};
  REQUIRE(mdsm_compare_swap_nb(next, &w[2], 0, 7, &cas) == MDSM_SUCCESS);
  REQUIRE(mdsm_request_free(&cas) == MDSM_SUCCESS);  // detached: it still completes
  world_barrier();
  std::uint64_t got = 0;
  REQUIRE(mdsm_get(&got, next, &w[1], sizeof got) == MDSM_SUCCESS);
  CHECK(got == 1000 + static_cast<std::uint64_t>(me));
  REQUIRE(mdsm_compare_swap(next, &w[2], 7, 8, &old) == MDSM_SUCCESS);
  CHECK(old == 7);
  world_barrier();
  REQUIRE(mdsm_fetch_add(0, &w[0], 0, &old) == MDSM_SUCCESS);
  CHECK(old == 5 * static_cast<std::uint64_t>(n));
  world_barrier();
  REQUIRE(mdsm_nc_free_collective(p) == MDSM_SUCCESS);
}

TEST_CASE("noncoherent: a direct copy never overtakes an operation to the same rank still in messages",
          "[mpi][noncoherent]") {
  // Without mapped regions (the meson test with MDSM_NONCOHERENT_MAP=0) an atomic travels as
  // messages; a get of its word right after it would be a direct copy on one host -- and would
  // read the word before the atomic has run, unless it waits its turn (issue order: the get must
  // see the add). With mapped regions both are direct, and the same must hold.
  session s;
  const int next = (mdsm::rank() + 1) % mdsm::size();
  auto* word = static_cast<std::uint64_t*>(mdsm::nc_alloc_collective(64));
  world_barrier();
  for (std::uint64_t round = 1; round <= 200; ++round) {
    mdsm_request req;
    REQUIRE(mdsm_fetch_add_nb(next, word, 1, &req) == MDSM_SUCCESS);  // only this rank adds there
    std::uint64_t seen = 0;
    mdsm::get(&seen, next, word, sizeof seen);
    REQUIRE(seen == round);
    std::uint64_t old = 0;
    REQUIRE(mdsm_request_wait(&req, &old) == MDSM_SUCCESS);
    REQUIRE(old == round - 1);
  }
  // With nothing in messages any more, a get to a rank of this host is a direct copy again.
  const auto directs = stat("nc_direct");
  std::uint64_t seen = 0;
  mdsm::get(&seen, next, word, sizeof seen);
  CHECK(seen == 200);
  CHECK(stat("nc_direct") - directs == (expect_direct(next) ? 1u : 0u));
  world_barrier();
  mdsm::nc_free_collective(word);
}

TEST_CASE("noncoherent: a put from coherent pages this rank must fetch first", "[mpi][noncoherent]") {
  // The source is the previous rank's slice of a coherent array, just written there, so invalid
  // here: reading it faults and fetches. (It is copied before the transfer starts: a fault while
  // the transport built a frame from it once sent the fetch's requests from inside that frame.)
  session s;
  const int me = mdsm::rank(), n = mdsm::size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  constexpr std::size_t k_bytes = 3 * 4096 + 40;
  auto* coh = static_cast<std::byte*>(mdsm::alloc_collective(static_cast<std::size_t>(n) * 4 * 4096));
  auto* nc = static_cast<std::byte*>(mdsm::nc_alloc_collective(k_bytes));
  mdsm::barrier b;
  for (int round = 0; round < 10; ++round) {
    fill(coh + static_cast<std::size_t>(me) * 4 * 4096, k_bytes, me + round);
    b.arrive_and_wait();
    auto put = mdsm::put_nb(next, nc, coh + static_cast<std::size_t>(prev) * 4 * 4096, k_bytes);
    put.wait();
    std::vector<std::byte> back(k_bytes);
    mdsm::get(back.data(), next, nc, k_bytes);
    REQUIRE(first_mismatch(back.data(), k_bytes, prev + round) == k_bytes);
    b.arrive_and_wait();
  }
  mdsm::nc_free_collective(nc);
  mdsm::free_collective(coh);
}

TEST_CASE("noncoherent: gets and puts at every alignment of their two ends", "[mpi][noncoherent]") {
  // A direct copy whose ends are misaligned against each other goes through a bounce buffer, a
  // chunk at a time (one_sided.cpp); the bytes must be right at every relative offset, for a
  // transfer within one chunk and one across several.
  session s;
  const int me = mdsm::rank(), n = mdsm::size(), next = (me + 1) % n, prev = (me + n - 1) % n;
  constexpr std::size_t k_sizes[] = {3000, (std::size_t{600} << 10) + 5};
  constexpr std::size_t k_room = (std::size_t{600} << 10) + 256;
  auto* nc = static_cast<std::byte*>(mdsm::nc_alloc_collective(k_room));
  std::vector<std::byte> out(k_room), in(k_room);
  for (std::size_t bytes : k_sizes) {
    for (std::size_t remote_off : {std::size_t{0}, std::size_t{24}}) {
      for (std::size_t local_off = 0; local_off < 64; local_off += 8) {
        fill(out.data() + local_off, bytes, me + static_cast<int>(local_off));
        world_barrier();
        mdsm::put(next, nc + remote_off, out.data() + local_off, bytes);
        world_barrier();
        REQUIRE(first_mismatch(nc + remote_off, bytes, prev + static_cast<int>(local_off)) == bytes);
        mdsm::get(in.data() + local_off, next, nc + remote_off, bytes);
        REQUIRE(first_mismatch(in.data() + local_off, bytes, me + static_cast<int>(local_off)) == bytes);
      }
    }
  }
  world_barrier();
  mdsm::nc_free_collective(nc);
}

TEST_CASE("noncoherent: the statistics count each operation, its bytes and the bodies", "[mpi][noncoherent][np1]") {
  // Every rank issues to the next rank (itself at 1 rank): a small get and put, a 1 MiB get and
  // put (direct copies on one host, else bodies, unless the target is this rank or
  // MDSM_NONCOHERENT_BODY_MIN is raised), a fetch_add and a compare_swap. The counters move by
  // exactly that.
  session s;
  const int me = mdsm::rank(), n = mdsm::size(), next = (me + 1) % n;
  constexpr std::size_t big = std::size_t{1} << 20;
  auto* region = static_cast<std::byte*>(mdsm::nc_alloc_collective(big + 64));
  std::vector<std::byte> local(big, std::byte{7});
  world_barrier();
  const auto gets = stat("nc_gets"), get_bytes = stat("nc_get_bytes"), puts = stat("nc_puts"),
             put_bytes = stat("nc_put_bytes"), atomics = stat("nc_atomics"), bodies = stat("nc_bodies"),
             directs = stat("nc_direct");
  const bool direct = expect_direct(next);
  mdsm::put(next, region, local.data(), 40);
  mdsm::get(local.data(), next, region, 24);
  mdsm::put(next, region, local.data(), big);
  mdsm::get(local.data(), next, region, big);
  auto* word = reinterpret_cast<std::uint64_t*>(region + big);
  mdsm::fetch_add(next, word, 1);
  mdsm::compare_swap(next, word, 0, 5);
  CHECK(stat("nc_gets") - gets == 2);
  CHECK(stat("nc_get_bytes") - get_bytes == 24 + big);
  CHECK(stat("nc_puts") - puts == 2);
  CHECK(stat("nc_put_bytes") - put_bytes == 40 + big);
  CHECK(stat("nc_atomics") - atomics == 2);
  // 1 MiB is above the 4 KiB default (and the 64 KiB floor for gets into memory that is not page
  // aligned); the framed-path run sets MDSM_NONCOHERENT_BODY_MIN=1T.
  const bool framed = std::getenv("MDSM_NONCOHERENT_BODY_MIN") != nullptr;
  CHECK(stat("nc_bodies") - bodies == (next == me || framed || direct ? 0u : 2u));
  CHECK(stat("nc_direct") - directs == (direct ? 4u : 0u));  // the gets and puts, not the atomics
  // 8 KiB: a body for the put and for the get into page-aligned memory; frames for the get into
  // memory 16 bytes past a page boundary. The bytes are right either way.
  {
    constexpr std::size_t mid = 8192;
    auto* buf = static_cast<std::byte*>(std::aligned_alloc(4096, 3 * mid));
    for (std::size_t i = 0; i < mid; ++i) buf[i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(me)) & 0xff);
    const auto b0 = stat("nc_bodies");
    mdsm::put(next, region, buf, mid);
    mdsm::get(buf + mid, next, region, mid);
    mdsm::get(buf + 2 * mid + 16, next, region, mid - 16);
    CHECK(stat("nc_bodies") - b0 == (next == me || framed || direct ? 0u : 2u));
    CHECK(std::memcmp(buf + mid, buf, mid) == 0);
    CHECK(std::memcmp(buf + 2 * mid + 16, buf, mid - 16) == 0);
    std::free(buf);
  }
  world_barrier();
  mdsm::nc_free_collective(region);
}
