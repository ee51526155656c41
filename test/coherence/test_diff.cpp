// Diffs: creation, application, merging of several writers, validation of malformed input.
#include "coherence/diff.hpp"

#include <mdsm/error.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
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
}  // namespace

TEST_CASE("an unchanged page gives an empty diff", "[unit][diff]") {
  auto twin = page_of(4096, 1);
  auto page = twin;
  CHECK(make_diff(page.data(), twin.data(), page.size()).empty());
}

TEST_CASE("diff round trip reproduces the page for many change patterns", "[unit][diff]") {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 500; ++trial) {
    const std::size_t n = 4096;
    auto twin = page_of(n, static_cast<unsigned>(trial));
    auto page = twin;
    const int changes = static_cast<int>(rng() % 200);
    for (int i = 0; i < changes; ++i) put_u32(page, rng() % (n / 4), static_cast<std::uint32_t>(rng()) | 1u);
    if (trial % 7 == 0) put_u32(page, 0, ~*reinterpret_cast<std::uint32_t*>(twin.data()));             // first word
    if (trial % 11 == 0) put_u32(page, n / 4 - 1, ~*reinterpret_cast<std::uint32_t*>(twin.data() + n - 4));  // last
    auto d = make_diff(page.data(), twin.data(), n);
    auto rebuilt = twin;
    apply_diff(rebuilt.data(), n, d);
    REQUIRE(rebuilt == page);
  }
}

TEST_CASE("runs contain only changed words", "[unit][diff]") {
  std::vector<std::byte> twin(4096, std::byte{0});
  auto page = twin;
  put_u32(page, 1, 7);  // words 1 and 3 changed, word 2 unchanged between them
  put_u32(page, 3, 9);
  auto d = make_diff(page.data(), twin.data(), 4096);
  CHECK(diff_runs(d, 4096) == 2);
  CHECK(d.size() == 2 * (8 + 4));
}

TEST_CASE("diffs of two writers of one page merge (false sharing)", "[unit][diff]") {
  const std::size_t n = 4096;
  std::vector<std::byte> base(n, std::byte{0});
  auto a = base, b = base;
  for (std::size_t w = 0; w < n / 4; w += 2) put_u32(a, w, static_cast<std::uint32_t>(w + 1));      // even words
  for (std::size_t w = 1; w < n / 4; w += 2) put_u32(b, w, static_cast<std::uint32_t>(1000 + w));   // odd words
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

TEST_CASE("malformed diffs are rejected and leave the page untouched", "[unit][diff]") {
  std::vector<std::byte> page(4096, std::byte{5});
  const auto before = page;
  auto bad = [&](std::vector<std::uint32_t> words) {
    std::vector<std::byte> enc(words.size() * 4);
    std::memcpy(enc.data(), words.data(), enc.size());
    try {
      apply_diff(page.data(), page.size(), enc);
      return false;
    } catch (const mdsm::error& e) {
      return e.code() == MDSM_ERR_MALFORMED;
    }
  };
  CHECK(bad({4092, 8, 1, 2}));          // runs past the end
  CHECK(bad({2, 4, 1}));                // not word aligned
  CHECK(bad({0, 0}));                   // empty run
  CHECK(bad({0, 8, 1}));                // truncated data
  CHECK(bad({8, 4, 1, 0, 4, 1}));       // out of order
  CHECK(bad({0xFFFFFFFC, 8, 1, 2}));    // offset overflow
  CHECK(page == before);
}
