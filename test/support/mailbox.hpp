// A message handler that accepts every message and counts arrivals per sender, so a test can
// "send RELEASE to r" and "wait until r has accepted k messages from s".
#pragma once

#include "support/session.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace mdsm_test {

class mailbox {
 public:
  // Collective (registers a handler). `accept_in_handler` false: the handler stores messages and
  // take() accepts them from the application thread.
  explicit mailbox(const char* name, bool accept_in_handler = true)
      : counts_(static_cast<std::size_t>(mdsm::size())), accept_in_handler_(accept_in_handler) {
    for (auto& c : counts_) c = std::make_unique<std::atomic<int>>(0);
    id_ = mdsm::register_handler(name, [this](mdsm::message& m) {
      std::lock_guard lk(mu_);
      values_.push_back(m.payload().size() >= sizeof(long) ? m.as<long>() : 0);
      if (accept_in_handler_) m.accept();
      else kept_.push_back(m.store());
      ++*counts_[static_cast<std::size_t>(m.origin())];
      ++total_;
    });
  }

  mdsm::handler_id id() const { return id_; }

  void send(int dest, mdsm::annotation a, long value = 0) { mdsm::send_value(dest, id_, value, a); }

  // Waits until `n` messages from `from` (or from anyone, if from < 0) have arrived in total.
  void wait(int n, int from = -1) {
    mdsm::wait_until([&] { return from < 0 ? total_.load() >= n : counts_[static_cast<std::size_t>(from)]->load() >= n; });
  }

  // Accepts the oldest stored message (accept_in_handler == false); there must be one.
  void accept_one() {
    mdsm::stored_message m;
    {
      std::lock_guard lk(mu_);
      m = std::move(kept_.front());
      kept_.erase(kept_.begin());
    }
    m.accept();
  }

  // Accepts every stored message from the application thread (accept_in_handler == false).
  void accept_stored() {
    std::vector<mdsm::stored_message> todo;
    {
      std::lock_guard lk(mu_);
      todo.swap(kept_);
    }
    for (auto& m : todo) m.accept();
  }

  std::vector<long> values() {
    std::lock_guard lk(mu_);
    return values_;
  }

 private:
  std::vector<std::unique_ptr<std::atomic<int>>> counts_;
  std::atomic<int> total_{0};
  bool accept_in_handler_;
  mdsm::handler_id id_ = 0;
  std::mutex mu_;
  std::vector<long> values_;
  std::vector<mdsm::stored_message> kept_;
};

}  // namespace mdsm_test
