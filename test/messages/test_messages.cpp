// Annotated active messages across real ranks: round trips, forwarding, storage, order,
// tailoring of consistency information, and the fetch of missing information.
#include "support/session.hpp"

#include <mdsm/mdsm.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using mdsm::annotation;
using namespace mdsm_test;

namespace {
struct ping {
  int from;
  int seq;
  std::uint64_t check;
};
std::uint64_t checksum(int from, int seq) { return 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(from * 1000003 + seq); }
}  // namespace

TEST_CASE("round trip for each annotation", "[mpi][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  std::atomic<int> replies{0};
  std::atomic<int> bad{0};
  // The reply handler is registered first: the echo handler may run (on the progress thread)
  // as soon as it is registered, and it must see a valid reply id then.
  const mdsm::handler_id reply_h = mdsm::register_handler("test.reply", [&](mdsm::message& m) {
    const auto p = m.as<ping>();
    if (p.check != checksum(p.from, p.seq) || p.from != m.origin()) ++bad;
    if (m.annot() == annotation::release || m.annot() == annotation::release_nt) m.accept();
    ++replies;
  });
  const mdsm::handler_id echo_h = mdsm::register_handler("test.echo", [&](mdsm::message& m) {
    const auto p = m.as<ping>();
    if (p.check != checksum(p.from, p.seq) || p.from != m.origin() || m.source() != m.origin()) ++bad;
    if (m.annot() == annotation::release || m.annot() == annotation::release_nt) m.accept();
    const ping back{mdsm::rank(), p.seq, checksum(mdsm::rank(), p.seq)};
    mdsm::send_value(m.origin(), reply_h, back, m.annot());
  });
  const annotation kinds[] = {annotation::none, annotation::request, annotation::release, annotation::release_nt};
  int expected = 0;
  for (annotation a : kinds) {
    for (int round = 0; round < 50; ++round) {
      for (int dest = 0; dest < n; ++dest) {
        if (dest == me) continue;
        mdsm::send_value(dest, echo_h, ping{me, round, checksum(me, round)}, a);
        ++expected;
      }
    }
    mdsm::wait_until([&] { return replies.load() == expected; });
  }
  CHECK(bad.load() == 0);
  world_barrier();  // every rank has echoed every ping
  const auto st = mdsm::statistics();
  for (const char* k : {"msgs_sent_none", "msgs_sent_request", "msgs_sent_release", "msgs_sent_release_nt"})
    CHECK(st.at(k) == 2u * 50u * static_cast<unsigned>(n - 1));  // 50 pings + 50 echoes per peer
}

TEST_CASE("payloads of every size around the frame paths' limits arrive intact", "[mpi][np2+]") {
  // A NONE frame of up to 256 bytes is built on the stack with small payloads copied inline, up
  // to 1 KiB goes out with MPI_Send, larger ones through the staging buffer and MPI_Isend; the
  // receiver's message fields are read inline. Every size is checked byte for byte.
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<std::size_t> sizes;
  for (std::size_t len = 0; len <= 300; ++len) sizes.push_back(len);
  for (std::size_t len = 990; len <= 1060; ++len) sizes.push_back(len);
  for (std::size_t len : {4000u, 5000u, 20000u}) sizes.push_back(len);
  auto fill = [](int from, std::size_t len, std::size_t i) { return static_cast<std::byte>(from * 131 + len * 7 + i); };
  std::atomic<std::size_t> got{0};
  std::atomic<int> bad{0};
  std::mutex mu;
  std::vector<std::size_t> seen;
  std::string first_bad;  // guarded by mu
  // The handler may run before register_handler has returned here (another rank can finish
  // registering and send first), so the ids it sees are compared with the id afterwards.
  std::set<mdsm::handler_id> ids;  // guarded by mu
  const mdsm::handler_id h = mdsm::register_handler("test.sizes", [&](mdsm::message& m) {
    const auto p = m.payload();
    std::string why;
    if (m.origin() != prev || m.source() != prev)
      why = "origin " + std::to_string(m.origin()) + " source " + std::to_string(m.source());
    for (std::size_t i = 0; i < p.size() && why.empty(); ++i)
      if (p[i] != fill(prev, p.size(), i)) why = "byte " + std::to_string(i);
    if (!why.empty()) {
      ++bad;
      std::lock_guard lk(mu);
      if (first_bad.empty())
        first_bad = why + " of a " + std::to_string(p.size()) + "-byte " + mdsm::to_string(m.annot()) + " message";
    }
    if (m.annot() == annotation::release || m.annot() == annotation::release_nt) m.accept();
    {
      std::lock_guard lk(mu);
      ids.insert(m.handler());
      seen.push_back(p.size());
    }
    ++got;
  });
  const annotation kinds[] = {annotation::none, annotation::request, annotation::release, annotation::release_nt};
  std::size_t expected = 0;
  for (annotation a : kinds) {
    for (std::size_t len : sizes) {
      std::vector<std::byte> payload(len);
      for (std::size_t i = 0; i < len; ++i) payload[i] = fill(me, len, i);
      mdsm::send(next, h, payload, a);
    }
    expected += sizes.size();
    mdsm::wait_until([&] { return got.load() >= expected; });  // prev may be a round ahead
  }
  mdsm::wait_until([&] { return got.load() == 4 * sizes.size(); });
  INFO(first_bad);
  CHECK(bad.load() == 0);
  CHECK(ids == std::set<mdsm::handler_id>{h});
  std::vector<std::size_t> want;
  for (int k = 0; k < 4; ++k) want.insert(want.end(), sizes.begin(), sizes.end());
  CHECK(seen == want);  // every size once per annotation, in the order sent
  world_barrier();
}

TEST_CASE("messages to oneself are delivered like any other", "[mpi][np2+]") {
  session s;
  std::atomic<int> got{0};
  auto h = mdsm::register_handler("test.self", [&](mdsm::message& m) {
    if (m.origin() == mdsm::rank()) ++got;
    m.accept();
  });
  mdsm::send_value(mdsm::rank(), h, 1, annotation::release);
  mdsm::send_value(mdsm::rank(), h, 2, annotation::none);
  mdsm::wait_until([&] { return got.load() == 2; });
  world_barrier();
}

TEST_CASE("per-sender order holds under 100,000 messages", "[mpi][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const int total = 100'000;
  const int per_sender = total / (n - 1);
  std::vector<int> next(static_cast<std::size_t>(n), 0);
  std::atomic<int> received{0};
  std::atomic<int> out_of_order{0};
  auto h = mdsm::register_handler("test.order", [&](mdsm::message& m) {
    const auto p = m.as<ping>();
    // Handlers run one at a time, so `next` needs no lock.
    if (p.seq != next[static_cast<std::size_t>(p.from)]++) ++out_of_order;
    ++received;
  });
  if (me != 0) {
    for (int i = 0; i < per_sender; ++i) {
      mdsm::send_value(0, h, ping{me, i, 0}, annotation::none);
      if (i % 4096 == 0) mdsm::poll();  // let our own progress keep up with the sends
    }
  } else {
    mdsm::wait_until([&] { return received.load() == per_sender * (n - 1); });
    CHECK(out_of_order.load() == 0);
    for (int r = 1; r < n; ++r) CHECK(next[static_cast<std::size_t>(r)] == per_sender);
  }
  world_barrier();
}

TEST_CASE("large payloads take the large-frame path and keep their place in the order", "[mpi][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  std::atomic<int> received{0};
  std::atomic<int> bad{0};
  std::vector<int> next(static_cast<std::size_t>(n), 0);
  auto h = mdsm::register_handler("test.sizes", [&](mdsm::message& m) {
    auto p = m.payload();
    int seq;
    std::memcpy(&seq, p.data(), sizeof seq);
    const std::size_t want = seq % 3 == 0 ? 200'000 + static_cast<std::size_t>(seq) : 16 + static_cast<std::size_t>(seq);
    if (p.size() != want || seq != next[static_cast<std::size_t>(m.origin())]++) ++bad;
    for (std::size_t i = sizeof seq; i < p.size(); ++i)
      if (p[i] != static_cast<std::byte>((i + static_cast<std::size_t>(seq)) & 0xFF)) {
        ++bad;
        break;
      }
    m.accept();
    ++received;
  });
  const int count = 30;
  for (int dest = 0; dest < n; ++dest) {
    if (dest == me) continue;
    for (int seq = 0; seq < count; ++seq) {
      std::vector<std::byte> buf(seq % 3 == 0 ? 200'000 + static_cast<std::size_t>(seq) : 16 + static_cast<std::size_t>(seq));
      std::memcpy(buf.data(), &seq, sizeof seq);
      for (std::size_t i = sizeof seq; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i + static_cast<std::size_t>(seq)) & 0xFF);
      mdsm::send(dest, h, buf, seq % 2 ? annotation::release : annotation::none);
    }
  }
  mdsm::wait_until([&] { return received.load() == count * (n - 1); });
  CHECK(bad.load() == 0);
  CHECK(stat("large_frames") >= static_cast<std::uint64_t>((n - 1) * 10));
  world_barrier();
}

TEST_CASE("a forwarding chain of several hops keeps the origin and the payload", "[mpi][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  std::atomic<int> arrived{0};
  std::atomic<int> bad{0};
  // A message from rank 0 travels 1 -> 2 -> ... -> n-1 and is accepted there; every hop
  // forwards it unchanged.
  auto h = mdsm::register_handler("test.chain", [&](mdsm::message& m) {
    const auto p = m.as<ping>();
    if (m.origin() != 0 || p.from != 0 || p.check != checksum(0, p.seq)) ++bad;
    if (mdsm::rank() > 1 && m.source() != mdsm::rank() - 1) ++bad;
    if (mdsm::rank() < mdsm::size() - 1) {
      m.forward(mdsm::rank() + 1);
    } else {
      m.accept();
      ++arrived;
    }
  });
  const int count = 40;
  if (me == 0)
    for (int i = 0; i < count; ++i)
      mdsm::send_value(1, h, ping{0, i, checksum(0, i)}, i % 2 ? annotation::release : annotation::release_nt);
  if (me == n - 1) mdsm::wait_until([&] { return arrived.load() == count; });
  world_barrier();  // the last rank has everything, so every hop has forwarded
  if (me >= 1 && me < n - 1) CHECK(stat("msgs_forwarded") == static_cast<std::uint64_t>(count));
  CHECK(bad.load() == 0);
}

TEST_CASE("stored messages are accepted and forwarded later from the application thread", "[mpi][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  std::mutex mu;
  std::vector<mdsm::stored_message> kept;
  std::atomic<int> stored{0}, finals{0};
  auto final_h = mdsm::register_handler("test.final", [&](mdsm::message& m) {
    if (m.origin() == 0 && m.as<int>() >= 100) ++finals;
    m.accept();
  });
  auto keep_h = mdsm::register_handler("test.keep", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    kept.push_back(m.store());
    ++stored;
  });
  (void)final_h;
  if (me == 0)
    for (int i = 0; i < 10; ++i) mdsm::send_value(1, keep_h, 100 + i, annotation::release);
  if (me == 1) {
    mdsm::wait_until([&] { return stored.load() == 10; });
    std::lock_guard lk(mu);
    for (std::size_t i = 0; i < kept.size(); ++i) {
      CHECK(kept[i].origin() == 0);
      CHECK(kept[i].as<int>() == 100 + static_cast<int>(i));
      if (i % 2 == 0) {
        kept[i].accept();  // blocks until consistent
        CHECK(kept[i].disposed());
        CHECK(kept[i].as<int>() == 100 + static_cast<int>(i));  // still readable
      } else {
        // Forwarded stored messages are re-delivered to the target's handler for this id: the
        // store handler there keeps them again, so send them to a rank with a counting handler.
        kept[i].forward((me + 1) % n);
      }
    }
  }
  // The forwarded ones land in test.keep on the next rank (rank 0 when n == 2) and are stored.
  const int next = (1 + 1) % n;
  if (me == next) {
    mdsm::wait_until([&] { return stored.load() == 5; });
    std::lock_guard lk(mu);
    for (auto& m : kept) {
      CHECK(m.origin() == 0);
      CHECK(m.source() == 1);
      m.accept();
    }
  }
  world_barrier();
  CHECK(finals.load() == 0);
  std::lock_guard lk(mu);
  kept.clear();
}

TEST_CASE("the consistency work of a release and an acquire is timed on the application thread only",
          "[mpi][stats][np2+]") {
  // coherence_ns (the apps' "coherence" column) holds what an application thread does itself at
  // a RELEASE it sends and at a stored one it accepts: closing the interval, the notices applied.
  // Not the waits around them (sync_wait_ns), and not an accept inside a handler (handler_ns).
  session s;
  const int me = mdsm::rank();
  mdsm::set_statistics_timing(true);
  constexpr std::size_t k_units = 64, k_ints = 1024;  // one word written in each of 64 pages
  constexpr std::uint64_t k_late_ns = 30'000'000;
  int* block = mdsm::alloc_collective_array<int>(k_units * k_ints);
  std::mutex mu;
  std::vector<mdsm::stored_message> kept;
  std::atomic<int> taken{0};
  auto keep_h = mdsm::register_handler("test.timed.keep", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    kept.push_back(m.store());
  });
  auto take_h = mdsm::register_handler("test.timed.take", [&](mdsm::message& m) {
    m.accept();
    ++taken;
  });
  std::atomic<int> read{0};  // rank 1 has read the first values: rank 0 may write again
  auto read_h = mdsm::register_handler("test.timed.read", [&](mdsm::message&) { ++read; });
  world_barrier();
  if (me == 0) {
    for (std::size_t u = 0; u < k_units; ++u) block[u * k_ints] = static_cast<int>(u) + 1;
    const std::uint64_t work0 = stat("coherence_ns");
    mdsm::send_value(1, keep_h, 1, annotation::release);
    CHECK(stat("coherence_ns") > work0);
    mdsm::wait_until([&] { return read.load() == 1; });
    for (std::size_t u = 0; u < k_units; ++u) block[u * k_ints] = -static_cast<int>(u) - 1;
    std::this_thread::sleep_for(std::chrono::nanoseconds(k_late_ns));
    mdsm::send_value(1, take_h, 2, annotation::release);
  } else if (me == 1) {
    mdsm::wait_until([&] {
      std::lock_guard lk(mu);
      return kept.size() == 1;
    });
    const std::uint64_t work0 = stat("coherence_ns");
    kept[0].accept();
    const std::uint64_t work1 = stat("coherence_ns");
    CHECK(work1 > work0);
    for (std::size_t u = 0; u < k_units; ++u) CHECK(block[u * k_ints] == static_cast<int>(u) + 1);
    mdsm::send_value(0, read_h, 1, annotation::none);
    // The second RELEASE comes ~30 ms later and is accepted inside its handler.
    const std::uint64_t handlers = stat("handler_ns"), waited = stat("sync_wait_ns");
    const std::uint64_t work2 = stat("coherence_ns");
    mdsm::wait_until([&] { return taken.load() == 1; });
    CHECK(stat("sync_wait_ns") - waited >= k_late_ns / 2);
    CHECK(stat("handler_ns") > handlers);
    // (Unchanged, but for the tick-to-ns rate, which is measured anew at each read: < 0.1%.)
    CHECK(stat("coherence_ns") - work2 < 1000);
    CHECK(work1 - work0 > 1000);  // what the accept in the handler would have added, at least
    for (std::size_t u = 0; u < k_units; ++u) CHECK(block[u * k_ints] == -static_cast<int>(u) - 1);
  }
  mdsm::set_statistics_timing(false);
  world_barrier();
  kept.clear();
}

TEST_CASE("a paused progress thread delivers nothing; resumed, it delivers while the application computes",
          "[mpi][progress][np2+]") {
  session s;
  const int me = mdsm::rank();
  std::atomic<int> got{0}, pause_code{0};
  auto h = mdsm::register_handler("test.paused", [&](mdsm::message& m) {
    try {
      mdsm::pause_progress_thread();
    } catch (const mdsm::error& e) {
      pause_code = e.code();
    }
    got += m.as<int>();
  });
  if (me == 0) mdsm::pause_progress_thread();
  world_barrier();
  // Rank 1 sends only once rank 0 has left the barrier (whose wait delivers frames itself).
  int token = 0;
  if (me == 0) MPI_Send(&token, 1, MPI_INT, 1, 97, MPI_COMM_WORLD);
  if (me == 1) {
    MPI_Recv(&token, 1, MPI_INT, 0, 97, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    mdsm::send_value(0, h, 1, annotation::none);
    MPI_Send(&token, 1, MPI_INT, 0, 99, MPI_COMM_WORLD);
  }
  if (me == 0) {
    // Compute without entering mdsm: only the progress thread could deliver now.
    MPI_Recv(&token, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // 500 naps of an unpaused thread
    CHECK(got.load() == 0);
    mdsm::resume_progress_thread();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (got.load() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    CHECK(got.load() == 1);  // delivered by the resumed thread, not by us
    // Paused, a wait still delivers: the waiting thread polls for itself.
    mdsm::pause_progress_thread();
    MPI_Send(&token, 1, MPI_INT, 1, 98, MPI_COMM_WORLD);
    mdsm::wait_until([&] { return got.load() == 11; });
    mdsm::resume_progress_thread();
    CHECK(pause_code.load() == MDSM_ERR_HANDLER_CONTEXT);  // handlers may not pause it
  }
  if (me == 1) {
    MPI_Recv(&token, 1, MPI_INT, 0, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    mdsm::send_value(0, h, 10, annotation::none);
  }
  world_barrier();
}

TEST_CASE("one-way messages wake a progress thread that naps deep while its application computes",
          "[mpi][progress][np2+]") {
  // Deep naps of a minute (net/doorbells.hpp): only the senders' knocks can end them within this
  // test. Rank 0 computes without entering mdsm for up to 30 s while its progress thread naps;
  // every other rank sends it, once those naps have grown deep, a NONE and a RELEASE message
  // (one-way: neither expects a reply, so neither rings as a request does).
  ::setenv("MDSM_PROGRESS_DEEP_NAP_US", "60000000", 1);
  session s;
  ::unsetenv("MDSM_PROGRESS_DEEP_NAP_US");
  const int me = mdsm::rank();
  const int n = mdsm::size();
  std::atomic<int> got{0};
  auto h = mdsm::register_handler("test.deep", [&](mdsm::message& m) {
    if (m.annot() == annotation::release) m.accept();
    got += m.as<int>();
  });
  world_barrier();
  if (me != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0's naps grow to deep ones
    mdsm::send_value(0, h, 1, annotation::none);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // deep again after the first
    mdsm::send_value(0, h, 100, annotation::release);
  } else {
    const int want = 101 * (n - 1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (got.load() != want && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    CHECK(got.load() == want);  // delivered by the knocked progress thread, not by us
  }
  world_barrier();
}

TEST_CASE("a discarded stored RELEASE gives up its consistency; later acquires still see the writes",
          "[mpi][np2+]") {
  // Rank 0 writes x and sends rank 1 a RELEASE, which rank 1 stores and discards: no error, the
  // payload stays readable, and it cannot be disposed of again. Then rank 0 writes z and sends a
  // second RELEASE, which rank 1 accepts: its required time covers the first interval too, whose
  // records rank 1 dropped (rank 0 believes rank 1 has them, so it does not send them again), so
  // the acquire must fetch them: rank 1 then sees x as well as z.
  session s;
  const int me = mdsm::rank();
  auto* data = mdsm::alloc_collective_array<int>(3 * 1024);  // x, z: different pages
  int* x = data;
  int* z = data + 2 * 1024;
  std::mutex mu;
  std::vector<mdsm::stored_message> kept;
  auto keep_h = mdsm::register_handler("test.discard", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    kept.push_back(m.store());
  });
  mdsm::barrier b;
  if (me == 0) {
    *x = 7;
    mdsm::send_value(1, keep_h, 1, annotation::release);
  } else if (me == 1) {
    mdsm::wait_until([&] {
      std::lock_guard lk(mu);
      return kept.size() == 1;
    });
    std::lock_guard lk(mu);
    mdsm::stored_message& first = kept[0];
    CHECK_FALSE(first.disposed());
    first.discard();
    CHECK(first.disposed());
    CHECK(first.as<int>() == 1);  // still readable
    CHECK_THROWS_MATCHES(first.discard(), mdsm::error, code_is(MDSM_ERR_ALREADY_DISPOSED));
    CHECK_THROWS_MATCHES(first.accept(), mdsm::error, code_is(MDSM_ERR_ALREADY_DISPOSED));
    CHECK_THROWS_MATCHES(first.forward(0), mdsm::error, code_is(MDSM_ERR_ALREADY_DISPOSED));
    mdsm::poll();  // no deferred NOT_DISPOSED error either
  }
  world_barrier();  // plain MPI: no acquire on the way
  if (me == 0) {
    *z = 9;
    mdsm::send_value(1, keep_h, 2, annotation::release);
  } else if (me == 1) {
    mdsm::wait_until([&] {
      std::lock_guard lk(mu);
      return kept.size() == 2;
    });
    std::lock_guard lk(mu);
    kept[1].accept();
    CHECK(*z == 9);
    CHECK(*x == 7);
  }
  b.arrive_and_wait();
  CHECK(*x == 7);
  CHECK(*z == 9);
  CHECK(stat("msgs_discarded") == (me == 1 ? 1u : 0u));
  b.arrive_and_wait();
}

TEST_CASE("a RELEASE that brings nothing new completes on arrival; stored, accepted or forwarded it stays whole",
          "[mpi][np2+]") {
  // Rank 0 writes x and sends rank 1 a RELEASE: new to rank 1, which acquires it. Rank 0 then
  // sends two more without writing: rank 1 has every interval they carry, so they complete on
  // arrival (msgs_current) and their accept has nothing to do. The third is forwarded to rank 2,
  // which never acquired from rank 0: the frame still carries rank 0's consistency whole, so
  // rank 2 must acquire it and see x.
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  int* x = mdsm::alloc_collective_array<int>(1024);
  std::mutex mu;
  std::vector<mdsm::stored_message> kept;
  auto keep_h = mdsm::register_handler("test.current", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    kept.push_back(m.store());
  });
  auto wait_kept = [&](std::size_t count) {
    mdsm::wait_until([&] {
      std::lock_guard lk(mu);
      return kept.size() == count;
    });
  };
  if (me == 0) {
    *x = 5;
    mdsm::send_value(1, keep_h, 1, annotation::release);
  } else if (me == 1) {
    wait_kept(1);
    std::lock_guard lk(mu);
    CHECK(stat("msgs_current") == 0);
    kept[0].accept();
    CHECK(*x == 5);
  }
  world_barrier();  // plain MPI: no acquire on the way
  if (me == 0) {
    mdsm::send_value(1, keep_h, 2, annotation::release);
    mdsm::send_value(1, keep_h, 3, annotation::release_nt);
  } else if (me == 1) {
    wait_kept(3);
    std::lock_guard lk(mu);
    CHECK(stat("msgs_current") == 2);
    CHECK(kept[1].as<int>() == 2);
    kept[1].accept();
    CHECK(kept[1].disposed());
    if (n >= 3) kept[2].forward(2);
    else kept[2].accept();
    CHECK(kept[2].disposed());
    CHECK(*x == 5);
  } else if (me == 2) {
    wait_kept(1);
    std::lock_guard lk(mu);
    CHECK(kept[0].origin() == 0);
    CHECK(kept[0].source() == 1);
    CHECK(kept[0].as<int>() == 3);
    CHECK(stat("msgs_current") == 0);  // rank 2 lacked rank 0's interval
    kept[0].accept();
    CHECK(*x == 5);
  }
  world_barrier();
  CHECK(stat("msgs_accepted") == (me == 1 ? (n >= 3 ? 2u : 3u) : me == 2 ? 1u : 0u));
  std::lock_guard lk(mu);
  kept.clear();
}

namespace {
struct c_kept {
  std::atomic<mdsm_stored*> stored{nullptr};
};
void c_keep(mdsm_message* msg, void* ctx) {
  mdsm_stored* s = nullptr;
  if (mdsm_store(msg, &s) == MDSM_SUCCESS) static_cast<c_kept*>(ctx)->stored.store(s);
}
}  // namespace

TEST_CASE("C: mdsm_stored_discard, and its misuse", "[mpi][np2+]") {
  session s;
  const int me = mdsm::rank();
  c_kept kept;
  mdsm_handler_id h = 0;
  REQUIRE(mdsm_register_handler("test.c_discard", c_keep, &kept, &h) == MDSM_SUCCESS);
  CHECK(mdsm_stored_discard(nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  if (me == 0) {
    const int v = 5;
    REQUIRE(mdsm_send(1, h, &v, sizeof v, MDSM_RELEASE) == MDSM_SUCCESS);
  } else if (me == 1) {
    mdsm::wait_until([&] { return kept.stored.load() != nullptr; });
    mdsm_stored* st = kept.stored.load();
    CHECK(mdsm_stored_discard(st) == MDSM_SUCCESS);
    size_t len = 0;
    const void* p = mdsm_stored_payload(st, &len);
    REQUIRE(len == sizeof(int));
    int v = 0;
    std::memcpy(&v, p, sizeof v);
    CHECK(v == 5);
    CHECK(mdsm_stored_discard(st) == MDSM_ERR_ALREADY_DISPOSED);
    CHECK(mdsm_stored_accept(st) == MDSM_ERR_ALREADY_DISPOSED);
    mdsm_stored_free(st);  // reports nothing: it was disposed of
    CHECK(mdsm_poll() == MDSM_SUCCESS);
  }
  world_barrier();
}
