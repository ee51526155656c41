// byte_reader / byte_writer (net/wire.hpp), the only way received bytes are interpreted.
#include "net/wire.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

using mdsm::net::byte_reader;
using mdsm::net::byte_writer;

namespace {
int code_of(auto&& f) {
  try {
    f();
  } catch (const mdsm::error& e) {
    return e.code();
  }
  return MDSM_SUCCESS;
}
}  // namespace

TEST_CASE("byte_reader: arrays of zero values, from an empty frame and from a full one", "[unit][wire]") {
  // Issue 19, item 7: get_array passed out.data() -- null for an empty vector -- to memcpy for 0
  // values (an interval request or a record without ranges); UBSan reports a null pointer
  // argument even for 0 bytes. The replay of test/fuzz/regressions/protocol does the same.
  std::vector<std::uint32_t> out{1, 2, 3};
  byte_reader empty(std::span<const std::byte>{});
  empty.get_array(0, out);
  CHECK(out.empty());
  CHECK(empty.done());
  const std::uint32_t words[2] = {7, 8};
  byte_reader full(std::as_bytes(std::span(words)));
  std::vector<std::uint32_t> none;
  full.get_array(0, none);
  CHECK(none.empty());
  CHECK(full.remaining() == 8);
  full.get_array(2, none);
  CHECK(none == std::vector<std::uint32_t>{7, 8});
  CHECK(full.done());
}

TEST_CASE("byte_reader: counts and fields past the end are malformed, before anything is allocated",
          "[unit][wire]") {
  const std::uint32_t words[2] = {7, 8};
  byte_reader in(std::as_bytes(std::span(words)));
  std::vector<std::uint32_t> out;
  CHECK(code_of([&] { in.get_array(3, out); }) == MDSM_ERR_MALFORMED);
  CHECK(code_of([&] { in.get_array(SIZE_MAX / 2, out); }) == MDSM_ERR_MALFORMED);  // no allocation of that
  CHECK(out.capacity() < 16);
  CHECK(code_of([&] { (void)in.get<std::uint64_t>(); (void)in.get<std::uint32_t>(); }) == MDSM_ERR_MALFORMED);
  byte_reader rest(std::as_bytes(std::span(words)));
  (void)rest.get<std::uint32_t>();
  CHECK(code_of([&] { rest.expect_done(); }) == MDSM_ERR_MALFORMED);
}

TEST_CASE("byte_writer: appending nothing from a null span", "[unit][wire]") {
  byte_writer w;
  w.put_bytes(std::span<const std::byte>{});  // null data: memcpy must not see it either
  w.put_array(std::span<const std::uint32_t>{});
  CHECK(w.size() == 0);
  w.put(std::uint32_t{5});
  CHECK(w.size() == 4);
}
