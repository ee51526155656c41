// What the phase-structured mdsm applications (matmul, apsp, sor) share besides rows.hpp (block
// partition, inputs, comparison): a point-to-point "signals" channel that replaces a global
// barrier by RELEASE messages to exactly the ranks that need to see a step's writes.
#pragma once

#include "rows.hpp"

#include <mdsm/mdsm.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace mdsm_apps {

// ---- the signals channel ------------------------------------------------------------------------

// Point-to-point step signals. signal(dest, step) sends `dest` a RELEASE message naming `step`;
// wait(step, sources) returns once a signal for `step` has arrived from every rank in `sources`,
// and accepts them (together, as one acquire), so the caller then sees every write each source
// made before signalling. Signals for later steps that arrive early are kept until waited for.
//
// Threads: the handler (mdsm's delivery context) only stores messages, under `mu_`; the
// application thread takes them out under `mu_` and accepts them outside it. The handler never
// blocks and never touches coherent memory.
class signals {
 public:
  // Collective: registers the handler `name` (every rank creates its channels in the same order).
  explicit signals(const char* name) {
    id_ = mdsm::register_handler(name, [this](mdsm::message& m) {
      const auto step = m.as<std::int64_t>();
      std::lock_guard lk(mu_);
      arrived_.emplace(std::make_pair(step, m.origin()), m.store());
    });
  }
  signals(const signals&) = delete;
  signals& operator=(const signals&) = delete;

  void signal(int dest, std::int64_t step) { mdsm::send_value(dest, id_, step, mdsm::annotation::release); }
  void signal(std::span<const int> dests, std::int64_t step) {
    for (int d : dests) signal(d, step);
  }

  void wait(std::int64_t step, std::span<const int> sources) {
    if (sources.empty()) return;
    mdsm::wait_until([&] {
      std::lock_guard lk(mu_);
      for (int s : sources)
        if (arrived_.find({step, s}) == arrived_.end()) return false;
      return true;
    });
    std::vector<mdsm::stored_message> got;
    got.reserve(sources.size());
    {
      std::lock_guard lk(mu_);
      for (int s : sources) {
        auto it = arrived_.find({step, s});
        got.push_back(std::move(it->second));
        arrived_.erase(it);
      }
    }
    if (got.size() == 1) got.front().accept();
    else mdsm::accept_all(got);
  }
  void wait(std::int64_t step, int source) { wait(step, std::span<const int>(&source, 1)); }

  // Signals still waiting to be accepted (0 at the end of a correct program).
  std::size_t pending() {
    std::lock_guard lk(mu_);
    return arrived_.size();
  }

 private:
  mdsm::handler_id id_ = 0;
  std::mutex mu_;
  std::map<std::pair<std::int64_t, int>, mdsm::stored_message> arrived_;
};

// Every rank except `me`.
inline std::vector<int> other_ranks(int me, int ranks) {
  std::vector<int> v;
  for (int r = 0; r < ranks; ++r)
    if (r != me) v.push_back(r);
  return v;
}

}  // namespace mdsm_apps
