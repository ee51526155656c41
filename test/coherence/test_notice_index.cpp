// The notice index against a reference model: per creator, one interval index per unit. Random
// paints of runs (exact repaints, overlaps on either side, runs inside others, joins with
// neighbours of the same interval, several runs per record) must leave latest() equal to the
// model everywhere, with no more segments than the distinct boundaries need; forget_through
// drops exactly the intervals up to it; valid_units lists exactly the valid units of a run.
#include "coherence/notice_index.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

using mdsm::coherence::notice_index;
using mdsm::coherence::unit_run;
using mdsm::coherence::vector_time;

namespace {
constexpr std::uint32_t k_units = 300;

void require_model(const notice_index& ix, const std::vector<std::vector<std::uint32_t>>& model) {
  for (std::uint32_t c = 0; c < model.size(); ++c)
    for (std::uint32_t u = 0; u < k_units; ++u) {
      INFO("creator " << c << ", unit " << u);
      REQUIRE(ix.latest(c, u) == model[c][u]);
    }
}
}  // namespace

TEST_CASE("notice_index: paints agree with a per-unit model", "[notice_index]") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20; ++trial) {
    notice_index ix(3, k_units);
    std::vector<std::vector<std::uint32_t>> model(3, std::vector<std::uint32_t>(k_units, 0));
    std::vector<std::uint32_t> next(3, 1);
    for (int step = 0; step < 200; ++step) {
      const auto c = static_cast<std::uint32_t>(rng() % 3);
      // A record: 1-3 sorted, disjoint, non-adjacent runs; often one painted before.
      std::vector<unit_run> runs;
      std::uint32_t at = static_cast<std::uint32_t>(rng() % 40);
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < n && at < k_units; ++k) {
        const auto len = std::min<std::uint32_t>(1 + static_cast<std::uint32_t>(rng() % 60), k_units - at);
        runs.push_back(unit_run{at, len});
        at += len + 1 + static_cast<std::uint32_t>(rng() % 50);
      }
      if (rng() % 3 == 0) runs = {unit_run{50, 100}};  // a block rewritten again and again
      const std::uint32_t index = next[c]++;
      ix.paint(c, runs, index);
      for (const unit_run& r : runs)
        for (std::uint32_t u = r.first; u < r.end(); ++u) model[c][u] = index;
      if (step % 20 == 0) require_model(ix, model);
    }
    require_model(ix, model);
    // Segments: no more than the runs of equal values in the model need.
    std::size_t needed = 0;
    for (const auto& m : model)
      for (std::uint32_t u = 0; u < k_units; ++u)
        if (m[u] != 0 && (u == 0 || m[u - 1] != m[u])) ++needed;
    REQUIRE(ix.bytes() / 48 <= needed);
    // Forget through a vector time: exactly the indices up to it go.
    vector_time g(3);
    for (std::size_t c = 0; c < 3; ++c) g[c] = next[c] / 2;
    ix.forget_through(g);
    for (std::size_t c = 0; c < 3; ++c)
      for (auto& v : model[c])
        if (v <= g[c]) v = 0;
    require_model(ix, model);
  }
}

TEST_CASE("notice_index: valid units of a run", "[notice_index]") {
  notice_index ix(2, k_units);
  std::vector<bool> valid(k_units, false);
  std::mt19937 rng(7);
  for (std::uint32_t u = 0; u < k_units; ++u) {
    valid[u] = rng() % 3 == 0;
    ix.set_valid(u, valid[u]);
  }
  for (const unit_run r : {unit_run{0, k_units}, unit_run{1, 63}, unit_run{63, 2}, unit_run{64, 64}, unit_run{70, 200},
                           unit_run{299, 1}, unit_run{128, 1}}) {
    std::vector<std::uint32_t> got, want;
    ix.valid_units(r, got);
    for (std::uint32_t u = r.first; u < r.end(); ++u)
      if (valid[u]) want.push_back(u);
    REQUIRE(got == want);
  }
}
