// The program's globals across ranks (program_image.hpp): read the main executable's program
// headers and dynamic section from memory (dl_iterate_phdr), no file access.
#include "api/program_image.hpp"

#include "common/check.hpp"

#include <mdsm/mdsm.hpp>

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstring>

namespace mdsm::api {

namespace {

#if defined(__x86_64__)
constexpr unsigned k_copy_reloc = R_X86_64_COPY;
constexpr unsigned k_none_reloc = R_X86_64_NONE;
#elif defined(__aarch64__)
constexpr unsigned k_copy_reloc = R_AARCH64_COPY;
constexpr unsigned k_none_reloc = R_AARCH64_NONE;
#else
#error "program_image: the relocation type of copy relocations is not known for this architecture"
#endif

constexpr std::size_t k_word = sizeof(std::uintptr_t);

// The main executable: the first object dl_iterate_phdr reports.
dl_phdr_info main_executable() {
  dl_phdr_info out{};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* ctx) -> int {
        *static_cast<dl_phdr_info*>(ctx) = *info;
        return 1;
      },
      &out);
  return out;
}

// The snapshot's header: enough to check that both ranks have the same layout.
struct snapshot_header {
  std::uint64_t base;
  std::uint64_t bytes;
  std::uint64_t ranges;
  std::uint64_t relocated;
  std::uint64_t kept;
  std::uint64_t hi;
};

// Removes [from, to) from a sorted list of disjoint ranges.
template <class Range>
void subtract(std::vector<Range>& rs, std::uint64_t from, std::uint64_t to) {
  std::vector<Range> out;
  for (const Range& r : rs) {
    if (to <= r.from || from >= r.to) {
      out.push_back(r);
      continue;
    }
    if (r.from < from) out.push_back(Range{r.from, from});
    if (to < r.to) out.push_back(Range{to, r.to});
  }
  rs = std::move(out);
}

template <class Range>
bool inside(const std::vector<Range>& rs, std::uint64_t from, std::uint64_t to) {
  return std::any_of(rs.begin(), rs.end(), [&](const Range& r) { return from >= r.from && to <= r.to; });
}

}  // namespace

program_image program_image::of_this_process() {
  const dl_phdr_info exe = main_executable();
  program_image img;
  img.base_ = exe.dlpi_addr;
  const ElfW(Dyn)* dynamic = nullptr;
  bool first = true;
  std::vector<range> relro;
  for (int i = 0; i < exe.dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = exe.dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      img.lo_ = first ? ph.p_vaddr : std::min<std::uint64_t>(img.lo_, ph.p_vaddr);
      img.hi_ = std::max<std::uint64_t>(img.hi_, ph.p_vaddr + ph.p_memsz);
      first = false;
      if ((ph.p_flags & PF_W) != 0) img.copied_.push_back(range{ph.p_vaddr, ph.p_vaddr + ph.p_memsz});
    } else if (ph.p_type == PT_DYNAMIC) {
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(exe.dlpi_addr + ph.p_vaddr);
    } else if (ph.p_type == PT_GNU_RELRO) {
      relro.push_back(range{ph.p_vaddr, ph.p_vaddr + ph.p_memsz});
    }
  }
  if (dynamic == nullptr)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT,
                 "the program is linked statically; the PARMACS macros copy the main process's globals to the "
                 "processes it CREATEs and need mdsm, MPI and the C library as shared libraries");
  std::sort(img.copied_.begin(), img.copied_.end(), [](const range& a, const range& b) { return a.from < b.from; });
  for (const range& r : relro) subtract(img.copied_, r.from, r.to);

  // The dynamic section: ld.so has made most pointers absolute (on x86-64 and AArch64 the section
  // is writable until RELRO); accept either form.
  auto offset_of = [&](ElfW(Addr) v) -> std::uint64_t { return v >= img.base_ && img.base_ != 0 ? v - img.base_ : v; };
  std::uint64_t rela = 0, relasz = 0, relaent = sizeof(ElfW(Rela)), jmprel = 0, pltrelsz = 0, symtab = 0,
                syment = sizeof(ElfW(Sym)), pltgot = 0, pltrel = DT_RELA;
  [[maybe_unused]] std::uint64_t relr = 0, relrsz = 0;
  std::uint64_t rel = 0;
  for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_RELA: rela = offset_of(d->d_un.d_ptr); break;
      case DT_RELASZ: relasz = d->d_un.d_val; break;
      case DT_RELAENT: relaent = d->d_un.d_val; break;
      case DT_JMPREL: jmprel = offset_of(d->d_un.d_ptr); break;
      case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
      case DT_PLTREL: pltrel = d->d_un.d_val; break;
      case DT_SYMTAB: symtab = offset_of(d->d_un.d_ptr); break;
      case DT_SYMENT: syment = d->d_un.d_val; break;
      case DT_PLTGOT: pltgot = offset_of(d->d_un.d_ptr); break;
      case DT_REL: rel = 1; break;
#ifdef DT_RELR
      case DT_RELR: relr = offset_of(d->d_un.d_ptr); break;
      case DT_RELRSZ: relrsz = d->d_un.d_val; break;
#endif
      default: break;
    }
  }
  if (rel != 0 || pltrel != DT_RELA)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "the program has REL relocations; the PARMACS macros read only RELA ones");

  auto at = [&](std::uint64_t off) { return reinterpret_cast<const std::byte*>(img.base_ + off); };
  auto note_word = [&](std::uint64_t off) {
    if (inside(img.copied_, off, off + k_word)) img.relocated_.push_back(off);
  };
  auto scan_rela = [&](std::uint64_t table, std::uint64_t size) {
    if (table == 0 || relaent == 0) return;
    for (std::uint64_t i = 0; i + relaent <= size; i += relaent) {
      ElfW(Rela) r;
      std::memcpy(&r, at(table + i), sizeof r);
      const unsigned type = ELF64_R_TYPE(r.r_info);
      if (type == k_none_reloc) continue;
      if (type == k_copy_reloc) {
        ElfW(Sym) s;
        std::memcpy(&s, at(symtab + ELF64_R_SYM(r.r_info) * syment), sizeof s);
        img.kept_.push_back(range{r.r_offset, r.r_offset + std::max<std::uint64_t>(s.st_size, 1)});
        continue;
      }
      note_word(r.r_offset);
    }
  };
  scan_rela(rela, relasz);
  scan_rela(jmprel, pltrelsz);
#ifdef DT_RELR
  if (relr != 0) {
    std::uint64_t where = 0;
    for (std::uint64_t i = 0; i + sizeof(ElfW(Relr)) <= relrsz; i += sizeof(ElfW(Relr))) {
      ElfW(Relr) e;
      std::memcpy(&e, at(relr + i), sizeof e);
      if ((e & 1) == 0) {
        note_word(e);
        where = e + k_word;
      } else {
        for (unsigned bit = 0; (e >>= 1) != 0; ++bit)
          if ((e & 1) != 0) note_word(where + bit * k_word);
        where += (8 * sizeof(ElfW(Relr)) - 1) * k_word;
      }
    }
  }
#endif
  // A lazily bound .got.plt (no -z now) outside RELRO: its first three words are ld.so's.
  if (pltgot != 0 && inside(img.copied_, pltgot, pltgot + 3 * k_word))
    img.kept_.push_back(range{pltgot, pltgot + 3 * k_word});
  std::sort(img.kept_.begin(), img.kept_.end(), [](const range& a, const range& b) { return a.from < b.from; });
  for (const range& k : img.kept_) subtract(img.copied_, k.from, k.to);
  std::sort(img.relocated_.begin(), img.relocated_.end());
  img.relocated_.erase(std::unique(img.relocated_.begin(), img.relocated_.end()), img.relocated_.end());
  std::erase_if(img.relocated_, [&](std::uint64_t off) { return !inside(img.copied_, off, off + k_word); });
  return img;
}

std::size_t program_image::bytes() const noexcept {
  std::size_t n = 0;
  for (const range& r : copied_) n += r.to - r.from;
  return n;
}

std::vector<std::byte> program_image::snapshot() const {
  const snapshot_header h{base_, bytes(), copied_.size(), relocated_.size(), kept_.size(), hi_};
  std::vector<std::byte> out(sizeof h + h.bytes);
  std::memcpy(out.data(), &h, sizeof h);
  std::size_t pos = sizeof h;
  for (const range& r : copied_) {
    std::memcpy(out.data() + pos, reinterpret_cast<const void*>(base_ + r.from), r.to - r.from);
    pos += r.to - r.from;
  }
  return out;
}

void program_image::apply(std::span<const std::byte> snap) const {
  snapshot_header h{};
  if (snap.size() < sizeof h)
    detail::fail(MDSM_ERR_MALFORMED, "a snapshot of the main process's globals is too short");
  std::memcpy(&h, snap.data(), sizeof h);
  if (h.bytes != bytes() || h.ranges != copied_.size() || h.relocated != relocated_.size() || h.kept != kept_.size() ||
      h.hi != hi_ || snap.size() != sizeof h + h.bytes)
    detail::fail(MDSM_ERR_MISMATCH, "the main process's globals have another layout than this process's (",
                 h.bytes, " bytes in ", h.ranges, " ranges there, ", bytes(), " in ", copied_.size(),
                 " here): do all ranks run the same program?");
  // This rank's own values of the address words, before they are overwritten.
  std::vector<std::uintptr_t> own(relocated_.size());
  for (std::size_t i = 0; i < relocated_.size(); ++i)
    std::memcpy(&own[i], reinterpret_cast<const void*>(base_ + relocated_[i]), k_word);
  std::size_t pos = sizeof h;
  for (const range& r : copied_) {
    std::memcpy(reinterpret_cast<void*>(base_ + r.from), snap.data() + pos, r.to - r.from);
    pos += r.to - r.from;
  }
  const std::uintptr_t their_lo = h.base + lo_, their_hi = h.base + hi_;
  for (std::size_t i = 0; i < relocated_.size(); ++i) {
    void* word = reinterpret_cast<void*>(base_ + relocated_[i]);
    std::uintptr_t v;
    std::memcpy(&v, word, k_word);
    if (v >= their_lo && v < their_hi) v = v - h.base + base_;            // into rank 0's image: ours
    else if (!mdsm::is_coherent(reinterpret_cast<const void*>(v))) v = own[i];  // a private address there
    std::memcpy(word, &v, k_word);
  }
}

std::optional<code_location> locate_code(const void* p) {
  struct search {
    std::uintptr_t addr;
    std::optional<code_location> out;
  } s{reinterpret_cast<std::uintptr_t>(p), std::nullopt};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* ctx) -> int {
        auto& s = *static_cast<search*>(ctx);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
          const std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (s.addr >= lo && s.addr < hi) {
            s.out = code_location{info->dlpi_name != nullptr ? info->dlpi_name : "", s.addr - info->dlpi_addr};
            return 1;
          }
        }
        return 0;
      },
      &s);
  return s.out;
}

void* resolve_code(const code_location& where) {
  struct search {
    const code_location& where;
    void* out;
  } s{where, nullptr};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* ctx) -> int {
        auto& s = *static_cast<search*>(ctx);
        if (s.where.object != (info->dlpi_name != nullptr ? info->dlpi_name : "")) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
          if (s.where.offset >= ph.p_vaddr && s.where.offset < ph.p_vaddr + ph.p_memsz) {
            s.out = reinterpret_cast<void*>(info->dlpi_addr + s.where.offset);
            return 1;
          }
        }
        return 1;
      },
      &s);
  return s.out;
}

bool in_main_executable(const void* p) {
  const dl_phdr_info exe = main_executable();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (int i = 0; i < exe.dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = exe.dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && a >= exe.dlpi_addr + ph.p_vaddr && a < exe.dlpi_addr + ph.p_vaddr + ph.p_memsz)
      return true;
  }
  return false;
}

}  // namespace mdsm::api
