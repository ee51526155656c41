// The first-fit arena (lib/regions/arena.hpp): growth by more ranges, and coalescing across them.
#include "regions/arena.hpp"

#include <catch2/catch.hpp>

using mdsm::regions::arena;

TEST_CASE("arena: grown ranges coalesce, so an allocation may span them", "[unit][arena]") {
  arena a(1000, 100);
  REQUIRE(a.allocate(60, 1) == std::uintptr_t{1000});
  CHECK_FALSE(a.allocate(60, 1).has_value());  // 40 left
  a.grow(1100, 50);                            // right after the first range: one block of 90
  CHECK(a.capacity() == 150);
  CHECK(a.free_bytes() == 90);
  CHECK(a.largest_free() == 90);
  CHECK(a.allocate(80, 1) == std::uintptr_t{1060});
  a.grow(5000, 30);  // apart from the rest
  CHECK(a.largest_free() == 30);
  CHECK_FALSE(a.allocate(40, 1).has_value());
  CHECK(a.allocate(30, 1) == std::uintptr_t{5000});
  // Freed blocks merge with their grown neighbours again.
  CHECK(a.release(1060) == std::size_t{80});
  CHECK(a.release(1000) == std::size_t{60});
  CHECK(a.largest_free() == 150);
  CHECK(a.allocate(150, 1) == std::uintptr_t{1000});
  CHECK_FALSE(a.release(1001).has_value());  // not the start of an allocation
}

TEST_CASE("arena: an empty arena grows from nothing (the pool's chunk index space)", "[unit][arena]") {
  arena a(0, 0);
  CHECK_FALSE(a.allocate(1, 1).has_value());
  a.grow(0, 10);
  CHECK(a.allocate(4, 1) == std::uintptr_t{0});
  CHECK(a.allocate(6, 1) == std::uintptr_t{4});
  CHECK_FALSE(a.allocate(1, 1).has_value());
}
