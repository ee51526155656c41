// Diffs: the words of a coherence unit that changed since its twin was made.
//
// Granularity is the 4-byte word, so two ranks writing neighbouring ints of one page merge
// correctly (writers of different bytes within one word do not; as in TreadMarks, such a
// program has a data race at word granularity). A diff never carries an unchanged word: writing
// it back would overwrite another writer's change to it.
//
// Encoding, for a unit of `len` bytes: W = len/4 words in B = ceil(W/64) blocks of 64 words,
//   summary  ceil(B/64) u64   bit b set iff block b holds a changed word (bits >= B clear)
//   masks    one u64 per set summary bit, in block order: bit i set iff word 64b+i changed
//            (never zero; bits of words >= W clear)
//   data     the changed words, 4 bytes each, in word order
// so its size is exactly 8*ceil(B/64) + 8*(changed blocks) + 4*(changed words). An empty
// encoding (0 bytes) means nothing changed. Integers are in host byte order (docs/PROTOCOL.md).
//
// Unlike the run-length encoding it replaced (`u32 offset, u32 length, bytes` per run), its cost
// does not depend on how the changes are scattered: making it is one compare of page and twin plus
// a gather of each changed block's words (AVX-512: vpcompressb of the word indices, vpermt2d),
// applying it one expand and masked store per group, and it is smaller for scattered changes (10%
// of a page's words changed at random: 544 bytes instead of 1128).
#pragma once

#include <cstddef>
#include <new>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <utility>

namespace mdsm::coherence {

// An encoded diff's bytes: inside one malloc'd block (not necessarily at its start: a dense diff
// keeps the buffer it was made in, where the data area is 64-byte aligned), never zero-filled first.
class diff_bytes {
 public:
  diff_bytes() = default;
  ~diff_bytes() { recycle(); }
  // A moved-from diff_bytes is empty (it must not keep pointing into the block it gave away).
  diff_bytes(diff_bytes&& o) noexcept
      : block_(std::move(o.block_)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)),
        work_buffer_(std::exchange(o.work_buffer_, false)) {}
  diff_bytes& operator=(diff_bytes&& o) noexcept {
    if (this == &o) return *this;
    recycle();
    block_ = std::move(o.block_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    work_buffer_ = std::exchange(o.work_buffer_, false);
    return *this;
  }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t capacity() const noexcept { return capacity_; }  // bytes held (metadata accounting)
  operator std::span<const std::byte>() const noexcept { return {data_, size_}; }
  std::span<const std::byte> bytes() const noexcept { return *this; }

 private:
  friend diff_bytes make_diff(const std::byte*, const std::byte*, std::size_t);
  // Frees the block, or, if it is a work buffer a dense diff took over, gives it to the calling
  // thread as its make_diff work buffer when that thread has none (a dense diff took it): saves a
  // malloc and a free of a unit-sized block per dense diff. Leaves block_ empty.
  void recycle() noexcept;
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, free_deleter> block_;  // the allocation, capacity_ bytes
  const std::byte* data_ = nullptr;                 // the encoding, inside block_
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  bool work_buffer_ = false;  // block_ was a make_diff work buffer (a dense diff took it over)
};

struct diff {
  diff_bytes bytes;
  // Creation order of this rank's diffs (1, 2, ...): a piece can hold the writes of several
  // intervals, and a receiver that applied it once must never apply it again (it would undo
  // newer writes to the same words), so receivers remember the newest serial they applied.
  std::uint32_t serial = 0;
  // The creator's newest interval closed before the diff was made: the diff (with the creator's
  // earlier diffs of the unit) holds every write to the unit up to this interval, and possibly
  // some of later ones. A snapshot attached to an open range holds only the start of that
  // range, so a piece is never served as holding more than this (encode_pieces_locked).
  std::uint32_t complete_through = 0;
  std::size_t footprint() const { return sizeof(*this) + bytes.capacity(); }
};
using diff_ptr = std::shared_ptr<const diff>;

// Encodes the words where `page` differs from `twin` (empty if none). Pre: len is a multiple
// of 8. Thread-safe (per-thread scratch memory).
diff_bytes make_diff(const std::byte* page, const std::byte* twin, std::size_t len);

// Applies an encoded diff to `page` of `len` bytes. Validates every field first (a malformed
// diff raises MDSM_ERR_MALFORMED and leaves the page untouched).
void apply_diff(std::byte* page, std::size_t len, std::span<const std::byte> encoded);

// Number of changed words the diff carries, after the same validation as apply_diff.
std::size_t diff_words(std::span<const std::byte> encoded, std::size_t len);

// A unit-sized buffer aligned to a cache line (twins): make_diff reads it alongside the page, and
// a misaligned operand makes every 64-byte load of the compare span two lines (measured: the
// compare costs 25-45% more when the twin is only 16-byte aligned, as new[] gives).
struct unit_buffer_delete {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};
using unit_buffer = std::unique_ptr<std::byte[], unit_buffer_delete>;
inline unit_buffer make_unit_buffer(std::size_t len) {
  return unit_buffer(static_cast<std::byte*>(::operator new[](len, std::align_val_t{64})));
}

// Copies a unit (twins, whole-unit fetches) with vector loads and stores. glibc's memcpy uses
// `rep movsb` for 4 KiB and up, which on this machine (AMD Zen 4) is up to 25x slower when source
// and destination are 4 KiB-aliased (a 4 KiB copy took 1.3 us instead of 50 ns).
// Pre: the ranges do not overlap.
void copy_unit(std::byte* dst, const std::byte* src, std::size_t len);

// A 64-bit hash of a unit's contents (len a multiple of 32).
std::uint64_t hash_unit(const std::byte* p, std::size_t len);
// The same over a sample: the first 64 bytes of every 2048 (len a multiple of 2048; else all
// of it). It tells whether a hot unit was written since the last look, reading two cache lines
// per 4 KiB page: by the time a check comes round each is a miss (a grid swept since), and a
// check of SOR's 4,096-page block read eight per page in ~6 ms on the barrier's critical path.
// A write the sample misses, like a collision, only ends a hot stretch early: the unit is
// write-protected with its twin and its range closed at the check's interval, so the write goes
// into the next diff, and the unit's next write faults and makes it hot again.
std::uint64_t sample_hash_unit(const std::byte* p, std::size_t len);

// Which instruction set make_diff / apply_diff / copy_unit use (chosen once at load: the widest
// the CPU has; avx512 means AVX-512 F, BW, VBMI and VBMI2, as on Ice Lake and Zen 4). Tests force each supported one in turn; not for concurrent use.
enum class diff_isa { scalar, avx2, avx512 };
bool diff_isa_supported(diff_isa isa);
diff_isa diff_isa_in_use();
void force_diff_isa(diff_isa isa);  // Pre: diff_isa_supported(isa)

}  // namespace mdsm::coherence
