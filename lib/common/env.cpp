#include "common/env.hpp"

#include "common/check.hpp"

#include <cctype>
#include <cstdlib>
#include <limits>

namespace mdsm::detail {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::uint64_t> parse_size(const std::string& text) {
  std::size_t i = 0;
  std::uint64_t value = 0;
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++i;
  }
  unsigned shift = 0;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return std::nullopt;
    }
    ++i;
    if (i < text.size() && std::toupper(static_cast<unsigned char>(text[i])) == 'B') ++i;
  }
  if (i != text.size()) return std::nullopt;
  if (shift != 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::uint64_t env_size(const char* name, std::uint64_t fallback) {
  auto text = env_string(name);
  if (!text) return fallback;
  auto v = parse_size(*text);
  if (!v) fail(MDSM_ERR_INVALID_ARGUMENT, name, "='", *text, "' is not a size (examples: 4096, 64K, 2G)");
  return *v;
}

std::uint64_t env_uint(const char* name, std::uint64_t fallback) {
  auto text = env_string(name);
  if (!text) return fallback;
  std::uint64_t value = 0;
  for (char c : *text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) ||
        value > (std::numeric_limits<std::uint64_t>::max() - 9) / 10)
      fail(MDSM_ERR_INVALID_ARGUMENT, name, "='", *text, "' is not a non-negative integer");
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

}  // namespace mdsm::detail
