// Diffs: creation, application, merging of several writers, validation of malformed input, and
// every instruction-set path (scalar, AVX2, AVX-512 where the CPU has them) against a word-by-word
// reference encoder.
#include "coherence/diff.hpp"

#include <mdsm/error.hpp>

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using namespace mdsm::coherence;

namespace {
std::vector<std::byte> page_of(std::size_t n, unsigned seed) {
  std::vector<std::byte> p(n);
  std::mt19937 rng(seed);
  for (auto& b : p) b = static_cast<std::byte>(rng());
  return p;
}
void put_u32(std::vector<std::byte>& p, std::size_t word, std::uint32_t v) { std::memcpy(p.data() + 4 * word, &v, 4); }
std::vector<std::byte> bytes_of(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

// Every instruction set this CPU has, each forced in turn (restored afterwards).
std::vector<diff_isa> isas() {
  std::vector<diff_isa> v;
  for (diff_isa i : {diff_isa::scalar, diff_isa::avx2, diff_isa::avx512})
    if (diff_isa_supported(i)) v.push_back(i);
  return v;
}
struct isa_scope {
  diff_isa saved = diff_isa_in_use();
  explicit isa_scope(diff_isa i) { force_diff_isa(i); }
  ~isa_scope() { force_diff_isa(saved); }
};
const char* isa_name(diff_isa i) {
  return i == diff_isa::avx512 ? "avx512" : i == diff_isa::avx2 ? "avx2" : "scalar";
}

// The reference: word by word, the simplest encoder that meets the format (diff.hpp).
std::vector<std::byte> reference_diff(const std::vector<std::byte>& page, const std::vector<std::byte>& twin) {
  const std::size_t words = page.size() / 4, blocks = (words + 63) / 64, summary_words = (blocks + 63) / 64;
  std::vector<std::uint64_t> summary(summary_words, 0), masks;
  std::vector<std::byte> data;
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint64_t m = 0;
    for (std::size_t i = 0; i < 64 && 64 * b + i < words; ++i) {
      const std::size_t w = 64 * b + i;
      if (std::memcmp(page.data() + 4 * w, twin.data() + 4 * w, 4) == 0) continue;
      m |= std::uint64_t{1} << i;
      data.insert(data.end(), page.begin() + static_cast<std::ptrdiff_t>(4 * w),
                  page.begin() + static_cast<std::ptrdiff_t>(4 * w + 4));
    }
    if (m == 0) continue;
    summary[b / 64] |= std::uint64_t{1} << (b % 64);
    masks.push_back(m);
  }
  std::vector<std::byte> out;
  if (data.empty()) return out;
  auto put = [&](const std::vector<std::uint64_t>& v) {
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    out.insert(out.end(), p, p + 8 * v.size());
  };
  put(summary);
  put(masks);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Makes the diff of `page` against `twin`, requires it to be the reference encoding and to rebuild
// the page when applied to the twin, and returns it for further checks.
diff_bytes require_round_trip(const std::vector<std::byte>& page, const std::vector<std::byte>& twin) {
  auto d = make_diff(page.data(), twin.data(), page.size());
  REQUIRE(bytes_of(d) == reference_diff(page, twin));
  auto rebuilt = twin;
  apply_diff(rebuilt.data(), rebuilt.size(), d);
  REQUIRE(rebuilt == page);
  return d;
}
std::vector<std::byte> flipped(const std::vector<std::byte>& twin, const std::vector<std::size_t>& words) {
  auto page = twin;
  for (std::size_t w : words) {
    std::uint32_t v;
    std::memcpy(&v, twin.data() + 4 * w, 4);
    put_u32(page, w, ~v);
  }
  return page;
}
}  // namespace

TEST_CASE("an unchanged page gives an empty diff", "[unit][diff]") {
  for (diff_isa i : isas()) {
    isa_scope use(i);
    auto twin = page_of(4096, 1);
    auto page = twin;
    CHECK(make_diff(page.data(), twin.data(), page.size()).empty());
  }
}

TEST_CASE("diff round trip reproduces the page for many change patterns", "[unit][diff]") {
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    std::mt19937 rng(42);
    for (int trial = 0; trial < 500; ++trial) {
      const std::size_t n = 4096;
      auto twin = page_of(n, static_cast<unsigned>(trial));
      auto page = twin;
      const int changes = static_cast<int>(rng() % (trial % 5 == 0 ? 1100 : 200));
      for (int i = 0; i < changes; ++i) put_u32(page, rng() % (n / 4), static_cast<std::uint32_t>(rng()) | 1u);
      if (trial % 7 == 0) put_u32(page, 0, ~*reinterpret_cast<std::uint32_t*>(twin.data()));             // first word
      if (trial % 11 == 0) put_u32(page, n / 4 - 1, ~*reinterpret_cast<std::uint32_t*>(twin.data() + n - 4));  // last
      require_round_trip(page, twin);
    }
  }
}

TEST_CASE("diffs contain only changed words", "[unit][diff]") {
  std::vector<std::byte> twin(4096, std::byte{0});
  auto page = twin;
  put_u32(page, 1, 7);  // words 1 and 3 changed, word 2 unchanged between them
  put_u32(page, 3, 9);
  for (diff_isa i : isas()) {
    isa_scope use(i);
    auto d = make_diff(page.data(), twin.data(), 4096);
    CHECK(diff_words(d, 4096) == 2);
    CHECK(d.size() == 8 + 8 + 2 * 4);  // summary, one block mask, two words
    auto target = page_of(4096, 5);    // another writer's words stay as they are
    const auto before = target;
    apply_diff(target.data(), 4096, d);
    for (std::size_t w = 0; w < 1024; ++w)
      REQUIRE(std::memcmp(target.data() + 4 * w, (w == 1 || w == 3 ? page : before).data() + 4 * w, 4) == 0);
  }
}

TEST_CASE("diffs of two writers of one page merge (false sharing)", "[unit][diff]") {
  const std::size_t n = 4096;
  std::vector<std::byte> base(n, std::byte{0});
  auto a = base, b = base;
  for (std::size_t w = 0; w < n / 4; w += 2) put_u32(a, w, static_cast<std::uint32_t>(w + 1));      // even words
  for (std::size_t w = 1; w < n / 4; w += 2) put_u32(b, w, static_cast<std::uint32_t>(1000 + w));   // odd words
  for (diff_isa i : isas()) {
    isa_scope use(i);
    auto da = make_diff(a.data(), base.data(), n);
    auto db = make_diff(b.data(), base.data(), n);
    for (int order = 0; order < 2; ++order) {
      auto merged = base;
      apply_diff(merged.data(), n, order ? da : db);
      apply_diff(merged.data(), n, order ? db : da);
      for (std::size_t w = 0; w < n / 4; ++w) {
        std::uint32_t v;
        std::memcpy(&v, merged.data() + 4 * w, 4);
        REQUIRE(v == (w % 2 == 0 ? w + 1 : 1000 + w));
      }
    }
  }
}

TEST_CASE("malformed diffs are rejected and leave the page untouched", "[unit][diff]") {
  for (std::size_t n : {std::size_t{4096}, std::size_t{264}}) {  // 264 bytes: 66 words, a partial 2nd block
    std::vector<std::byte> page(n, std::byte{5});
    const auto before = page;
    auto bad = [&](std::vector<std::uint64_t> head, std::size_t data_words) {
      std::vector<std::byte> enc(8 * head.size() + 4 * data_words, std::byte{1});
      if (!head.empty()) std::memcpy(enc.data(), head.data(), 8 * head.size());  // memcpy must not see a null pointer
      try {
        apply_diff(page.data(), page.size(), enc);
        return false;
      } catch (const mdsm::error& e) {
        return e.code() == MDSM_ERR_MALFORMED;
      }
    };
    CHECK(bad({}, 1));                        // shorter than the summary
    CHECK(bad({1}, 0));                       // summary names a block, no mask
    CHECK(bad({1, 0}, 0));                    // empty block mask
    CHECK(bad({1, 3}, 1));                    // data shorter than the mask says
    CHECK(bad({1, 1}, 2));                    // trailing bytes
    CHECK(bad({1, 1}, 0));                    // no data at all
    CHECK(bad({std::uint64_t{1} << (n == 4096 ? 16 : 2), 1}, 1));  // a block outside the unit
    CHECK(bad({~std::uint64_t{0}, 1}, 1));    // so many blocks that the masks cannot be there
    if (n == 264) CHECK(bad({2, 4}, 1));      // word 66 of a 66-word unit
    CHECK(page == before);
  }
  std::vector<std::byte> page(4096, std::byte{5});
  apply_diff(page.data(), page.size(), {});  // empty: nothing changed
  CHECK(page == std::vector<std::byte>(4096, std::byte{5}));
  const std::uint64_t smallest[3] = {1, 1, 0x01010101};  // summary, mask: word 0; its data
  apply_diff(page.data(), page.size(), std::as_bytes(std::span(smallest)).first(20));
  CHECK(page[0] == std::byte{1});
  CHECK(page[4] == std::byte{5});
}

TEST_CASE("diff edge cases match the word-by-word reference", "[unit][diff]") {
  const std::size_t n = 4096, words = n / 4;
  const auto twin = page_of(n, 3);
  std::vector<std::vector<std::size_t>> patterns;
  patterns.push_back({0});                          // page start
  patterns.push_back({words - 1});                  // page end
  patterns.push_back({0, 1, 2, words - 2, words - 1});
  std::vector<std::size_t> alternating, all, boundary, long_run, one_block, group_edges;
  for (std::size_t w = 0; w < words; w += 2) alternating.push_back(w);  // every other word
  for (std::size_t w = 0; w < words; ++w) all.push_back(w);             // the whole page
  for (std::size_t w = 60; w < 70; ++w) boundary.push_back(w);          // crosses a 64-word block
  for (std::size_t w = 63; w < 63 + 130; ++w) long_run.push_back(w);    // spans three blocks
  for (std::size_t w = 128; w < 192; ++w) one_block.push_back(w);       // exactly one full block
  for (std::size_t w = 15; w < words; w += 16) group_edges.push_back(w);  // last word of each 16-word group
  patterns.push_back(alternating);
  for (std::size_t w = 1; w < words; w += 37) patterns.push_back({w});
  patterns.push_back(all);
  patterns.push_back(boundary);
  patterns.push_back(long_run);
  patterns.push_back(one_block);
  patterns.push_back(group_edges);
  patterns.push_back({63, 64});
  patterns.push_back({63, 65});
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    for (const auto& pat : patterns) {
      const auto page = flipped(twin, pat);
      const auto d = require_round_trip(page, twin);
      REQUIRE(diff_words(d, n) == std::vector<std::size_t>(pat).size());
    }
    CHECK(make_diff(flipped(twin, all).data(), twin.data(), n).size() == 8 + 16 * 8 + n);
  }
}

TEST_CASE("diffs of units that are not a multiple of 64 words, and of large units", "[unit][diff]") {
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    std::mt19937 rng(9);
    for (std::size_t n : {std::size_t{8}, std::size_t{24}, std::size_t{256}, std::size_t{264}, std::size_t{1000},
                          std::size_t{16384}, std::size_t{65536}, std::size_t{65536 + 8}}) {
      INFO(n << " bytes");
      const auto twin = page_of(n, static_cast<unsigned>(n));
      for (int trial = 0; trial < 50; ++trial) {
        std::vector<std::size_t> pat;
        const std::size_t words = n / 4;
        const std::size_t k = trial % 10 == 9 ? words : rng() % (words + 1);
        for (std::size_t i = 0; i < k; ++i) pat.push_back(trial % 10 == 9 ? i : rng() % words);
        if (trial % 5 == 0) pat.push_back(words - 1);
        const auto page = flipped(twin, pat);
        require_round_trip(page, twin);
      }
    }
  }
}

TEST_CASE("every number of changed words per block matches the reference", "[unit][diff]") {
  // AVX-512 copies blocks of up to four changed words word by word and gathers larger ones 16
  // words per round, so every count from 1 to 64 crosses some path boundary.
  const std::size_t n = 4096;
  const auto twin = page_of(n, 21);
  std::mt19937 rng(5);
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    for (std::size_t count = 1; count <= 64; ++count) {
      INFO(count << " words per block");
      std::vector<std::size_t> pat;
      for (std::size_t b = 0; b < n / 256; ++b) {
        std::vector<std::size_t> words(64);
        for (std::size_t i = 0; i < 64; ++i) words[i] = 64 * b + i;
        std::shuffle(words.begin(), words.end(), rng);
        const std::size_t k = b % 3 == 0 ? count : (count + b) % 65;  // neighbours of other counts
        pat.insert(pat.end(), words.begin(), words.begin() + static_cast<std::ptrdiff_t>(k));
      }
      const auto page = flipped(twin, pat);
      const auto d = require_round_trip(page, twin);
      REQUIRE(diff_words(d, n) == pat.size());
      REQUIRE(d.capacity() >= d.size());
    }
  }
}

TEST_CASE("dense diffs in a row each keep their own bytes; a moved-from diff is empty", "[unit][diff]") {
  // A dense diff keeps the buffer it was made in (its encoding need not start at the buffer's
  // start), so the next diff must be made in a new one.
  const std::size_t n = 4096;
  const auto twin = page_of(n, 8);
  std::vector<std::size_t> all(n / 4);
  for (std::size_t w = 0; w < all.size(); ++w) all[w] = w;
  const auto page1 = flipped(twin, all);
  auto page2 = page1;
  put_u32(page2, 5, 12345);
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    auto d1 = make_diff(page1.data(), twin.data(), n);
    const auto d2 = make_diff(page2.data(), twin.data(), n);
    REQUIRE(d1.data() != d2.data());
    CHECK(bytes_of(d1) == reference_diff(page1, twin));
    CHECK(bytes_of(d2) == reference_diff(page2, twin));
    CHECK(d1.capacity() >= d1.size());
    CHECK(d1.capacity() < 2 * d1.size());  // footprint() stays close to the bytes it holds
    const auto size1 = d1.size();
    diff_bytes moved = std::move(d1);
    CHECK(moved.size() == size1);
    CHECK(d1.empty());  // the moved-from state is what is tested
    CHECK(d1.data() == nullptr);
    CHECK(d1.capacity() == 0);
    auto rebuilt = twin;
    apply_diff(rebuilt.data(), n, moved);
    CHECK(rebuilt == page1);
  }
}

TEST_CASE("a dense diff's buffer, freed on its thread, is that thread's next work buffer", "[unit][diff]") {
  const std::size_t n = 4096;
  const auto twin = page_of(n, 21);
  std::vector<std::size_t> all(n / 4), some;
  for (std::size_t w = 0; w < all.size(); ++w) all[w] = w;
  for (std::size_t w = 0; w < all.size(); w += 9) some.push_back(w);
  const auto dense = flipped(twin, all), sparse = flipped(twin, some);
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    // On a fresh thread, whose work buffer is made for this unit: the test's thread keeps the
    // buffer of the largest unit an earlier test used, and a dense diff does not take a buffer
    // much larger than itself over (it is copied out instead). d2 then only landed at d1's
    // address when malloc handed the freed block back (glibc did; AddressSanitizer's quarantine
    // does not).
    struct {
      bool same_buffer = false, d2_right = false, d2_intact = false, d5_right = false;
    } got;
    std::thread([&] {
      auto d1 = make_diff(dense.data(), twin.data(), n);  // takes the thread's work buffer
      const std::byte* const at = d1.data();
      d1 = diff_bytes();  // gives it back
      const auto d2 = make_diff(dense.data(), twin.data(), n);
      got.same_buffer = d2.data() == at;  // made in the same buffer, nothing allocated
      got.d2_right = bytes_of(d2) == reference_diff(dense, twin);
      // A sparse diff is copied out of the work buffer: freeing it gives nothing back, and the
      // thread's buffer (now d2's) is not touched by it.
      auto d3 = make_diff(sparse.data(), twin.data(), n);
      d3 = diff_bytes();
      got.d2_intact = bytes_of(d2) == reference_diff(dense, twin);
      // Freed on a thread that has a work buffer of its own: plain free, d4 is still intact.
      auto d4 = make_diff(dense.data(), twin.data(), n);
      std::thread([&] {
        auto mine = make_diff(sparse.data(), twin.data(), n);  // this thread now has a buffer
        d4 = diff_bytes();
      }).join();
      const auto d5 = make_diff(dense.data(), twin.data(), n);
      got.d5_right = bytes_of(d5) == reference_diff(dense, twin);
    }).join();
    CHECK(got.same_buffer);
    CHECK(got.d2_right);
    CHECK(got.d2_intact);
    CHECK(got.d5_right);
  }
}

TEST_CASE("diffs made on several threads stay intact and are freed on another", "[unit][diff]") {
  // make_diff's buffers are per thread; diffs outlive the call and are freed by whoever drops
  // the last reference (the GC, on another thread).
  const std::size_t n = 4096;
  const auto twin = page_of(n, 13);
  std::vector<std::vector<std::byte>> pages;
  for (unsigned k = 0; k < 8; ++k) {
    std::vector<std::size_t> pat;
    for (std::size_t w = k; w < n / 4; w += 1 + k * k) pat.push_back(w);  // every word .. sparse
    pages.push_back(flipped(twin, pat));
  }
  constexpr int k_threads = 4, k_rounds = 200;
  std::vector<std::vector<diff_bytes>> made(k_threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < k_rounds; ++r) {
        const auto& page = pages[static_cast<std::size_t>(t + r) % pages.size()];
        made[static_cast<std::size_t>(t)].push_back(make_diff(page.data(), twin.data(), n));
      }
    });
  for (auto& th : threads) th.join();
  int wrong = 0;  // counted on the freeing thread: Catch2's assertions are for the test's thread
  std::thread freer([&] {
    for (int t = 0; t < k_threads; ++t)
      for (int r = 0; r < k_rounds; ++r) {
        const auto& page = pages[static_cast<std::size_t>(t + r) % pages.size()];
        auto& d = made[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
        auto rebuilt = twin;
        apply_diff(rebuilt.data(), n, d);
        wrong += rebuilt != page;
        d = diff_bytes();  // frees it here
      }
  });
  freer.join();
  CHECK(wrong == 0);
}

TEST_CASE("diffs never read or write outside the unit and the encoding", "[unit][diff]") {
  // Unit, twin and encoding each end right before an inaccessible page: a vector load or store
  // past their end would fault. The encoding also starts at odd addresses (frames are unaligned).
  const std::size_t ps = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t span = 8 * ps;
  auto* mem = static_cast<std::byte*>(mmap(nullptr, 3 * span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(mem != MAP_FAILED);
  for (int k = 1; k <= 3; ++k) REQUIRE(mprotect(mem + k * span - ps, ps, PROT_NONE) == 0);
  auto end_of = [&](int k, std::size_t len) { return mem + k * span - ps - len; };  // region k, ends at its guard
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    for (std::size_t n : {std::size_t{264}, std::size_t{4096}, std::size_t{4096 + 8}}) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        std::byte* page = end_of(1, n);
        std::byte* twin = end_of(2, n);
        std::vector<std::byte> t = page_of(n, 11), p = t;
        const std::size_t words = n / 4;
        for (std::size_t w = 0; w < words; ++w)
          if (pattern == 2 || (pattern == 1 && w % 3 == 0) || w + 1 == words) put_u32(p, w, ~static_cast<std::uint32_t>(w));
        std::memcpy(page, p.data(), n);
        std::memcpy(twin, t.data(), n);
        const auto d = make_diff(page, twin, n);
        for (std::size_t shift = 0; shift < 8; ++shift) {
          std::byte* enc = end_of(3, d.size()) - shift;  // ends `shift` bytes before the guard
          std::memcpy(enc, d.data(), d.size());
          std::memcpy(twin, t.data(), n);
          apply_diff(twin, n, std::span<const std::byte>(enc, d.size()));
          REQUIRE(std::memcmp(twin, p.data(), n) == 0);
        }
      }
    }
  }
  munmap(mem, 3 * span);
}

TEST_CASE("copy_unit copies every length and alignment exactly", "[unit][diff]") {
  for (diff_isa isa : isas()) {
    INFO(isa_name(isa));
    isa_scope use(isa);
    const auto src = page_of(70000, 4);
    for (std::size_t len : {std::size_t{8}, std::size_t{256}, std::size_t{4096}, std::size_t{4104}, std::size_t{65536}}) {
      for (std::size_t off : {std::size_t{0}, std::size_t{8}, std::size_t{40}}) {
        std::vector<std::byte> dst(len + 64, std::byte{0x77});
        copy_unit(dst.data() + 8, src.data() + off, len);
        REQUIRE(std::memcmp(dst.data() + 8, src.data() + off, len) == 0);
        for (std::size_t i = 0; i < 8; ++i) REQUIRE(dst[i] == std::byte{0x77});
        for (std::size_t i = len + 8; i < dst.size(); ++i) REQUIRE(dst[i] == std::byte{0x77});
      }
    }
  }
}
