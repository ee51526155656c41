// Water, the plain-MPI reference version of water.cpp (no mdsm): the same model (water_model.hpp),
// inputs, phases, energy reporting and verification, parallelized the way MPI molecular dynamics
// codes of that size are, with replicated data.
//
//   water_mpi [--version=mpi] [--size=MOLECULES] [--steps=N] [--seed=N] [--quick]
//
// Every rank keeps all molecules. Each step:
//   predict   every rank advances every molecule (cheap, O(n), and identical on every rank);
//   interf    every rank computes the pairs of its own molecules (the same block and pair window as
//             water.cpp) into a private force array, and one MPI_Allreduce sums the arrays;
//   correct   every rank finishes every velocity; the kinetic energy of its own molecules and the
//             potential energy of its own pairs go into its energy slot for the step.
// After the measured section rank 0 gathers the energy slots and checks them and its (replicated)
// final positions against the sequential run, as water.cpp does.
// Sizes: --size=N molecules (default 343, --quick 64), --steps=N (default 5), as in water.cpp.
#include "../common/mpi_app.hpp"
#include "water_model.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

using namespace mdsm_apps::water;

int main(int argc, char** argv) {
  const mdsm_apps::mpi_world world(&argc, &argv);
  const auto args = mdsm_apps::parse_args(argc, argv, "mpi");
  const int me = world.me, np = world.ranks;
  if (args.version != "mpi") {
    if (me == 0) std::fprintf(stderr, "water_mpi: unknown --version=%s (mpi)\n", args.version.c_str());
    MPI_Finalize();
    return 2;
  }
  const int n = static_cast<int>(args.size > 0 ? args.size : (args.quick ? 64 : 343));
  const int steps = static_cast<int>(args.steps > 0 ? args.steps : 5);
  const model md(n);
  const int lo = first_of(me, n, np), hi = first_of(me + 1, n, np);

  // Set-up, as water.cpp's rank 0 does it: the initial state and forces, here on every rank.
  auto mols = md.initial(args.seed);
  md.forces(mols);
  std::vector<energies> mine(static_cast<std::size_t>(steps));
  std::vector<double> f(3 * static_cast<std::size_t>(n));

  mdsm_apps::mpi_section section;
  section.begin();
  for (int s = 0; s < steps; ++s) {
    for (auto& m : mols) md.predict(m);

    std::fill(f.begin(), f.end(), 0.0);
    const double pe = md.partial_forces(mols.data(), lo, hi, f.data());
    section.communicate([&] {
      MPI_Allreduce(MPI_IN_PLACE, f.data(), static_cast<int>(f.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    });
    section.count_allreduce(f.size() * sizeof(double));
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) mols[i].force[d] = f[3 * static_cast<std::size_t>(i) + d];

    double ke = 0;
    for (int i = 0; i < n; ++i) {
      const double k = md.correct(mols[i]);
      if (i >= lo && i < hi) ke += k;
    }
    mine[static_cast<std::size_t>(s)] = energies{ke, pe};
  }
  section.end();

  // Rank r's slots arrive as [r][step]; verify() wants [step][r].
  static_assert(sizeof(energies) == 2 * sizeof(double));
  std::vector<energies> by_rank(me == 0 ? static_cast<std::size_t>(steps) * np : 0), slots(by_rank.size());
  MPI_Gather(mine.data(), 2 * steps, MPI_DOUBLE, by_rank.data(), 2 * steps, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  bool ok = true;
  if (me == 0) {
    for (int r = 0; r < np; ++r)
      for (int s = 0; s < steps; ++s)
        slots[static_cast<std::size_t>(s) * np + r] = by_rank[static_cast<std::size_t>(r) * steps + s];
    ok = verify(md, args.seed, steps, np, args.version, slots, mols);
  }
  const int rc = section.report("water", args.version, ok);
  MPI_Finalize();
  return rc;
}
