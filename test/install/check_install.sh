#!/usr/bin/env bash
# Installs the build into a scratch directory and builds the examples out of tree against it with
# nothing but `pkg-config --cflags --libs mdsm` (shared library) and `--static` (static one), then
# runs them on 2 ranks.
#   check_install.sh <build dir> <source dir>
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --quiet >/dev/null
pcdir=$(dirname "$(find "$dest" -name mdsm.pc | head -1)")
[[ -f "$pcdir/mdsm.pc" ]] || { echo "mdsm.pc was not installed" >&2; exit 1; }
# The install was staged under $dest: point the prefix there (a real install needs no such step).
sed -i "s|^prefix=|prefix=$dest|" "$pcdir/mdsm.pc"
export PKG_CONFIG_PATH="$pcdir"
libdir=$(pkg-config --variable=libdir mdsm)
ls "$libdir"/libmdsm.so "$libdir"/libmdsm.a >/dev/null
for h in mdsm.h mdsm.hpp noncoherent.hpp sync.hpp upcalls.hpp fibers.hpp mdsm_status.h error.hpp parmacs.h parmacs.m4; do
  [[ -f "$(pkg-config --variable=includedir mdsm)/mdsm/$h" ]] || { echo "header $h missing" >&2; exit 1; }
done
cd "$dest"
# The build's compilers, and its sanitizers (meson test sets CC, CXX and MDSM_SANITIZE): a library
# built with -fsanitize needs programs built with the same flags, which bring the runtime.
read -r -a cc <<<"${CC:-cc}"
read -r -a cxx <<<"${CXX:-c++}"
sanitize=()
[[ "${MDSM_SANITIZE:-none}" == none ]] || sanitize=("-fsanitize=$MDSM_SANITIZE")
# Shared library.
if ((${#sanitize[@]})); then
  # A C program using a sanitized C++ library also needs the sanitizer's C++ runtime (clang's
  # UBSan keeps its type checks there): compiled as C, linked by the C++ driver.
  "${cc[@]}" "${sanitize[@]}" -std=c11 -Wall -Wextra -Werror -c -o hello_c.o "$src/examples/hello.c" $(pkg-config --cflags mdsm)
  "${cxx[@]}" "${sanitize[@]}" -o hello_c hello_c.o $(pkg-config --libs mdsm)
else
  "${cc[@]}" -std=c11 -Wall -Wextra -Werror -o hello_c "$src/examples/hello.c" $(pkg-config --cflags --libs mdsm)
fi
"${cxx[@]}" "${sanitize[@]}" -std=c++20 -Wall -Wextra -Werror -o hello_cpp "$src/examples/hello.cpp" \
  $(pkg-config --cflags --libs mdsm)
# Static libmdsm: the archive, then the shared libraries it needs (MPI, hwloc). A fully static
# `pkg-config --static` link would also need hwloc's private dependencies (libudev) as archives.
"${cxx[@]}" "${sanitize[@]}" -std=c++20 -Wall -Wextra -Werror -o hello_static "$src/examples/hello.cpp" \
  $(pkg-config --cflags mdsm) "$libdir/libmdsm.a" $(pkg-config --libs ompi-c hwloc) -lpthread
if ldd ./hello_static | grep -q libmdsm; then echo "hello_static links libmdsm dynamically" >&2; exit 1; fi
export LD_LIBRARY_PATH="$libdir"
for prog in hello_c hello_cpp hello_static; do
  out=$("$src/tools/mdsmrun" -n 2 "./$prog")
  echo "$out"
  grep -q "rank 1 read: hello from rank 0 of 2" <<<"$out" || { echo "$prog did not greet" >&2; exit 1; }
done
# A PARMACS program through the installed macro set (m4, then cc), on 2 ranks; with the static
# libmdsm it is refused at MAIN_INITENV (mdsm's state would be among the globals CREATE copies).
incdir=$(pkg-config --variable=includedir mdsm)
m4 -s "$incdir/mdsm/parmacs.m4" "$src/examples/parmacs/radix.C" >radix.c
"${cc[@]}" "${sanitize[@]}" -std=c11 -Wall -Wextra -Werror -c -o radix.o radix.c $(pkg-config --cflags mdsm)
"${cxx[@]}" "${sanitize[@]}" -o radix radix.o $(pkg-config --libs mdsm)
# Under a sanitizer whose runtime the compiler links into the executable (clang's default) the
# runtime's state is among the globals CREATE copies from rank 0: MAIN_INITENV refuses the program
# with a reason (as for a static libmdsm). With a shared runtime (gcc) it runs.
out=$("$src/tools/mdsmrun" -n 2 ./radix -p2 -n4096 2>&1) || true
if grep -q "^check: matches qsort" <<<"$out"; then
  echo "$out" | grep "^check:"
elif ((${#sanitize[@]})) && grep -q "a sanitizer runtime (__.san_init) is linked into the program" <<<"$out"; then
  echo "the PARMACS program was refused under the sanitizer, with its reason"
else
  echo "the PARMACS program did not sort: $out" >&2
  exit 1
fi
"${cxx[@]}" "${sanitize[@]}" -o radix_static radix.o "$libdir/libmdsm.a" $(pkg-config --libs ompi-c hwloc) -lpthread
if out=$("$src/tools/mdsmrun" -n 1 ./radix_static 2>&1); then
  echo "the PARMACS program linked with libmdsm.a was not refused" >&2
  exit 1
fi
grep -q "mdsm is linked statically into the program" <<<"$out" || { echo "no reason given: $out" >&2; exit 1; }
echo "install check passed"
