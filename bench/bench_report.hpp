// What every mdsm benchmark shares: Google Benchmark runs on every rank (each rank must take
// part in every iteration), rank 0 reports, and the report is a table that puts each
// measurement next to its baseline from the same run (raw MPI, MPI RMA, memcmp ...), because on
// a shared, noisy machine only side-by-side ratios mean something.
//
// Interleaving: a group's variants are registered in rounds (round 0 runs every variant once,
// then round 1 ...), so a baseline run and the variant runs it is compared with happen within
// milliseconds of each other: a burst of load from another process hits them alike. The ratio
// reported is the median over rounds of (variant time / baseline time of the same round).
//
// Naming: a benchmark is "<group>/<variant>"; the group's baseline is the variant named in the
// `baselines` list given to the reporter. Every rank must register the same benchmarks in the
// same order (they run in lock step).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mdsm_bench {

// A message or transfer size for a benchmark's name: 8B, 64KiB, 4MiB.
inline std::string size_name(long bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= (1 << 10)) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

struct variant {
  std::string name;
  std::function<void(benchmark::State&)> fn;
};

struct round_options {
  int rounds = 11;
  benchmark::IterationCount iterations = 1000;  // per run; every rank must run the same count
  benchmark::TimeUnit unit = benchmark::kMicrosecond;
  bool manual_time = false;  // the functions call state.SetIterationTime
};

// Registers `group/<variant>` for every variant, `opt.rounds` times, interleaved by round.
inline void register_interleaved(const std::string& group, const std::vector<variant>& variants,
                                 const round_options& opt) {
  for (int r = 0; r < opt.rounds; ++r)
    for (const variant& v : variants) {
      auto* b = benchmark::RegisterBenchmark((group + "/" + v.name).c_str(),
                                             [fn = v.fn](benchmark::State& s) { fn(s); });
      b->Iterations(opt.iterations)->Repetitions(1)->Unit(opt.unit);
      if (opt.manual_time) b->UseManualTime();
    }
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Prints the machine context, then at the end one line per group and variant: the median and
// fastest run (time per iteration), the number of runs, and the median of the per-round ratios
// to the group's baseline, with its target if one was given. Errors are printed as they come.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  // `baselines`: variant names that serve as a group's baseline (the first present is used).
  // `targets`: optional upper bounds on a variant's ratio: "group/variant" -> bound for one group,
  // "variant" -> bound for every group without its own.
  explicit ratio_reporter(std::vector<std::string> baselines, std::map<std::string, double> targets = {})
      : baselines_(std::move(baselines)), targets_(std::move(targets)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      const std::string name = r.run_name.function_name;
      if (r.error_occurred) {
        std::printf("%s: ERROR %s\n", name.c_str(), r.error_message.c_str());
        errors_ = true;
        continue;
      }
      const auto slash = name.rfind('/');
      if (slash == std::string::npos) continue;
      const std::string group = name.substr(0, slash), var = name.substr(slash + 1);
      if (std::find(order_.begin(), order_.end(), group) == order_.end()) order_.push_back(group);
      auto& vs = variants_[group];
      if (std::find(vs.begin(), vs.end(), var) == vs.end()) vs.push_back(var);
      times_[group][var].push_back(r.GetAdjustedRealTime());
      unit_[group] = benchmark::GetTimeUnitString(r.time_unit);
    }
  }

  void Finalize() override {
    std::printf("\n%-34s %-24s %11s %11s %6s %9s\n", "group", "variant", "median", "fastest", "runs", "ratio");
    for (const std::string& g : order_) {
      const auto& t = times_[g];
      std::string base;
      for (const std::string& b : baselines_)
        if (base.empty() && t.count(b)) base = b;
      for (const std::string& v : variants_[g]) {
        const auto& mine = t.at(v);
        std::printf("%-34s %-24s %9.3f%-2s %9.3f%-2s %6zu", g.c_str(), v.c_str(), median(mine), unit_[g].c_str(),
                    *std::min_element(mine.begin(), mine.end()), unit_[g].c_str(), mine.size());
        if (!base.empty() && v != base) {
          const double r = ratio(g, v);
          std::printf(" %8.3fx", r);
          auto it = targets_.find(g + "/" + v);
          if (it == targets_.end()) it = targets_.find(v);
          if (it != targets_.end()) std::printf("  target <= %.2fx: %s", it->second, r <= it->second ? "met" : "MISSED");
        } else if (v == base) {
          std::printf("  baseline");
        }
        std::printf("\n");
      }
    }
    std::fflush(stdout);
  }

  bool errors() const noexcept { return errors_; }

  // The median over rounds of (variant time / the group's baseline time in the same round); 0 if
  // the group, the variant or the baseline did not run.
  double ratio(const std::string& group, const std::string& var) const {
    const auto g = times_.find(group);
    if (g == times_.end() || !g->second.count(var)) return 0;
    for (const std::string& b : baselines_)
      if (g->second.count(b)) {
        const auto &mine = g->second.at(var), &base = g->second.at(b);
        std::vector<double> ratios;
        for (std::size_t i = 0; i < std::min(mine.size(), base.size()); ++i)
          if (base[i] > 0) ratios.push_back(mine[i] / base[i]);
        return median(ratios);
      }
    return 0;
  }

 private:
  std::vector<std::string> baselines_;
  std::map<std::string, double> targets_;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> variants_;
  std::map<std::string, std::map<std::string, std::vector<double>>> times_;
  std::map<std::string, std::string> unit_;
  bool errors_ = false;
};

// Ranks other than 0 run the same benchmarks and report nothing.
class silent_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace mdsm_bench
