// What bench_coherence's diff benchmarks rely on (no timing): the 0% page pair is a page equal to
// its twin, every other share changes at least one word, and applying the diff of each share's
// pair to a page holding the twin reproduces its page -- the check diff/apply_pct makes after it
// timed the applications. (With changed_words(0) returning one word, diff/apply_pct/1 and /10
// reported that applying the diff did not reproduce the page, issue 19.)
#include "diff_pages.hpp"

#include <cstdio>

using namespace mdsm::bench;

int main() {
  int failed = 0;
  auto check = [&](bool ok, const char* what, int percent) {
    if (!ok) {
      std::fprintf(stderr, "FAILED (%d%%): %s\n", percent, what);
      ++failed;
    }
  };
  const page_pair same(0);
  check(std::memcmp(same.page(), same.twin(), k_page) == 0, "the 0% pair's page differs from its twin", 0);
  for (int percent : {1, 10, 100}) {
    const page_pair pp(percent);
    check(!changed_words(percent).empty(), "no word changed", percent);
    const auto d = mdsm::coherence::make_diff(pp.p(), pp.t(), k_page);
    page_pair target(0);
    mdsm::coherence::apply_diff(reinterpret_cast<std::byte*>(target.page()), k_page, d);
    check(reproduces(target, pp), "applying the diff did not reproduce the page", percent);
  }
  if (failed == 0) std::puts("bench_coherence's diff pages are consistent");
  return failed == 0 ? 0 : 1;
}
