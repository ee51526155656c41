// vector_time keeps up to 8 entries inside the object and more on the heap (jobs of more than 8
// ranks, which the multi-rank tests never reach): every copy and move must leave both objects
// with their own, correct entries.
#include "coherence/vector_time.hpp"

#include <catch2/catch.hpp>

#include <utility>
#include <vector>

using mdsm::coherence::vector_time;

namespace {
vector_time filled(std::size_t n, std::uint32_t base) {
  vector_time t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = base + static_cast<std::uint32_t>(i);
  return t;
}
void require_filled(const vector_time& t, std::size_t n, std::uint32_t base) {
  REQUIRE(t.size() == n);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(t[i] == base + i);
}
}  // namespace

TEST_CASE("vector_time: copies and moves, inline and on the heap", "[vector_time]") {
  for (std::size_t n : {1u, 3u, 8u, 9u, 12u, 64u}) {
    INFO("ranks " << n);
    vector_time a = filled(n, 100);
    require_filled(a, n, 100);

    vector_time b(a);  // copy: independent storage
    b[0] = 7;
    REQUIRE(a[0] == 100);
    REQUIRE(b.data() != a.data());

    vector_time c(std::move(b));  // move: c owns the values, b is empty
    REQUIRE(c[0] == 7);
    REQUIRE(b.size() == 0);
    c[n - 1] = 9;
    REQUIRE(a[n - 1] == 100 + n - 1);

    vector_time d;
    d = a;  // copy-assign into a different size
    d[0] = 1;
    require_filled(a, n, 100);
    REQUIRE(d[0] == 1);

    vector_time e = filled(n, 500);
    e = std::move(d);  // move-assign over an existing value
    REQUIRE(e[0] == 1);
    REQUIRE(d.size() == 0);
    vector_time& alias = e;  // (through a reference: clang rejects an explicit self-move)
    e = std::move(alias);    // self-move leaves it intact
    REQUIRE(e.size() == n);  // it used to leave an empty vector time (n_ set to 0)
    REQUIRE(e[0] == 1);

    std::vector<vector_time> many;  // relocation in a growing vector moves every element
    for (std::uint32_t k = 0; k < 20; ++k) many.push_back(filled(n, 1000 * k));
    for (std::uint32_t k = 0; k < 20; ++k) require_filled(many[k], n, 1000 * k);

    vector_time m = filled(n, 0);
    m.merge(filled(n, 5));
    require_filled(m, n, 5);
    REQUIRE(m.covers(filled(n, 5)));
    REQUIRE_FALSE(filled(n, 4).covers(m));
  }
}
