// Interval records and the store that holds them.
//
// An interval record = (creator, index, the creator's vector time when it closed the interval,
// write notices = the coherence units written in it). Records are immutable once made and
// shared by pointer between the store, messages and page tables.
#pragma once

#include "coherence/vector_time.hpp"

#include <deque>
#include <memory>
#include <vector>

namespace mdsm::coherence {

struct interval_record {
  std::uint32_t creator;
  std::uint32_t index;               // 1-based; vt[creator] == index
  vector_time vt;                    // creator's vector time at closing
  std::vector<std::uint32_t> pages;  // write notices: sorted, unique coherence-unit numbers

  void encode(net::byte_writer& out) const;
  // Validates everything: creator < ranks, index >= 1, vt[creator] == index, pages < page_limit.
  static std::shared_ptr<const interval_record> decode(net::byte_reader& in, std::size_t ranks,
                                                       std::uint32_t page_limit);
  // Bytes this record accounts for in the metadata statistics.
  std::size_t footprint() const { return sizeof(*this) + vt.size() * 4 + pages.size() * 4; }
};

using record_ptr = std::shared_ptr<const interval_record>;

// Every interval record this rank knows, by creator and index, minus those garbage collected.
// Not synchronised: the owner (the coherence engine) guards it with its metadata lock.
class interval_store {
 public:
  explicit interval_store(std::size_t ranks) : by_creator_(ranks), base_(ranks, 0) {}

  // Pre: r->index == newest(r->creator) + 1.
  void add(record_ptr r);
  // The record, or nullptr if collected or unknown.
  record_ptr find(std::uint32_t creator, std::uint32_t index) const;
  std::uint32_t newest(std::uint32_t creator) const {
    return base_[creator] + static_cast<std::uint32_t>(by_creator_[creator].size());
  }
  std::uint32_t collected_through(std::uint32_t creator) const { return base_[creator]; }
  // Drops every record with index <= upto[creator]; returns the bytes freed.
  std::size_t collect(const vector_time& upto);
  std::size_t bytes() const { return bytes_; }

 private:
  std::vector<std::deque<record_ptr>> by_creator_;
  std::vector<std::uint32_t> base_;  // indices <= base_ were collected
  std::size_t bytes_ = 0;
};

}  // namespace mdsm::coherence
