// Shared by the fuzz targets (test/fuzz, docs/TESTING.md): the sizes of the job the decoders are
// run for, and the one outcome besides success that a decoder may have.
//
// The seed corpora are real frames captured from 4-rank runs with the default region (1 GiB of
// 4 KiB units), so the targets decode for that job. Every decoder must either succeed or raise
// mdsm::error with MDSM_ERR_MALFORMED; anything else (another error, a crash, a sanitizer
// report, an allocation beyond libFuzzer's -rss_limit_mb / -malloc_limit_mb) is a finding.
#pragma once

#include "coherence/consistency_info.hpp"

#include <mdsm/error.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace mdsm::fuzz {

inline constexpr coherence::wire_limits k_limits{4, 262144, 4096};

inline std::span<const std::byte> bytes_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// Runs f; a malformed-input error is the expected rejection, anything else aborts (a finding).
template <class F>
void expect_valid_or_malformed(F&& f) {
  try {
    f();
  } catch (const error& e) {
    if (e.code() != MDSM_ERR_MALFORMED) {
      std::fprintf(stderr, "decoder raised a code other than MDSM_ERR_MALFORMED: %s\n", e.what());
      std::abort();
    }
  }
}

// The entry point of a target whose input is one selector byte (an operation) and a payload.
template <class Decode>
int selector_and_payload(const std::uint8_t* data, std::size_t size, Decode&& decode) {
  if (size == 0) return 0;
  expect_valid_or_malformed([&] { decode(data[0], bytes_of(data + 1, size - 1)); });
  return 0;
}

// A finding that is not a crash: the decoder accepted something it must not have.
[[noreturn]] inline void finding(const char* what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what);
  std::abort();
}

}  // namespace mdsm::fuzz
