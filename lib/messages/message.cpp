// The public message and stored_message classes, on top of messages::endpoint.
#include "messages/endpoint.hpp"
#include "messages/current.hpp"

#include "common/deferred.hpp"

namespace mdsm {

const char* to_string(annotation a) noexcept {
  switch (a) {
    case annotation::none: return "NONE";
    case annotation::request: return "REQUEST";
    case annotation::release: return "RELEASE";
    case annotation::release_nt: return "RELEASE_NT";
  }
  return "invalid annotation";
}

// ---- message ---------------------------------------------------------------------------------

bool message::disposed() const noexcept { return in_->disposed; }

void message::check_size(std::size_t n) const {
  if (payload().size() != n)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "message::as: the payload has ", payload().size(), " bytes, not ", n,
                 " (handler '", in_->entry.name, "')");
}

void message::accept() { messages::current().accept(*in_); }
void message::forward(int dest) { messages::current().forward(*in_, dest); }
stored_message message::store() { return stored_message(messages::current().store(*in_)); }

// ---- stored_message --------------------------------------------------------------------------

stored_message::stored_message() noexcept = default;
stored_message::stored_message(std::unique_ptr<detail::stored> s) noexcept : s_(std::move(s)) {}
stored_message::stored_message(stored_message&&) noexcept = default;

stored_message& stored_message::operator=(stored_message&& other) noexcept {
  if (this != &other) {
    stored_message dying(std::move(*this));  // reports if it was undisposed
    s_ = std::move(other.s_);
  }
  return *this;
}

stored_message::~stored_message() {
  if (s_ && !s_->disposed && messages::needs_disposal(s_->annot))
    detail::defer_error(error(MDSM_ERR_NOT_DISPOSED,
                              detail::cat("mdsm: a stored ", to_string(s_->annot), " message for handler '",
                                          s_->entry->name, "' from rank ", s_->header().origin,
                                          " was destroyed without being accepted or forwarded")));
}

namespace {
detail::stored& get(const std::unique_ptr<detail::stored>& s) {
  if (!s) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "use of an empty stored_message (moved from, or never stored)");
  return *s;
}
}  // namespace

int stored_message::source() const { return get(s_).source; }
int stored_message::origin() const { return get(s_).header().origin; }
annotation stored_message::annot() const { return get(s_).annot; }
handler_id stored_message::handler() const { return get(s_).header().handler; }
std::span<const std::byte> stored_message::payload() const { return get(s_).payload(); }
bool stored_message::disposed() const { return get(s_).disposed; }

void stored_message::check_size(std::size_t n) const {
  if (payload().size() != n)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "stored_message::as: the payload has ", payload().size(), " bytes, not ", n);
}

void stored_message::accept() {
  detail::rethrow_deferred();
  messages::current().accept(get(s_));
}

void stored_message::forward(int dest) {
  detail::rethrow_deferred();
  messages::current().forward(get(s_), dest);
}

void stored_message::discard() { messages::current().discard(get(s_)); }

void accept_all(std::span<stored_message> messages) {
  detail::rethrow_deferred();
  std::vector<detail::stored*> group;
  group.reserve(messages.size());
  for (auto& m : messages) group.push_back(&get(m.s_));
  messages::current().accept_all(group);
}

}  // namespace mdsm
