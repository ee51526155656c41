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

namespace {
// The reference: word by word, the simplest encoder that meets the format.
std::vector<std::byte> reference_diff(const std::vector<std::byte>& page, const std::vector<std::byte>& twin) {
  std::vector<std::byte> out;
  const std::size_t words = page.size() / 4;
  for (std::size_t w = 0; w < words;) {
    if (std::memcmp(page.data() + 4 * w, twin.data() + 4 * w, 4) == 0) {
      ++w;
      continue;
    }
    std::size_t e = w + 1;
    while (e < words && std::memcmp(page.data() + 4 * e, twin.data() + 4 * e, 4) != 0) ++e;
    const std::uint32_t hdr[2] = {static_cast<std::uint32_t>(4 * w), static_cast<std::uint32_t>(4 * (e - w))};
    const auto* h = reinterpret_cast<const std::byte*>(hdr);
    out.insert(out.end(), h, h + 8);
    out.insert(out.end(), page.begin() + static_cast<std::ptrdiff_t>(4 * w), page.begin() + static_cast<std::ptrdiff_t>(4 * e));
    w = e;
  }
  return out;
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

TEST_CASE("diff edge cases match the word-by-word reference", "[unit][diff]") {
  const std::size_t n = 4096, words = n / 4;
  const auto twin = page_of(n, 3);
  std::vector<std::vector<std::size_t>> patterns;
  patterns.push_back({0});                          // run at the page start
  patterns.push_back({words - 1});                  // run at the page end
  patterns.push_back({0, 1, 2, words - 2, words - 1});
  std::vector<std::size_t> alternating, all, boundary, long_run;
  for (std::size_t w = 0; w < words; w += 2) alternating.push_back(w);  // 512 one-word runs
  for (std::size_t w = 0; w < words; ++w) all.push_back(w);             // one run: the page
  for (std::size_t w = 60; w < 70; ++w) boundary.push_back(w);          // crosses a 64-word block
  for (std::size_t w = 63; w < 63 + 130; ++w) long_run.push_back(w);    // spans three blocks
  patterns.push_back(alternating);
  for (std::size_t w = 1; w < words; w += 2) patterns.push_back({w});  // odd offsets too
  patterns.push_back(all);
  patterns.push_back(boundary);
  patterns.push_back(long_run);
  patterns.push_back({63, 64});   // two words either side of a block edge: one run
  patterns.push_back({63, 65});   // two runs
  for (const auto& pat : patterns) {
    const auto page = flipped(twin, pat);
    const auto d = make_diff(page.data(), twin.data(), n);
    REQUIRE(d == reference_diff(page, twin));
    auto rebuilt = twin;
    apply_diff(rebuilt.data(), n, d);
    REQUIRE(rebuilt == page);
  }
  CHECK(diff_runs(make_diff(flipped(twin, alternating).data(), twin.data(), n), n) == 512);
  CHECK(diff_runs(make_diff(flipped(twin, all).data(), twin.data(), n), n) == 1);
  CHECK(make_diff(flipped(twin, all).data(), twin.data(), n).size() == 8 + n);
}

TEST_CASE("diffs of units that are not a multiple of 64 words, and of large units", "[unit][diff]") {
  std::mt19937 rng(9);
  for (std::size_t n : {std::size_t{8}, std::size_t{24}, std::size_t{256}, std::size_t{264}, std::size_t{1000},
                        std::size_t{16384}, std::size_t{65536}}) {
    const auto twin = page_of(n, static_cast<unsigned>(n));
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<std::size_t> pat;
      const std::size_t words = n / 4;
      const std::size_t k = rng() % (words + 1);
      for (std::size_t i = 0; i < k; ++i) pat.push_back(rng() % words);
      if (trial % 5 == 0) pat.push_back(words - 1);
      const auto page = flipped(twin, pat);
      const auto d = make_diff(page.data(), twin.data(), n);
      REQUIRE(d == reference_diff(page, twin));
    }
  }
}
