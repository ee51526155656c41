// Vector timestamps. vt[q] is the index of the newest interval of rank q that this rank knows
// of; intervals of a rank are numbered 1, 2, 3, ... so 0 means "none yet".
//
// Invariant kept by lib/coherence: the set of intervals a rank knows is downward closed (if it
// knows an interval it knows every interval that happened before it), so a vector timestamp
// describes it exactly.
#pragma once

#include "net/wire.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <cstdint>
#include <vector>

namespace mdsm::coherence {

class vector_time {
 public:
  vector_time() = default;
  explicit vector_time(std::size_t ranks) : v_(ranks, 0) {}

  std::size_t size() const noexcept { return v_.size(); }
  std::uint32_t operator[](std::size_t r) const { return v_[r]; }
  std::uint32_t& operator[](std::size_t r) { return v_[r]; }

  // Componentwise max.
  void merge(const vector_time& other) {
    for (std::size_t i = 0; i < v_.size(); ++i) v_[i] = std::max(v_[i], other.v_[i]);
  }
  // Componentwise max with size() host-order u32 values (validated by the caller).
  void merge_encoded(std::span<const std::byte> values) {
    for (std::size_t i = 0; i < v_.size(); ++i) {
      std::uint32_t x;
      std::memcpy(&x, values.data() + i * sizeof x, sizeof x);
      v_[i] = std::max(v_[i], x);
    }
  }
  // True if this knows everything `other` knows.
  bool covers(const vector_time& other) const {
    for (std::size_t i = 0; i < v_.size(); ++i)
      if (v_[i] < other.v_[i]) return false;
    return true;
  }
  // Sum of components: strictly increases along happened-before, so sorting by it (ties broken
  // by creator) orders intervals consistently with happened-before.
  std::uint64_t sum() const {
    std::uint64_t s = 0;
    for (auto x : v_) s += x;
    return s;
  }
  bool operator==(const vector_time&) const = default;

  void encode(net::byte_writer& out) const {
    out.put(static_cast<std::uint32_t>(v_.size()));
    out.put_array<std::uint32_t>(v_);
  }
  // Reads a vector timestamp that must have exactly `ranks` entries.
  static vector_time decode(net::byte_reader& in, std::size_t ranks) {
    auto n = in.get<std::uint32_t>();
    if (n != ranks) net::byte_reader::malformed("vector timestamp of the wrong width");
    vector_time t;
    in.get_array(n, t.v_);
    return t;
  }
  std::size_t wire_size() const { return sizeof(std::uint32_t) * (v_.size() + 1); }

 private:
  std::vector<std::uint32_t> v_;
};

}  // namespace mdsm::coherence
