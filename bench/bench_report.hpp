// What every mdsm benchmark shares: Google Benchmark runs on every rank (each rank must take
// part in every iteration), rank 0 reports, and the report ends with a ratio table that puts each
// measurement next to its baseline from the same run (raw MPI, MPI RMA, memcmp ...), because on
// a shared, noisy machine only side-by-side ratios mean something.
//
// Naming: a benchmark is "<group>/<variant>"; the group's baseline is the variant named in the
// `baselines` list given to the reporter. Ratios compare medians of the repetitions.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mdsm_bench {

class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  // `baselines`: variant names that serve as a group's baseline. `targets`: optional upper
  // bounds on a variant's ratio ("variant" -> bound), printed next to the ratio.
  explicit ratio_reporter(std::vector<std::string> baselines, std::map<std::string, double> targets = {})
      : baselines_(std::move(baselines)), targets_(std::move(targets)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.aggregate_name != "median" || r.error_occurred) continue;
      const std::string name = r.run_name.function_name;
      const auto slash = name.rfind('/');
      if (slash == std::string::npos) continue;
      std::string group = name.substr(0, slash);
      if (!r.run_name.args.empty()) group += " [" + r.run_name.args + "]";
      groups_[group].emplace_back(name.substr(slash + 1), r.GetAdjustedRealTime());
      if (order_.empty() || order_.back() != group) order_.push_back(group);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nratios to the baseline of each group (medians, same run):\n");
    for (const std::string& g : order_) {
      const auto& rows = groups_[g];
      double base = 0;
      std::string base_name;
      for (const std::string& b : baselines_)
        for (const auto& [variant, t] : rows)
          if (base_name.empty() && variant == b) base = t, base_name = variant;
      std::printf("  %s (baseline %s)\n", g.c_str(), base_name.empty() ? "missing" : base_name.c_str());
      for (const auto& [variant, t] : rows) {
        if (variant == base_name || base <= 0) continue;
        const double ratio = t / base;
        std::printf("    %-28s %8.3f x", variant.c_str(), ratio);
        if (auto it = targets_.find(variant); it != targets_.end())
          std::printf("   target <= %.2f x: %s", it->second, ratio <= it->second ? "met" : "MISSED");
        std::printf("\n");
      }
    }
    std::fflush(stdout);
  }

 private:
  std::vector<std::string> baselines_;
  std::map<std::string, double> targets_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::pair<std::string, double>>> groups_;
};

// Ranks other than 0 run the same benchmarks and report nothing.
class silent_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace mdsm_bench
