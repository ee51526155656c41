// Environment knobs. Every MDSM_* variable the library reads goes through here so that a bad
// value is a clear error naming the variable, and docs/RUNNING.md lists them all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mdsm::detail {

// The raw value, or nullopt if the variable is unset or empty.
std::optional<std::string> env_string(const char* name);

// A byte size with an optional K/M/G/T suffix (powers of 1024); `fallback` if unset.
// Throws mdsm::error(MDSM_ERR_INVALID_ARGUMENT) naming the variable on a malformed value.
std::uint64_t env_size(const char* name, std::uint64_t fallback);

// A non-negative integer; `fallback` if unset.
std::uint64_t env_uint(const char* name, std::uint64_t fallback);

// Parses "123", "64K", "1G". Returns nullopt if malformed or overflowing.
std::optional<std::uint64_t> parse_size(const std::string& text);

}  // namespace mdsm::detail
