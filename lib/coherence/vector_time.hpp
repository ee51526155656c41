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
#include <memory>
#include <vector>

namespace mdsm::coherence {

class vector_time {
 public:
  vector_time() = default;
  explicit vector_time(std::size_t ranks) : n_(ranks) {
    if (n_ > k_inline) heap_ = std::make_unique<std::uint32_t[]>(n_);  // zeroed
  }
  vector_time(const vector_time& o) : vector_time(o.n_) { std::memcpy(data(), o.data(), bytes()); }
  vector_time& operator=(const vector_time& o) {
    if (this != &o) {
      if (n_ != o.n_) *this = vector_time(o.n_);
      std::memcpy(data(), o.data(), bytes());
    }
    return *this;
  }
  vector_time(vector_time&& o) noexcept : n_(o.n_), heap_(std::move(o.heap_)) {
    if (!heap_) std::memcpy(inline_, o.inline_, sizeof inline_);
    o.n_ = 0;
  }
  vector_time& operator=(vector_time&& o) noexcept {
    if (this == &o) return *this;  // a self-move must not end with o.n_ = 0 (it emptied the time)
    n_ = o.n_;
    heap_ = std::move(o.heap_);
    if (!heap_) std::memcpy(inline_, o.inline_, sizeof inline_);
    o.n_ = 0;
    return *this;
  }

  std::size_t size() const noexcept { return n_; }
  // The size() entries, for loops that should not re-decide inline-or-heap on every access.
  const std::uint32_t* data() const noexcept { return heap_ ? heap_.get() : inline_; }
  std::uint32_t* data() noexcept { return heap_ ? heap_.get() : inline_; }
  std::uint32_t operator[](std::size_t r) const { return data()[r]; }
  std::uint32_t& operator[](std::size_t r) { return data()[r]; }

  // Componentwise max.
  void merge(const vector_time& other) {
    std::uint32_t* v = data();
    const std::uint32_t* o = other.data();
    for (std::size_t i = 0; i < n_; ++i) v[i] = std::max(v[i], o[i]);
  }
  // Componentwise max with size() host-order u32 values (validated by the caller).
  void merge_encoded(std::span<const std::byte> values) {
    std::uint32_t* v = data();
    for (std::size_t i = 0; i < n_; ++i) {
      std::uint32_t x;
      std::memcpy(&x, values.data() + i * sizeof x, sizeof x);
      v[i] = std::max(v[i], x);
    }
  }
  // True if this knows everything `other` knows.
  bool covers(const vector_time& other) const {
    const std::uint32_t* v = data();
    const std::uint32_t* o = other.data();
    for (std::size_t i = 0; i < n_; ++i)
      if (v[i] < o[i]) return false;
    return true;
  }
  // Sum of components: strictly increases along happened-before, so sorting by it (ties broken
  // by creator) orders intervals consistently with happened-before.
  std::uint64_t sum() const {
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < n_; ++i) s += data()[i];
    return s;
  }
  bool operator==(const vector_time& o) const { return n_ == o.n_ && std::memcmp(data(), o.data(), bytes()) == 0; }

  void encode(net::byte_writer& out) const {
    out.put(static_cast<std::uint32_t>(n_));
    out.put_bytes(std::as_bytes(std::span<const std::uint32_t>(data(), n_)));
  }
  // Reads a vector timestamp that must have exactly `ranks` entries.
  static vector_time decode(net::byte_reader& in, std::size_t ranks) {
    auto n = in.get<std::uint32_t>();
    if (n != ranks) net::byte_reader::malformed("vector timestamp of the wrong width");
    const auto bytes = in.get_bytes(std::size_t{n} * sizeof(std::uint32_t));
    vector_time t(n);
    std::memcpy(t.data(), bytes.data(), bytes.size());
    return t;
  }
  std::size_t wire_size() const { return sizeof(std::uint32_t) * (n_ + 1); }

 private:
  // Up to k_inline ranks the entries live inside the object: vector times are made and copied
  // on every RELEASE, and most jobs on a node or a few nodes fit.
  static constexpr std::size_t k_inline = 8;
  std::size_t bytes() const noexcept { return n_ * sizeof(std::uint32_t); }

  std::size_t n_ = 0;
  std::uint32_t inline_[k_inline] = {};
  std::unique_ptr<std::uint32_t[]> heap_;
};

}  // namespace mdsm::coherence
