// Fuzz target: diffs (coherence/diff.hpp), with every instruction set this CPU has.
//
// Input: one selector byte, then bytes. Selector bit 0 picks the mode, the other bits the unit
// size (sizes straddle the 64-word block and the 64-block summary word, and include units that
// are not a whole number of blocks).
//   decode      the bytes are an encoded diff as received in a reply or a RELEASE: diff_words
//               and apply_diff must accept or reject it alike under every instruction set, raise
//               only MDSM_ERR_MALFORMED, leave the page untouched when they reject it, write
//               nothing outside it (AddressSanitizer: the page is an exact-size allocation), and
//               produce the same page everywhere.
//   round trip  the bytes are a twin and a page: make_diff must give the same encoding under
//               every instruction set, of exactly the documented size, naming exactly the words
//               that differ, and applying it to the twin must reproduce the page.
#include "fuzz_common.hpp"

#include "coherence/diff.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

using namespace mdsm;
using namespace mdsm::coherence;

namespace {

constexpr std::size_t k_lens[] = {8, 16, 248, 256, 264, 1024, 4096, 4104, 16384, 16640 + 8};

std::vector<diff_isa> isas() {
  std::vector<diff_isa> v;
  for (diff_isa i : {diff_isa::scalar, diff_isa::avx2, diff_isa::avx512})
    if (diff_isa_supported(i)) v.push_back(i);
  return v;
}

// An exact-size heap copy, so AddressSanitizer sees any byte written or read past its end.
std::unique_ptr<std::byte[]> exact_copy(const std::vector<std::byte>& v) {
  auto p = std::make_unique<std::byte[]>(v.size());
  std::memcpy(p.get(), v.data(), v.size());
  return p;
}

std::vector<std::byte> pattern(std::size_t len) {
  std::vector<std::byte> p(len);
  for (std::size_t i = 0; i < len; ++i) p[i] = static_cast<std::byte>(i * 131 + 7);
  return p;
}

void decode(std::span<const std::byte> enc, std::size_t len) {
  const auto original = pattern(len);
  bool first = true, accepted = false;
  std::size_t words = 0;
  std::vector<std::byte> result;
  for (diff_isa isa : isas()) {
    force_diff_isa(isa);
    bool ok = true;
    std::size_t w = 0;
    auto page = exact_copy(original);
    try {
      w = diff_words(enc, len);
      apply_diff(page.get(), len, enc);
    } catch (const error& e) {
      if (e.code() != MDSM_ERR_MALFORMED) fuzz::finding("diff decoder raised another error than MDSM_ERR_MALFORMED");
      ok = false;
      if (std::memcmp(page.get(), original.data(), len) != 0) fuzz::finding("a rejected diff changed the page");
    }
    std::vector<std::byte> got(page.get(), page.get() + len);
    if (first) {
      accepted = ok, words = w, result = std::move(got), first = false;
      continue;
    }
    if (ok != accepted) fuzz::finding("instruction sets disagree on whether a diff is valid");
    if (ok && (w != words || got != result)) fuzz::finding("instruction sets apply a diff differently");
  }
  if (accepted && words * 4 > len) fuzz::finding("a diff names more words than the unit has");
}

void round_trip(std::span<const std::byte> in, std::size_t len) {
  // The twin from the first len bytes (zero-padded), the page from the next len bytes laid over
  // the twin (so short inputs change few words).
  std::vector<std::byte> twin(len), page;
  const std::size_t t = std::min(in.size(), len);
  std::copy_n(in.begin(), t, twin.begin());
  page = twin;
  const auto rest = in.subspan(t);
  std::copy_n(rest.begin(), std::min(rest.size(), len), page.begin());
  std::size_t changed = 0, blocks = 0;
  for (std::size_t b = 0; b * 256 < len; ++b) {
    std::size_t here = 0;
    for (std::size_t w = b * 64; w < std::min(len / 4, b * 64 + 64); ++w)
      here += std::memcmp(&page[4 * w], &twin[4 * w], 4) != 0;
    changed += here;
    blocks += here != 0;
  }
  const std::size_t total_blocks = (len / 4 + 63) / 64;
  const std::size_t want_size = changed == 0 ? 0 : 8 * ((total_blocks + 63) / 64) + 8 * blocks + 4 * changed;
  std::vector<std::byte> first_encoding;
  bool first = true;
  for (diff_isa isa : isas()) {
    force_diff_isa(isa);
    auto p = exact_copy(page), tw = exact_copy(twin);
    const diff_bytes d = make_diff(p.get(), tw.get(), len);
    if (d.size() != want_size) fuzz::finding("a diff's size is not the documented size");
    std::vector<std::byte> enc(d.data(), d.data() + d.size());
    if (first) first_encoding = enc, first = false;
    else if (enc != first_encoding) fuzz::finding("instruction sets encode a diff differently");
    if (diff_words(d, len) != changed) fuzz::finding("a diff does not name exactly the changed words");
    apply_diff(tw.get(), len, d);
    if (std::memcmp(tw.get(), page.data(), len) != 0) fuzz::finding("applying a diff did not reproduce the page");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const std::size_t len = k_lens[(selector >> 1) % std::size(k_lens)];
  const auto rest = fuzz::bytes_of(data + 1, size - 1);
  const diff_isa before = diff_isa_in_use();
  if ((selector & 1) == 0) decode(rest, len);
  else round_trip(rest, len);
  force_diff_isa(before);
  return 0;
}
