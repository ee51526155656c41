// The wire format. Every frame is one MPI message on mdsm's private communicator:
//
//   frame_header (32 bytes) | payload (payload_len bytes) | consistency info (cinfo_len bytes)
//
// Integers are in the host's byte order (an mdsm job runs one binary on one architecture).
// `byte_writer` appends; `byte_reader` is the only way received bytes are interpreted, and it
// checks every read against the end of the buffer, so a malformed frame raises
// MDSM_ERR_MALFORMED instead of reading out of bounds.
#pragma once

#include "common/check.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

namespace mdsm::net {

// Which layer consumes a frame. The transport validates the header; the layer validates the rest.
enum class channel : std::uint8_t {
  control = 1,    // transport-internal (large-frame announcements)
  coherence = 2,  // lib/coherence protocol: diff, page and interval requests and replies
  messages = 3,   // lib/messages: user active messages with annotations
  noncoherent = 4,  // lib/regions/one_sided: get, put and atomics on the non-coherent region
};
inline constexpr std::uint8_t k_channel_max = 4;

inline constexpr std::uint16_t k_frame_magic = 0x4D44;  // "MD"

// Per-hop fields: `credit` and `flags` describe the hop, not the message. The transport writes
// them into every frame it sends (a forwarded frame gets this hop's values), so they are never
// part of what a consumer reads or forwards as the message.
inline constexpr std::uint8_t k_flag_waits = 1;  // sent by a thread that waits for credits (net/flow.hpp)

struct frame_header {
  std::uint16_t magic;        // k_frame_magic
  std::uint8_t chan;          // channel
  std::uint8_t annot;         // annotation (lib/messages); 0 on other channels
  std::uint32_t handler;      // handler id (lib/messages) or operation code (other channels)
  std::int32_t origin;        // original sender: survives forwarding
  std::uint32_t payload_len;  // bytes of payload after the header
  std::uint32_t cinfo_len;    // bytes of consistency information after the payload
  std::uint32_t token;        // request/reply matching for protocols that need it; else 0
  std::uint32_t credit;       // per hop: credits the sender has returned to the receiver so far (mod 2^32)
  std::uint8_t flags;         // per hop: k_flag_waits
  std::uint8_t reserved[3];   // 0; keeps the payload 8-byte aligned in the receive buffers
};
static_assert(sizeof(frame_header) == 32 && std::is_trivially_copyable_v<frame_header>);

inline frame_header make_header(channel c, std::uint32_t handler, int origin, std::uint8_t annot = 0,
                                std::uint32_t token = 0) {
  return frame_header{k_frame_magic, static_cast<std::uint8_t>(c), annot, handler, origin, 0, 0, token, 0, 0, {}};
}

// The largest frame: MPI counts are int.
inline constexpr std::uint64_t k_frame_limit = 0x7fffffff;

// Every check of a received frame's header in one test (the path of every message): magic,
// channel, origin rank in [0, ranks), and the lengths adding up to the bytes received. The
// lengths are 32-bit, so their sum cannot wrap in 64 bits; channel 0 is in range (its consumer
// reports the frame). header_problem says which check failed.
[[gnu::always_inline]] inline bool header_ok(const frame_header& h, std::size_t frame_bytes, int ranks) noexcept {
  return !((h.magic != k_frame_magic) | (h.chan > k_channel_max) |
           (static_cast<unsigned>(h.origin) >= static_cast<unsigned>(ranks)) |
           (std::uint64_t{h.payload_len} + h.cinfo_len + sizeof h != frame_bytes));
}
inline const char* header_problem(const frame_header& h, std::size_t frame_bytes, int ranks) noexcept {
  if (h.magic != k_frame_magic) return "bad magic";
  if (h.chan > k_channel_max) return "unknown channel";
  if (h.origin < 0 || h.origin >= ranks) return "origin rank out of range";
  if (std::uint64_t{h.payload_len} + h.cinfo_len + sizeof h != frame_bytes) return "lengths do not match the frame size";
  return nullptr;
}

class byte_writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::memcpy(grow(sizeof(T)), &v, sizeof(T));
  }
  void put_bytes(std::span<const std::byte> bytes) {
    if (!bytes.empty()) std::memcpy(grow(bytes.size()), bytes.data(), bytes.size());
  }
  template <class T>
  void put_array(std::span<const T> values) {
    put_bytes(std::as_bytes(values));
  }
  // Reserves room for a T to be filled in later (e.g. a count known only at the end).
  template <class T>
  std::size_t reserve_slot() {
    const std::size_t at = size_;
    grow(sizeof(T));
    return at;
  }
  template <class T>
  void fill_slot(std::size_t at, const T& v) {
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  std::span<const std::byte> bytes() const { return {buf_.data(), size_}; }
  // For a frame built here: the transport writes its per-hop header fields in place.
  std::span<std::byte> mutable_bytes() { return {buf_.data(), size_}; }
  std::size_t size() const { return size_; }
  void clear() { size_ = 0; }

 private:
  // Room for n more bytes; returns where they go. The buffer only grows (writers are reused),
  // so appending is a bounds check and a memcpy: inline, with the resize out of line (inlined,
  // it made the compiler call grow itself, ~25 instructions per put on every RELEASE).
  std::byte* grow(std::size_t n) {
    if (buf_.size() - size_ < n) [[unlikely]]
      enlarge(n);
    std::byte* at = buf_.data() + size_;
    size_ += n;
    return at;
  }
  [[gnu::noinline]] void enlarge(std::size_t n) { buf_.resize(std::max(2 * buf_.size(), size_ + n + 64)); }
  std::vector<std::byte> buf_;
  std::size_t size_ = 0;
};

class byte_reader {
 public:
  explicit byte_reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  // `count` values of T; the count is checked against what is left before anything is allocated.
  template <class T>
  void get_array(std::size_t count, std::vector<T>& out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (count > remaining() / sizeof(T)) malformed("array longer than the frame");
    out.resize(count);
    if (count == 0) return;  // out.data() may be null: memcpy must not see it
    std::memcpy(out.data(), bytes_.data() + at_, count * sizeof(T));
    at_ += count * sizeof(T);
  }
  std::span<const std::byte> get_bytes(std::size_t n) {
    need(n);
    auto s = bytes_.subspan(at_, n);
    at_ += n;
    return s;
  }
  std::size_t remaining() const { return bytes_.size() - at_; }
  bool done() const { return at_ == bytes_.size(); }
  void expect_done() const {
    if (!done()) malformed("trailing bytes");
  }
  [[noreturn]] static void malformed(const char* why) { detail::fail(MDSM_ERR_MALFORMED, "malformed frame: ", why); }

 private:
  void need(std::size_t n) const {
    if (n > remaining()) malformed("field runs past the end of the frame");
  }
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

// The control channel's large-frame announcement (operation k_op_large): the payload is the
// u64 length of the frame that follows on its own tag, a whole frame (more than a header) of at
// most k_frame_limit bytes.
inline constexpr std::uint32_t k_op_large = 1;
inline std::uint64_t decode_large_announcement(std::span<const std::byte> payload) {
  byte_reader in(payload);
  const auto len = in.get<std::uint64_t>();
  in.expect_done();
  if (len <= sizeof(frame_header) || len > k_frame_limit) byte_reader::malformed("large-frame length out of range");
  return len;
}

}  // namespace mdsm::net
