#include "coherence/diff.hpp"

#include "common/check.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mdsm::coherence {

namespace {

constexpr std::size_t k_block_words = 64;  // one mask word
constexpr std::size_t k_block_bytes = 4 * k_block_words;
constexpr std::size_t k_slack = 64;  // make_diff's data area: room for one full-vector store past the end
// With AVX-512, blocks with at most this many changed words are copied word by word (four at a
// time, no branch per word) rather than gathered with vector permutes: measured on AMD Zen 4, the
// scalar copy wins for one to four words and loses beyond (about 1.6 cycles a word).
constexpr std::size_t k_sparse_words = 4;

inline std::uint64_t load64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }

// The geometry of a unit's diff.
struct shape {
  std::size_t words, blocks, full_blocks, summary_words;
  explicit shape(std::size_t len)
      : words(len / 4),
        blocks((words + k_block_words - 1) / k_block_words),
        full_blocks(words / k_block_words),
        summary_words((blocks + 63) / 64) {}
  std::size_t header_worst() const { return 8 * summary_words + 8 * blocks; }
  // Bits of the last block's mask that name words of the unit.
  std::uint64_t last_valid() const {
    const std::size_t r = words % k_block_words;
    return r == 0 ? ~std::uint64_t{0} : (std::uint64_t{1} << r) - 1;
  }
};

diff_isa pick_isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // we may run before the constructors that would do it
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
      __builtin_cpu_supports("popcnt"))
    return diff_isa::avx512;
  if (__builtin_cpu_supports("avx2")) return diff_isa::avx2;
#endif
  return diff_isa::scalar;
}
diff_isa g_isa = pick_isa();

// ---- the changed-word mask of one block -------------------------------------------------------

// Words [0, n) of a block (n <= 64, even: len is a multiple of 8).
[[gnu::always_inline]] inline std::uint64_t block_mask_scalar(const std::byte* page, const std::byte* twin,
                                                              std::size_t n) {
  std::uint64_t bits = 0;
  for (std::size_t w = 0; w < n; w += 2) {
    const std::uint64_t x = load64(page + 4 * w) ^ load64(twin + 4 * w);
    if (x == 0) continue;
    if (static_cast<std::uint32_t>(x) != 0) bits |= std::uint64_t{1} << w;
    if ((x >> 32) != 0) bits |= std::uint64_t{1} << (w + 1);
  }
  return bits;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) std::uint64_t block_mask_avx2(const std::byte* p, const std::byte* t) {
  __m256i eq[8];
  __m256i all = _mm256_set1_epi32(-1);
  for (unsigned k = 0; k < 8; ++k) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * k));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32 * k));
    eq[k] = _mm256_cmpeq_epi32(a, b);
    all = _mm256_and_si256(all, eq[k]);
  }
  if (_mm256_movemask_epi8(all) == -1) return 0;  // the common case in sparse diffs
  std::uint64_t equal = 0;
  for (unsigned k = 0; k < 8; ++k)
    equal |= std::uint64_t{static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(eq[k])))} << (8 * k);
  return ~equal;
}
#endif

// ---- make_diff: one pass over page and twin -----------------------------------------------------
//
// Both scans write into the per-thread buffer laid out as the worst case:
//   [summary: 8*summary_words][masks: 8*blocks][data: 4*words + k_slack]
// with the data area 64-byte aligned (whole changed blocks are then copied with aligned stores,
// which on Zen 4 take about half the time of unaligned ones).
// filling the summary, the masks of changed blocks from the front of their area, and the changed
// words from the front of theirs. They return (changed blocks, data bytes).
struct scan_result {
  std::size_t blocks = 0;
  std::size_t data_bytes = 0;
};

// Appends the words of `bits` (not 0) from the block at `block`, in groups of four without a
// branch per word; returns the new end. May write 12 bytes past it (the data area's slack): the
// words after the last set bit repeat the block's first word (countr_zero(0) & 63 == 0).
[[gnu::always_inline]] inline std::byte* copy_sparse(const std::byte* block, std::uint64_t bits, std::byte* out,
                                                     std::size_t count) {
  std::byte* const end = out + 4 * count;
  do {
    for (unsigned j = 0; j < 4; ++j) {
      std::memcpy(out + 4 * j, block + 4 * static_cast<std::size_t>(std::countr_zero(bits) & 63), 4);
      bits &= bits - 1;
    }
    out += 16;
  } while (bits != 0);
  return end;
}

// Appends the words of `bits` from `page` (one block of n words) at `out`; returns the new end.
// May write 12 bytes past it (the data area's slack).
[[gnu::always_inline]] inline std::byte* compress_scalar(const std::byte* page, std::uint64_t bits, std::size_t n,
                                                         std::byte* out) {
  if (bits == ~std::uint64_t{0}) {
    std::memcpy(out, page, k_block_bytes);
    return out + k_block_bytes;
  }
  const auto count = static_cast<std::size_t>(std::popcount(bits));
  if (count <= 16) return copy_sparse(page, bits, out, count);
  for (std::size_t w = 0; w < n; ++w) {  // dense: store every word, keep the changed ones
    std::memcpy(out, page + 4 * w, 4);
    out += 4 * ((bits >> w) & 1);
  }
  return out;
}

// The blocks [from, sh.blocks) with the portable code (everything without AVX-512; the partial
// last block of a unit that is not a multiple of 256 bytes with AVX-512 too). Compiled twice:
// plain, and for AVX2 machines with AVX2 compares and the popcnt/tzcnt instructions (plain
// x86-64 has neither, and a libgcc call per popcount cost a quarter of a pushed hand-off).
template <bool Avx2>
[[gnu::always_inline]] inline scan_result scan_body(const std::byte* page, const std::byte* twin, const shape& sh,
                                                    std::size_t from, scan_result r, std::byte* buf) {
  std::byte* const masks = buf + 8 * sh.summary_words;
  std::byte* const data = buf + sh.header_worst();
  std::byte* out = data + r.data_bytes;
  for (std::size_t b = from; b < sh.blocks; ++b) {
    const std::byte* p = page + b * k_block_bytes;
    const std::byte* t = twin + b * k_block_bytes;
    const std::size_t n = std::min(k_block_words, sh.words - b * k_block_words);
    std::uint64_t bits = 0;
#if defined(__x86_64__)
    if constexpr (Avx2) {
      bits = n == k_block_words ? block_mask_avx2(p, t) : block_mask_scalar(p, t, n);
    } else
#endif
    {
      bits = block_mask_scalar(p, t, n);
    }
    if (bits == 0) continue;
    store64(buf + 8 * (b / 64), load64(buf + 8 * (b / 64)) | std::uint64_t{1} << (b % 64));
    store64(masks + 8 * r.blocks++, bits);
    out = compress_scalar(p, bits, n, out);
  }
  r.data_bytes = static_cast<std::size_t>(out - data);
  return r;
}

scan_result scan_generic(const std::byte* page, const std::byte* twin, const shape& sh, std::size_t from,
                         scan_result r, std::byte* buf) {
  return scan_body<false>(page, twin, sh, from, r, buf);
}

#if defined(__x86_64__)
#define MDSM_AVX2 "avx2,popcnt,bmi,bmi2"
__attribute__((target(MDSM_AVX2))) scan_result scan_avx2(const std::byte* page, const std::byte* twin,
                                                         const shape& sh, std::size_t from, scan_result r,
                                                         std::byte* buf) {
  return scan_body<true>(page, twin, sh, from, r, buf);
}
#endif

#if defined(__x86_64__)
#define MDSM_AVX512 "avx512f,avx512bw,avx512vbmi,avx512vbmi2,popcnt"

// Full blocks, one pass: compare the block's 64 words into a 64-bit mask register, then gather its
// changed words from the registers the compare loaded, 16 per round: vpcompressb of the byte
// vector 0..63 under the mask gives the changed words' indices in order, and two vpermt2d (words
// 0-31 and 32-63) and a blend move those words into place. One vpcompressb per changed block
// replaces four vpcompressd, each about 5 cycles on AMD Zen 4 (the memory form is microcoded and
// slower still). Equal blocks cost a compare, fully changed ones an aligned copy.
__attribute__((target(MDSM_AVX512))) scan_result scan_avx512(const std::byte* page, const std::byte* twin,
                                                             const shape& sh, std::byte* buf) {
  std::byte* const masks = buf + 8 * sh.summary_words;
  std::byte* const data = buf + sh.header_worst();
  std::byte* out = data;
  std::size_t changed = 0;
  alignas(64) static constexpr std::uint8_t k_iota[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i iota = _mm512_load_si512(k_iota);
  // Word j of `spread` is j: vpermb under the mask of every fourth byte widens index bytes
  // 16r..16r+15 to the 16 words of round r once 16r is added to it.
  const __m512i spread = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i round_step = _mm512_set1_epi32(16);
  const __m512i high_half = _mm512_set1_epi32(32);
  constexpr __mmask64 k_low_bytes = 0x1111111111111111;
  std::uint64_t summary = 0;  // in a register: a read-modify-write in memory would chain the blocks
  for (std::size_t b = 0; b < sh.full_blocks; ++b) {
    const std::byte* p = page + b * k_block_bytes;
    const std::byte* t = twin + b * k_block_bytes;
    const __m512i p0 = _mm512_loadu_si512(p), p1 = _mm512_loadu_si512(p + 64);
    const __m512i p2 = _mm512_loadu_si512(p + 128), p3 = _mm512_loadu_si512(p + 192);
    const __mmask16 k0 = _mm512_cmpneq_epi32_mask(p0, _mm512_loadu_si512(t));
    const __mmask16 k1 = _mm512_cmpneq_epi32_mask(p1, _mm512_loadu_si512(t + 64));
    const __mmask16 k2 = _mm512_cmpneq_epi32_mask(p2, _mm512_loadu_si512(t + 128));
    const __mmask16 k3 = _mm512_cmpneq_epi32_mask(p3, _mm512_loadu_si512(t + 192));
    const __mmask64 k = _mm512_kunpackd(_mm512_kunpackw(k3, k2), _mm512_kunpackw(k1, k0));
    const std::uint64_t bits = _cvtmask64_u64(k);
    if (b % 64 == 0 && b != 0) {
      store64(buf + 8 * (b / 64 - 1), summary);
      summary = 0;
    }
    if (bits == 0) continue;
    summary |= std::uint64_t{1} << (b % 64);
    store64(masks + 8 * changed++, bits);
    if (bits == ~std::uint64_t{0}) {
      _mm512_storeu_si512(out, p0);
      _mm512_storeu_si512(out + 64, p1);
      _mm512_storeu_si512(out + 128, p2);
      _mm512_storeu_si512(out + 192, p3);
      out += k_block_bytes;
      continue;
    }
    // Each round stores a whole vector; only its first (count - 16*round) words count (the data
    // area has k_slack bytes of room after its worst-case end for the last one).
    const auto count = static_cast<std::size_t>(std::popcount(bits));
    if (count <= k_sparse_words) {
      out = copy_sparse(p, bits, out, count);
      continue;
    }
    const __m512i index = _mm512_maskz_compress_epi8(k, iota);
    __m512i pick = spread;
    for (std::byte* o = out; o < out + 4 * count; o += 64) {
      const __m512i i = _mm512_maskz_permutexvar_epi8(k_low_bytes, pick, index);
      const __m512i low = _mm512_permutex2var_epi32(p0, i, p1);  // index bit 5 ignored
      const __m512i high = _mm512_permutex2var_epi32(p2, i, p3);
      _mm512_storeu_si512(o, _mm512_mask_blend_epi32(_mm512_test_epi32_mask(i, high_half), low, high));
      pick = _mm512_add_epi32(pick, round_step);
    }
    out += 4 * count;
  }
  if (sh.full_blocks != 0) store64(buf + 8 * ((sh.full_blocks - 1) / 64), summary);
  scan_result r{changed, static_cast<std::size_t>(out - data)};
  if (sh.full_blocks < sh.blocks) r = scan_generic(page, twin, sh, sh.full_blocks, r, buf);
  return r;
}
#endif

// The per-thread buffer make_diff writes into. When a diff fills most of it, the buffer itself
// becomes the diff (no copy) and the next call allocates a new one.
constexpr std::size_t k_align = 64;
thread_local bool t_scratch_gone = false;  // the thread's scratch_buffer was destroyed (thread exit)
struct scratch_buffer {
  std::byte* data = nullptr;
  std::size_t capacity = 0;
  ~scratch_buffer() {
    std::free(data);
    data = nullptr;
    t_scratch_gone = true;
  }
  std::byte* get(std::size_t need) {
    if (capacity < need) {
      std::free(data);
      data = static_cast<std::byte*>(std::malloc(need));
      if (data == nullptr) throw std::bad_alloc();
      capacity = need;
    }
    return data;
  }
};
thread_local scratch_buffer t_scratch;

}  // namespace

void diff_bytes::recycle() noexcept {
  // Only the calling thread's own buffer is touched, so diffs may die on any thread.
  if (block_ && work_buffer_ && !t_scratch_gone && t_scratch.data == nullptr) {
    t_scratch.data = block_.release();
    t_scratch.capacity = capacity_;
  }
  block_.reset();
}

namespace {

// ---- apply_diff -------------------------------------------------------------------------------

// A validated encoding.
struct parsed {
  const std::byte* summary = nullptr;
  const std::byte* masks = nullptr;
  const std::byte* data = nullptr;
  std::size_t summary_words = 0, changed_words = 0;
};

[[noreturn]] void malformed(const char* why) { detail::fail(MDSM_ERR_MALFORMED, "diff: ", why); }

[[gnu::always_inline]] inline parsed validate(std::span<const std::byte> enc, std::size_t len) {
  parsed p;
  if (enc.empty()) return p;
  const shape sh(len);
  if (enc.size() < 8 * sh.summary_words) malformed("shorter than its block summary");
  std::size_t blocks = 0;
  for (std::size_t s = 0; s < sh.summary_words; ++s) {
    const std::uint64_t bits = load64(enc.data() + 8 * s);
    const std::size_t valid = std::min<std::size_t>(64, sh.blocks - 64 * s);
    if (valid < 64 && (bits >> valid) != 0) malformed("block summary names a block outside the unit");
    blocks += static_cast<std::size_t>(std::popcount(bits));
  }
  if ((enc.size() - 8 * sh.summary_words) / 8 < blocks) malformed("fewer block masks than the summary names");
  p.summary = enc.data();
  p.summary_words = sh.summary_words;
  p.masks = enc.data() + 8 * sh.summary_words;
  p.data = p.masks + 8 * blocks;
  std::size_t j = 0;
  for (std::size_t s = 0; s < sh.summary_words; ++s) {
    for (std::uint64_t bits = load64(enc.data() + 8 * s); bits != 0; bits &= bits - 1, ++j) {
      const std::size_t b = 64 * s + static_cast<std::size_t>(std::countr_zero(bits));
      const std::uint64_t m = load64(p.masks + 8 * j);
      if (m == 0) malformed("empty block mask");
      if (b + 1 == sh.blocks && (m & ~sh.last_valid()) != 0) malformed("block mask names a word outside the unit");
      p.changed_words += static_cast<std::size_t>(std::popcount(m));
    }
  }
  if (enc.size() - 8 * sh.summary_words - 8 * blocks != 4 * p.changed_words)
    malformed("data length does not match the block masks");
  return p;
}

// Calls f(block, mask, data) for every changed block, data pointing at its first word.
template <class F>
[[gnu::always_inline]] inline void for_each_block(const parsed& p, F&& f) {
  const std::byte* mask = p.masks;
  const std::byte* data = p.data;
  for (std::size_t s = 0; s < p.summary_words; ++s) {
    for (std::uint64_t bits = load64(p.summary + 8 * s); bits != 0; bits &= bits - 1) {
      const std::size_t b = 64 * s + static_cast<std::size_t>(std::countr_zero(bits));
      const std::uint64_t m = load64(mask);
      f(b, m, data);
      mask += 8;
      data += 4 * static_cast<std::size_t>(std::popcount(m));
    }
  }
}

[[gnu::always_inline]] inline void expand_scalar(std::byte* dst, std::uint64_t bits, const std::byte* src) {
  if (bits == ~std::uint64_t{0}) {
    std::memcpy(dst, src, k_block_bytes);
    return;
  }
  for (; bits != 0; bits &= bits - 1) {
    std::memcpy(dst + 4 * static_cast<std::size_t>(std::countr_zero(bits)), src, 4);
    src += 4;
  }
}

#if defined(__x86_64__)
// One block: a masked load of each group's words, an expand to their lanes, a masked store (no
// byte outside the changed words is written). Pre: a full block.
__attribute__((target("avx512f,popcnt"))) void expand_avx512(std::byte* dst, std::uint64_t bits,
                                                             const std::byte* src) {
  if (bits == ~std::uint64_t{0}) {
    for (unsigned k = 0; k < 4; ++k) _mm512_storeu_si512(dst + 64 * k, _mm512_loadu_si512(src + 64 * k));
    return;
  }
  for (unsigned k = 0; k < 4; ++k) {
    const auto m = static_cast<__mmask16>(bits >> (16 * k));
    const unsigned n = static_cast<unsigned>(std::popcount(static_cast<unsigned>(m)));
    const __m512i v = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << n) - 1), src);
    _mm512_mask_storeu_epi32(dst + 64 * k, m, _mm512_maskz_expand_epi32(m, v));
    src += 4 * n;
  }
}

__attribute__((target("avx512f"))) void copy_avx512(std::byte* dst, const std::byte* src, std::size_t len) {
  std::size_t i = 0;
  for (; i + 256 <= len; i += 256) {
    const __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 64);
    const __m512i c = _mm512_loadu_si512(src + i + 128), d = _mm512_loadu_si512(src + i + 192);
    _mm512_storeu_si512(dst + i, a);
    _mm512_storeu_si512(dst + i + 64, b);
    _mm512_storeu_si512(dst + i + 128, c);
    _mm512_storeu_si512(dst + i + 192, d);
  }
  if (i < len) std::memcpy(dst + i, src + i, len - i);  // < 256 bytes: no rep movsb
}

__attribute__((target("avx2"))) void copy_avx2(std::byte* dst, const std::byte* src, std::size_t len) {
  std::size_t i = 0;
  for (; i + 128 <= len; i += 128) {
    __m256i v[4];
    for (unsigned k = 0; k < 4; ++k) v[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32 * k));
    for (unsigned k = 0; k < 4; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 32 * k), v[k]);
  }
  if (i < len) std::memcpy(dst + i, src + i, len - i);
}
#endif

}  // namespace

diff_bytes make_diff(const std::byte* page, const std::byte* twin, std::size_t len) {
  MDSM_ASSERT(len % 8 == 0, "unit size must be a multiple of 8");
  const shape sh(len);
  const std::size_t header = sh.header_worst();
  std::byte* const block = t_scratch.get(k_align - 1 + header + 4 * sh.words + k_slack);
  // The worst-case layout, placed so that its data area starts on a 64-byte boundary.
  const std::size_t lead = (k_align - (reinterpret_cast<std::uintptr_t>(block) + header) % k_align) % k_align;
  std::byte* const buf = block + lead;
  std::memset(buf, 0, 8 * sh.summary_words);
  scan_result r;
#if defined(__x86_64__)
  if (g_isa == diff_isa::avx512) r = scan_avx512(page, twin, sh, buf);
  else if (g_isa == diff_isa::avx2) r = scan_avx2(page, twin, sh, 0, r, buf);
  else
#endif
    r = scan_generic(page, twin, sh, 0, r, buf);
  diff_bytes out;
  if (r.data_bytes == 0) return out;
  const std::size_t head = 8 * sh.summary_words + 8 * r.blocks;
  out.size_ = head + r.data_bytes;
  if (r.blocks == sh.blocks && 4 * out.size_ >= 3 * t_scratch.capacity) {
    // Every block changed and the buffer is mostly full (dense diffs): the masks already sit
    // right before the data, so the buffer is the encoding. Hand it over instead of copying it.
    out.block_.reset(t_scratch.data);
    out.data_ = buf;
    out.capacity_ = t_scratch.capacity;
    out.work_buffer_ = true;
    t_scratch.data = nullptr;
    t_scratch.capacity = 0;
    return out;
  }
  out.block_.reset(static_cast<std::byte*>(std::malloc(out.size_)));
  if (out.block_ == nullptr) throw std::bad_alloc();
  out.capacity_ = out.size_;
  std::byte* const dst = out.block_.get();
  out.data_ = dst;
  std::memcpy(dst, buf, head);
  std::memcpy(dst + head, buf + header, r.data_bytes);
  return out;
}

namespace {
// apply_diff and diff_words, compiled plain and for AVX2 machines (popcnt, tzcnt).
[[gnu::always_inline]] inline void apply_generic_body(std::byte* page, std::size_t len,
                                                      std::span<const std::byte> encoded) {
  const parsed p = validate(encoded, len);  // everything is checked before the page is touched
  for_each_block(p, [&](std::size_t b, std::uint64_t m, const std::byte* src) {
    expand_scalar(page + b * k_block_bytes, m, src);
  });
}
void apply_generic(std::byte* page, std::size_t len, std::span<const std::byte> encoded) {
  apply_generic_body(page, len, encoded);
}
std::size_t words_generic(std::span<const std::byte> encoded, std::size_t len) {
  return validate(encoded, len).changed_words;
}
#if defined(__x86_64__)
__attribute__((target(MDSM_AVX2))) void apply_avx2(std::byte* page, std::size_t len,
                                                   std::span<const std::byte> encoded) {
  apply_generic_body(page, len, encoded);
}
__attribute__((target(MDSM_AVX512))) void apply_avx512(std::byte* page, std::size_t len,
                                                       std::span<const std::byte> encoded) {
  const parsed p = validate(encoded, len);  // everything is checked before the page is touched
  const shape sh(len);
  for_each_block(p, [&](std::size_t b, std::uint64_t m, const std::byte* src) {
    if (b < sh.full_blocks) expand_avx512(page + b * k_block_bytes, m, src);
    else expand_scalar(page + b * k_block_bytes, m, src);
  });
}
__attribute__((target(MDSM_AVX2))) std::size_t words_avx2(std::span<const std::byte> encoded, std::size_t len) {
  return validate(encoded, len).changed_words;
}
#endif
}  // namespace

void apply_diff(std::byte* page, std::size_t len, std::span<const std::byte> encoded) {
#if defined(__x86_64__)
  if (g_isa == diff_isa::avx512) return apply_avx512(page, len, encoded);
  if (g_isa == diff_isa::avx2) return apply_avx2(page, len, encoded);
#endif
  apply_generic(page, len, encoded);
}

std::size_t diff_words(std::span<const std::byte> encoded, std::size_t len) {
#if defined(__x86_64__)
  if (g_isa != diff_isa::scalar) return words_avx2(encoded, len);
#endif
  return words_generic(encoded, len);
}

void copy_unit(std::byte* dst, const std::byte* src, std::size_t len) {
#if defined(__x86_64__)
  if (g_isa == diff_isa::avx512) return copy_avx512(dst, src, len);
  if (g_isa == diff_isa::avx2) return copy_avx2(dst, src, len);
#endif
  std::memcpy(dst, src, len);
}

bool diff_isa_supported(diff_isa isa) {
  switch (isa) {
    case diff_isa::scalar: return true;
    case diff_isa::avx2: return pick_isa() != diff_isa::scalar;
    case diff_isa::avx512: return pick_isa() == diff_isa::avx512;
  }
  return false;
}

diff_isa diff_isa_in_use() { return g_isa; }

void force_diff_isa(diff_isa isa) {
  MDSM_ASSERT(diff_isa_supported(isa), "forcing an instruction set this CPU lacks");
  g_isa = isa;
}

std::uint64_t hash_unit(const std::byte* p, std::size_t len) {
  // Four independent lanes of a multiply-rotate round (xxHash64's), so the loop runs at the
  // multiplier's throughput: ~0.2 us for 4 KiB.
  constexpr std::uint64_t k1 = 0x9E3779B185EBCA87ull, k2 = 0xC2B2AE3D27D4EB4Full;
  std::uint64_t lane[4] = {k1, k2, ~k1, ~k2};
  for (std::size_t i = 0; i + 32 <= len; i += 32) {
    for (int l = 0; l < 4; ++l) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * static_cast<std::size_t>(l), 8);
      lane[l] = std::rotl(lane[l] + w * k2, 31) * k1;
    }
  }
  std::uint64_t h = std::rotl(lane[0], 1) + std::rotl(lane[1], 7) + std::rotl(lane[2], 12) + std::rotl(lane[3], 18);
  h ^= h >> 33;
  h *= k2;
  h ^= h >> 29;
  return h;
}

std::uint64_t sample_hash_unit(const std::byte* p, std::size_t len) {
  constexpr std::size_t k_stride = 2048;  // two cache lines per 4 KiB page (diff.hpp)
  if (len % k_stride != 0) return hash_unit(p, len);
  std::uint64_t h = 0;
  for (std::size_t off = 0; off < len; off += k_stride) h = std::rotl(h, 17) ^ hash_unit(p + off, 64);
  return h;
}

}  // namespace mdsm::coherence
