// Checks the block row partition of rows.hpp without MPI: the blocks tile [0, n) in rank
// order, differ in size by at most one, and owner_of_row inverts block_of.
#include "common/rows.hpp"

#include <cstdio>

int main() {
  int bad = 0;
  for (long n = 0; n < 300; ++n)
    for (int ranks = 1; ranks <= 12; ++ranks) {
      long next = 0, smallest = n, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const auto b = mdsm_apps::block_of(n, ranks, r);
        if (b.begin != next) ++bad;
        next = b.end;
        smallest = std::min(smallest, b.size());
        largest = std::max(largest, b.size());
        for (long i = b.begin; i < b.end; ++i)
          if (mdsm_apps::owner_of_row(n, ranks, i) != r) ++bad;
      }
      if (next != n || largest - smallest > 1) ++bad;
      if (bad) {
        std::fprintf(stderr, "partition of %ld rows over %d ranks is wrong\n", n, ranks);
        return 1;
      }
    }
  std::printf("block partition OK\n");
  return 0;
}
