#include "coherence/diff.hpp"

#include "common/check.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mdsm::coherence {

namespace {

inline std::uint64_t load64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t load32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct run {
  std::uint32_t offset;
  std::uint32_t length;
};

// Calls f(run) for every run, validating against a unit of `len` bytes.
template <class F>
void for_each_run(std::span<const std::byte> encoded, std::size_t len, F&& f) {
  std::size_t at = 0;
  std::uint64_t last_end = 0;
  while (at < encoded.size()) {
    if (encoded.size() - at < 8) detail::fail(MDSM_ERR_MALFORMED, "diff: truncated run header");
    run r;
    std::memcpy(&r, encoded.data() + at, 8);
    at += 8;
    if (r.length == 0 || r.length % 4 != 0 || r.offset % 4 != 0)
      detail::fail(MDSM_ERR_MALFORMED, "diff: run not word aligned");
    if (r.offset < last_end || std::uint64_t{r.offset} + r.length > len)
      detail::fail(MDSM_ERR_MALFORMED, "diff: run outside the unit or out of order");
    if (encoded.size() - at < r.length) detail::fail(MDSM_ERR_MALFORMED, "diff: truncated run data");
    f(r, encoded.data() + at);
    at += r.length;
    last_end = std::uint64_t{r.offset} + r.length;
  }
}

}  // namespace

// make_diff works in two steps. First a bitmask of the changed words (bit i = word i differs),
// built with the widest compare the CPU has (AVX-512: 16 words per instruction straight into a
// mask register, AVX2: 8, SSE2: 4, else 64-bit scalar), so an unchanged stretch costs about what
// memcmp costs. Then the runs are read off the bitmask with bit scans and written to a
// per-thread scratch buffer, which is copied out once (one allocation of the exact size). The
// bitmask also lives in per-thread scratch memory reused across calls.
namespace {

using mask_word = std::uint64_t;
constexpr std::size_t k_mask_bits = 64;

std::vector<mask_word>& scratch_mask(std::size_t words) {
  thread_local std::vector<mask_word> mask;
  mask.resize((words + k_mask_bits - 1) / k_mask_bits);
  return mask;
}

// Fills mask[] for words [0, words); words is a multiple of 2 (len is a multiple of 8).
[[maybe_unused]] void changed_words_scalar(const std::byte* page, const std::byte* twin, std::size_t words, mask_word* mask) {
  for (std::size_t m = 0; m * k_mask_bits < words; ++m) {
    const std::size_t first = m * k_mask_bits, last = std::min(words, first + k_mask_bits);
    mask_word bits = 0;
    for (std::size_t w = first; w < last; w += 2) {
      const std::uint64_t x = load64(page + 4 * w) ^ load64(twin + 4 * w);
      if (x == 0) continue;
      const std::size_t b = w - first;
      if (static_cast<std::uint32_t>(x) != 0) bits |= mask_word{1} << b;
      if ((x >> 32) != 0) bits |= mask_word{1} << (b + 1);
    }
    mask[m] = bits;
  }
}

#if defined(__x86_64__)
[[maybe_unused]] __attribute__((target("avx512f"))) void changed_words_avx512(const std::byte* page,
                                                                            const std::byte* twin, std::size_t words,
                                                                            mask_word* mask) {
  std::size_t m = 0;
  for (; (m + 1) * k_mask_bits <= words; ++m) {
    const std::byte* p = page + m * k_mask_bits * 4;
    const std::byte* t = twin + m * k_mask_bits * 4;
    mask_word equal = 0;
    for (unsigned k = 0; k < 4; ++k) {
      const __m512i a = _mm512_loadu_si512(p + 64 * k);
      const __m512i b = _mm512_loadu_si512(t + 64 * k);
      equal |= mask_word{_mm512_cmpeq_epi32_mask(a, b)} << (16 * k);
    }
    mask[m] = ~equal;
  }
  if (m * k_mask_bits < words)
    changed_words_scalar(page + m * k_mask_bits * 4, twin + m * k_mask_bits * 4, words - m * k_mask_bits, mask + m);
}

[[maybe_unused]] __attribute__((target("avx2"))) void changed_words_avx2(const std::byte* page, const std::byte* twin,
                                                                        std::size_t words, mask_word* mask) {
  std::size_t m = 0;
  for (; (m + 1) * k_mask_bits <= words; ++m) {
    const std::byte* p = page + m * k_mask_bits * 4;
    const std::byte* t = twin + m * k_mask_bits * 4;
    __m256i eq[8];
    __m256i all = _mm256_set1_epi32(-1);
    for (unsigned k = 0; k < 8; ++k) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32 * k));
      eq[k] = _mm256_cmpeq_epi32(a, b);
      all = _mm256_and_si256(all, eq[k]);
    }
    if (_mm256_movemask_epi8(all) == -1) {  // the common case in sparse diffs: 256 equal bytes
      mask[m] = 0;
      continue;
    }
    mask_word equal = 0;
    for (unsigned k = 0; k < 8; ++k)
      equal |= mask_word{static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(eq[k])))} << (8 * k);
    mask[m] = ~equal;
  }
  if (m * k_mask_bits < words)
    changed_words_scalar(page + m * k_mask_bits * 4, twin + m * k_mask_bits * 4, words - m * k_mask_bits, mask + m);
}

[[maybe_unused]] void changed_words_sse2(const std::byte* page, const std::byte* twin, std::size_t words, mask_word* mask) {
  std::size_t m = 0;
  for (; (m + 1) * k_mask_bits <= words; ++m) {
    const std::byte* p = page + m * k_mask_bits * 4;
    const std::byte* t = twin + m * k_mask_bits * 4;
    mask_word equal = 0;
    for (unsigned k = 0; k < 16; ++k) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 16 * k));
      const auto eq = static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(a, b))));
      equal |= mask_word{eq} << (4 * k);
    }
    mask[m] = ~equal;
  }
  if (m * k_mask_bits < words)
    changed_words_scalar(page + m * k_mask_bits * 4, twin + m * k_mask_bits * 4, words - m * k_mask_bits, mask + m);
}

using changed_fn = void (*)(const std::byte*, const std::byte*, std::size_t, mask_word*);
changed_fn pick_changed_words() {
  __builtin_cpu_init();  // we may run before the constructors that would do it
  if (__builtin_cpu_supports("avx512f")) return changed_words_avx512;
  return __builtin_cpu_supports("avx2") ? changed_words_avx2 : changed_words_sse2;
}
const changed_fn g_changed_words = pick_changed_words();
#else
constexpr auto g_changed_words = changed_words_scalar;
#endif

// Calls f(first_word, end_word) for every maximal run of set bits, in order.
template <class F>
void for_each_set_run(const mask_word* mask, std::size_t mask_words, F&& f) {
  std::size_t m = 0;
  mask_word cur = mask_words > 0 ? mask[0] : 0;
  while (true) {
    while (cur == 0) {
      if (++m >= mask_words) return;
      cur = mask[m];
    }
    const auto b = static_cast<std::size_t>(__builtin_ctzll(cur));
    const std::size_t start = m * k_mask_bits + b;
    // Find the end: the first clear bit at or after start.
    mask_word rest = ~cur & (~mask_word{0} << b);  // clear bits from b on
    while (rest == 0) {
      if (++m >= mask_words) {
        f(start, mask_words * k_mask_bits);
        return;
      }
      cur = mask[m];
      rest = ~cur;
    }
    const auto e = static_cast<std::size_t>(__builtin_ctzll(rest));
    f(start, m * k_mask_bits + e);
    cur &= ~mask_word{0} << e;  // drop the run's bits below e (e < 64 here; bit e is clear)
  }
}

}  // namespace

std::vector<std::byte> make_diff(const std::byte* page, const std::byte* twin, std::size_t len) {
  MDSM_ASSERT(len % 8 == 0, "unit size must be a multiple of 8");
  const std::size_t words = len / 4;
  std::vector<mask_word>& mask = scratch_mask(words);
  g_changed_words(page, twin, words, mask.data());
  // Runs are written to a per-thread scratch buffer first (worst case: every other word changed,
  // 12 bytes per 8; plus slack for the fixed-size copies below), then copied out once: one
  // allocation of the exact size, no regrowth, no zero-filling.
  thread_local std::vector<std::byte> scratch;
  if (scratch.size() < 2 * len + 32) scratch.resize(2 * len + 32);
  std::byte* const begin = scratch.data();
  std::byte* at = begin;
  for_each_set_run(mask.data(), mask.size(), [&](std::size_t first, std::size_t end) {
    const run r{static_cast<std::uint32_t>(4 * first), static_cast<std::uint32_t>(4 * (end - first))};
    std::memcpy(at, &r, 8);
    // Short runs (the usual case in sparse diffs) with one fixed-size copy the compiler inlines;
    // it may copy up to 16 bytes past the run from the page (still inside it) into the slack.
    if (r.length <= 16 && r.offset + 16 <= len) std::memcpy(at + 8, page + r.offset, 16);
    else std::memcpy(at + 8, page + r.offset, r.length);
    at += 8 + r.length;
  });
  return std::vector<std::byte>(begin, at);
}

void apply_diff(std::byte* page, std::size_t len, std::span<const std::byte> encoded) {
  for_each_run(encoded, len, [](const run&, const std::byte*) {});  // validate everything first
  for_each_run(encoded, len, [&](const run& r, const std::byte* data) {
    if (r.length <= 16) {  // short runs: word copies the compiler inlines, no call per run
      for (std::uint32_t k = 0; k < r.length; k += 4) std::memcpy(page + r.offset + k, data + k, 4);
    } else {
      std::memcpy(page + r.offset, data, r.length);
    }
  });
}

std::size_t diff_runs(std::span<const std::byte> encoded, std::size_t len) {
  std::size_t n = 0;
  for_each_run(encoded, len, [&](const run&, const std::byte*) { ++n; });
  return n;
}

}  // namespace mdsm::coherence
