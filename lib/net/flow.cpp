#include "net/flow.hpp"

#include <algorithm>

namespace mdsm::net {

thread_local constinit unsigned t_unthrottled = 0;

void flow_control::configure(int size, std::uint32_t window) {
  size_ = size;
  window_ = std::clamp(window, k_min_window, k_max_window);
  report_every_ = window_ / 2;
  throttle_limit_ = k_throttle_windows * window_;
  peers_ = std::make_unique<peer[]>(static_cast<std::size_t>(size));
}

bool flow_control::over_limit() const noexcept {
  for (int r = 0; r < size_; ++r) {
    const peer& p = peers_[static_cast<std::size_t>(r)];
    if (p.sent.load(std::memory_order_seq_cst) - p.returned.load(std::memory_order_relaxed) > throttle_limit_)
      return true;
  }
  return false;
}

}  // namespace mdsm::net
