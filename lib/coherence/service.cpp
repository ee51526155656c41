// The coherence protocol's other side: serving diff, copy and interval requests (in handler
// context, on whichever thread holds the progress lock) and matching replies to their waiters.
#include "coherence/engine.hpp"

#include "coherence/protocol.hpp"
#include "stats/counters.hpp"

#include <algorithm>
#include <tuple>

namespace mdsm::coherence {

std::uint32_t engine::register_box(box_ptr box) {
  std::lock_guard lk(boxes_mutex_);
  std::uint32_t token = next_token_++;
  if (next_token_ == 0) next_token_ = 1;  // 0 means "no reply expected"
  boxes_.emplace(token, std::move(box));
  return token;
}

void engine::send_protocol(int dest, std::uint32_t op, std::uint32_t token, std::span<const std::byte> payload) {
  // Never waits for credits (net/flow.hpp): replies are sent by handlers, and requests are
  // bounded by the waits they start (at most one per writer and fault, one round per GC) and are
  // often sent with page or metadata locks held, which a wait's handlers could need.
  net::unthrottled_scope unthrottled;
  stats::add(stats::counter::protocol_msgs_sent);
  stats::add(stats::counter::protocol_bytes_sent, sizeof(net::frame_header) + payload.size());
  const net::frame_header h = net::make_header(net::channel::coherence, op, rank_, 0, token);
  if (!is_request(op)) {
    transport_.send(dest, h, payload);
    return;
  }
  // A request: its reply is waited for. Sent without waiting inside MPI (send_request), and the
  // serving rank woken if it naps.
  transport_.send_request(dest, h, payload);
  transport_.bells().ring(dest);
}

void engine::on_frame(void* ctx, const net::inbound_frame& f) {
  auto* self = static_cast<engine*>(ctx);
  net::handler_scope scope("mdsm coherence protocol");
  switch (f.header.handler) {
    case op_diff_request: self->serve_diff_request(f, false, true); break;
    case op_copy_request: self->serve_diff_request(f, true, true); break;
    case op_diff_ahead: self->serve_diff_request(f, false, false); break;
    case op_copy_ahead: self->serve_diff_request(f, true, false); break;
    case op_interval_request: self->serve_interval_request(f); break;
    case op_diff_reply:
    case op_copy_reply:
    case op_interval_reply: self->take_reply(f); break;
    case op_gc_want:
    case op_gc_begin:
    case op_gc_vt:
    case op_gc_cut:
    case op_gc_ready:
    case op_gc_free: self->on_gc_frame(f); break;
    default: net::byte_reader::malformed("unknown coherence operation");
  }
  self->maybe_want_gc();
}

std::uint32_t engine::encode_pieces_locked(std::uint32_t u, page_entry& pe, std::uint32_t after,
                                           std::uint32_t through, net::byte_writer& out) {
  // Diffs are made lazily: if a requested notice still has writes only in the twin, make the
  // diff now (it becomes part of every notice awaiting the twin). A unit open for writing, or
  // written in our newest interval, is likely written again: its diff is a snapshot, so it stays
  // writable and keeps its twin (its next write costs no twin copy, and a unit written in every
  // interval can become hot even while its diffs are served or pushed); an older one gives its
  // twin up.
  const std::uint32_t closed = last_closed_.load(std::memory_order_relaxed);
  auto [b, e] = pe.own_overlapping(after, through, closed);
  if (std::any_of(pe.own.begin() + static_cast<std::ptrdiff_t>(b), pe.own.begin() + static_cast<std::ptrdiff_t>(e),
                  [](const own_notice& n) { return n.awaiting_twin; })) {
    if (pe.prot == os::prot::read_write || pe.own.back().last_closed(closed) == closed) snapshot_diff_locked(u, pe);
    else make_diff_locked(u, pe);
  }
  std::tie(b, e) = pe.own_overlapping(after, through, closed);
  // Each distinct piece of the requested notices once (in creation order), with the range of
  // EVERY interval it holds writes of (a lazy diff holds the writes of all intervals that awaited
  // its twin, including ones the requester has not heard of yet): the requester records it so
  // that it never applies the piece again when it learns of those intervals
  // (page_entry::applied_through).
  struct found {
    const diff* d;
    std::size_t notice;  // index in pe.own of one notice holding it
  };
  std::vector<found> pieces;
  for (std::size_t k = b; k < e; ++k)
    for (const auto& d : pe.own[k].pieces) pieces.push_back(found{d.get(), k});
  std::sort(pieces.begin(), pieces.end(), [](const found& a, const found& b) { return a.d->serial < b.d->serial; });
  pieces.erase(std::unique(pieces.begin(), pieces.end(), [](const found& a, const found& b) { return a.d == b.d; }),
               pieces.end());
  auto holds = [&](std::size_t k, const diff* d) {
    return std::any_of(pe.own[k].pieces.begin(), pe.own[k].pieces.end(), [&](const diff_ptr& p) { return p.get() == d; });
  };
  out.put(static_cast<std::uint32_t>(pieces.size()));
  std::uint32_t held = 0;
  for (const found& f : pieces) {
    // The notices holding a piece are contiguous in pe.own (see page_entry::own).
    std::size_t first = f.notice, last = f.notice;
    while (first > 0 && holds(first - 1, f.d)) --first;
    while (last + 1 < pe.own.size() && holds(last + 1, f.d)) ++last;
    out.put(pe.own[first].first);
    // An open range holds the piece for its closed part so far; it is never asked for more.
    // And a piece holds no more than the writes up to its complete_through: a snapshot made
    // while a close was making a range open [i, open] but had not yet published i as closed
    // goes into that range and the one before it, and a later snapshot holds the rest of the
    // open range. Claiming that range's end would let the requester skip the later snapshot
    // when it asks for those intervals (a third rank reading rows the writer keeps rewriting
    // read them stale: apsp hybrid at 3 ranks). (The piece's own first interval is its floor:
    // a piece of a range opened after its complete_through comes only with a later snapshot.)
    const std::uint32_t piece_last =
        std::max(pe.own[first].first, std::min(pe.own[last].last_closed(closed), f.d->complete_through));
    out.put(piece_last);
    held = std::max(held, piece_last);
    out.put(f.d->serial);
    out.put(static_cast<std::uint32_t>(f.d->bytes.size()));
    out.put_bytes(f.d->bytes);
  }
  return held;
}

void engine::serve_diff_request(const net::inbound_frame& f, bool with_copy, bool demand) {
  const std::uint32_t closed = last_closed_.load(std::memory_order_relaxed);
  const std::vector<std::uint32_t> req = decode_unit_request(f.payload(), region_.units(), closed);
  const auto n = static_cast<std::uint32_t>(req.size() / 3);
  thread_local net::byte_writer out;  // kept: a reply of many units is large, growing it each time costs
  out.clear();
  const std::size_t count_at = out.reserve_slot<std::uint32_t>();
  if (with_copy) {
    // Private units about to be copied out are write-protected first, one mprotect per run
    // (a rank reading a block another rank allocated asks for up to 128 units at once). A unit
    // out of order (only a malformed request has one) ends its privacy below, on its own.
    protection_batch batch = protections();
    std::uint32_t next = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t u = req[3 * k];
      if (u < next) continue;
      next = u + 1;
      batch.visit(u, [&](page_entry& pe) -> unit_protection {
        return {pe.fetching || pe.state != page_state::valid ? pe.prot : end_private_locked(u, pe)};
      });
    }
  }
  std::uint32_t answered = 0;
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::uint32_t u = req[3 * k], after = req[3 * k + 1], through = req[3 * k + 2];
    out.put(u);
    ++answered;
    std::lock_guard lk(pages_.lock_of(u));
    page_entry& pe = pages_.at(u);
    if (with_copy) {
      // Only the home is asked for copies, and the home never drops its copy. While it brings the
      // copy up to date (a background collection's validation, a fault of its own) the copy may
      // lack writes the requester counts on finding in it: the requester asks again shortly.
      // The reply ends at the first unit without a copy to send (its status is the last entry).
      const bool allocated = pe.state != page_state::unallocated && pe.state != page_state::no_copy;
      out.put(static_cast<std::uint8_t>(!allocated ? k_copy_unallocated : pe.fetching ? k_copy_busy : k_copy_follows));
      if (!allocated || pe.fetching) break;
      set_prot_locked(u, pe, end_private_locked(u, pe));  // done above unless out of order
      out.put_bytes(std::span<const std::byte>(region_.lib_unit(u), region_.unit()));
    }
    const std::uint32_t held = through > after ? encode_pieces_locked(u, pe, after, through, out) : 0;
    if (through <= after) out.put(std::uint32_t{0});
    note_served_locked(u, pe, f.source, through, std::max(through, held), demand && k == 0, with_copy);
  }
  out.fill_slot(count_at, answered);
  send_protocol(f.source, with_copy ? op_copy_reply : op_diff_reply, f.header.token, out.bytes());
}

void engine::serve_interval_request(const net::inbound_frame& f) {
  const std::vector<std::uint32_t> ranges = decode_interval_request(f.payload(), static_cast<std::size_t>(size_));
  net::byte_writer out;
  const std::size_t count_at = out.reserve_slot<std::uint32_t>();
  std::uint32_t count = 0;
  {
    std::lock_guard lk(meta_);
    for (std::size_t k = 0; k < ranges.size(); k += 3) {
      const std::uint32_t c = ranges[k], after = ranges[k + 1], through = ranges[k + 2];
      for (std::uint32_t i = std::max(after, store_.collected_through(c)) + 1; i <= std::min(through, vt_[c]); ++i) {
        store_.find(c, i)->encode(out);
        ++count;
      }
    }
  }
  out.fill_slot(count_at, count);
  send_protocol(f.source, op_interval_reply, f.header.token, out.bytes());
}

void engine::take_reply(const net::inbound_frame& f) {
  box_ptr box;
  {
    std::lock_guard lk(boxes_mutex_);
    auto it = boxes_.find(f.header.token);
    if (it == boxes_.end()) net::byte_reader::malformed("reply with an unknown token");
    box = std::move(it->second);
    boxes_.erase(it);
  }
  if (box->callback) {
    box->callback(f.payload(), f.source);
    return;
  }
  box->data.assign(f.payload().begin(), f.payload().end());
  box->source = f.source;
  box->ready.store(true, std::memory_order_release);
}

}  // namespace mdsm::coherence
