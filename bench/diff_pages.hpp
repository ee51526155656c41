// The pages of bench_coherence's diff benchmarks (b): a twin of random words and a page with a
// given share of them changed. check_diff_pages.cpp tests what the benchmark relies on, so that
// its figures are made of correct results.
#pragma once

#include "coherence/diff.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace mdsm::bench {

constexpr std::size_t k_page = 4096;
constexpr std::size_t k_words = k_page / 4;

// Word positions changed for a given share of the page (spread out, fixed per share): none for
// 0%, at least one for any other share.
inline std::vector<std::size_t> changed_words(int percent) {
  if (percent <= 0) return {};  // page_pair(0) is a page equal to its twin
  std::vector<std::size_t> all(k_words);
  for (std::size_t i = 0; i < k_words; ++i) all[i] = i;
  if (percent >= 100) return all;
  std::mt19937 rng(static_cast<unsigned>(percent));
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::max<std::size_t>(1, k_words * static_cast<std::size_t>(percent) / 100));
  std::sort(all.begin(), all.end());
  return all;
}

// Laid out as in real use: the page page-aligned (as in the coherent region), the twin in the
// engine's own twin buffer (cache-line aligned). memcmp and memcpy get the same layout.
struct page_pair {
  struct page_delete {
    void operator()(std::uint32_t* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::uint32_t, page_delete> page_{static_cast<std::uint32_t*>(std::aligned_alloc(k_page, k_page))};
  mdsm::coherence::unit_buffer twin_ = mdsm::coherence::make_unit_buffer(k_page);
  explicit page_pair(int percent) {
    std::mt19937 rng(7);
    for (std::size_t i = 0; i < k_words; ++i) twin()[i] = static_cast<std::uint32_t>(rng());
    std::memcpy(page(), twin(), k_page);
    for (std::size_t w : changed_words(percent)) page()[w] = ~page()[w];
  }
  std::uint32_t* page() const { return page_.get(); }
  std::uint32_t* twin() const { return reinterpret_cast<std::uint32_t*>(twin_.get()); }
  const std::byte* p() const { return reinterpret_cast<const std::byte*>(page()); }
  const std::byte* t() const { return twin_.get(); }
};

// True if `target` holds the same words as `pp`'s page (diff_apply checks that applying the
// diff of pp to a page holding pp's twin reproduced pp's page).
inline bool reproduces(const page_pair& target, const page_pair& pp) {
  return std::memcmp(target.page(), pp.page(), k_page) == 0;
}

}  // namespace mdsm::bench
