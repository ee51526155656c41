// The Water model that water.cpp (mdsm) and water_mpi.cpp (plain MPI) share: the physics, the
// block distribution of molecules, the sequential reference and the verification. Written for
// these programs (SPLASH Water-nsquared's structure, not its physics):
//
// Each molecule is one site of mass 18 u with the SPC oxygen Lennard-Jones parameters (sigma
// 3.166 A, epsilon 0.650 kJ/mol) and a partial charge of +-0.41 e arranged as a checkerboard on
// the initial cubic lattice; the Coulomb term is shifted to zero at the spherical cutoff (half the
// periodic box, as in SPLASH), distances use the minimum image. Units: A, ps, u, kJ/mol. Density
// 0.0334 molecules/A^3 (liquid water). Integration is velocity Verlet in the SPLASH phases:
// predict (positions and half-step velocities), interf (pair forces, each pair once: molecule i
// against the next half of the others), correct (velocities, kinetic energy).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

namespace mdsm_apps::water {

inline constexpr double k_sigma = 3.166;           // A
inline constexpr double k_epsilon = 0.650;         // kJ/mol
inline constexpr double k_charge = 0.41;           // e
inline constexpr double k_coulomb = 1389.35458;    // kJ/mol * A / e^2
inline constexpr double k_mass = 18.0153;          // u
inline constexpr double k_force_to_accel = 100.0;  // (kJ/mol/A)/u -> A/ps^2
inline constexpr double k_density = 0.0334;        // molecules per A^3
inline constexpr double k_dt = 0.002;              // ps
inline constexpr double k_tolerance = 1e-9;        // relative, energies and positions

struct molecule {
  double pos[3];
  double vel[3];
  double force[3];
  double charge;
};
static_assert(std::is_trivially_copyable_v<molecule>);

inline std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline double uniform(std::uint64_t& s) { return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53; }  // [0,1)

struct model {
  int n = 0;
  double box = 0, cutoff = 0, cutoff2 = 0;

  explicit model(int molecules) : n(molecules) {
    box = std::cbrt(n / k_density);
    cutoff = box / 2;
    cutoff2 = cutoff * cutoff;
  }

  // The pairs (i, j) that molecule i computes: j = i+1 .. i+n/2 (mod n); for even n the opposite
  // molecule i+n/2 only from the lower half, so every unordered pair is computed exactly once.
  int window(int i) const { return (n % 2 == 0 && i >= n / 2) ? n / 2 - 1 : n / 2; }

  std::vector<molecule> initial(std::uint64_t seed) const {
    std::vector<molecule> m(static_cast<std::size_t>(n));
    int side = 1;
    while (side * side * side < n) ++side;
    const double spacing = box / side;
    std::uint64_t s = seed * 6151 + 11;
    double mean[3] = {0, 0, 0};
    for (int i = 0; i < n; ++i) {
      const int c[3] = {i % side, (i / side) % side, i / (side * side)};
      for (int d = 0; d < 3; ++d) {
        m[i].pos[d] = (c[d] + 0.5) * spacing + (uniform(s) - 0.5) * 0.2;
        m[i].vel[d] = (uniform(s) - 0.5) * 10.0;
        m[i].force[d] = 0;
        mean[d] += m[i].vel[d];
      }
      m[i].charge = ((c[0] + c[1] + c[2]) % 2 == 0) ? k_charge : -k_charge;
    }
    for (auto& x : m)
      for (int d = 0; d < 3; ++d) x.vel[d] -= mean[d] / n;
    return m;
  }

  // The force of j on i (added to fi, subtracted from fj) and the pair energy; 0 beyond the cutoff.
  double pair(const molecule& a, const molecule& b, double fa[3], double fb[3]) const {
    double r[3], r2 = 0;
    for (int d = 0; d < 3; ++d) {
      double x = a.pos[d] - b.pos[d];
      x -= box * std::nearbyint(x / box);
      r[d] = x;
      r2 += x * x;
    }
    if (r2 >= cutoff2) return 0;
    const double inv2 = 1.0 / r2, inv1 = std::sqrt(inv2);
    const double s2 = k_sigma * k_sigma * inv2, s6 = s2 * s2 * s2;
    const double qq = k_coulomb * a.charge * b.charge;
    const double energy = 4 * k_epsilon * (s6 * s6 - s6) + qq * (inv1 - 1.0 / cutoff);
    const double f_over_r = (24 * k_epsilon * (2 * s6 * s6 - s6) + qq * inv1) * inv2;
    for (int d = 0; d < 3; ++d) {
      fa[d] += f_over_r * r[d];
      fb[d] -= f_over_r * r[d];
    }
    return energy;
  }

  void predict(molecule& m) const {
    for (int d = 0; d < 3; ++d) {
      const double acc = k_force_to_accel * m.force[d] / k_mass;
      m.vel[d] += 0.5 * k_dt * acc;
      m.pos[d] += k_dt * m.vel[d];
      m.pos[d] -= box * std::floor(m.pos[d] / box);  // back into the box
    }
  }
  // Finishes the velocity; returns the kinetic energy.
  double correct(molecule& m) const {
    double v2 = 0;
    for (int d = 0; d < 3; ++d) {
      m.vel[d] += 0.5 * k_dt * k_force_to_accel * m.force[d] / k_mass;
      v2 += m.vel[d] * m.vel[d];
    }
    return 0.5 * k_mass * v2 / k_force_to_accel;
  }

  // interf for the molecules [lo, hi): adds the force of every pair they compute (window) into
  // f (three values per molecule) and returns the pairs' potential energy.
  double partial_forces(const molecule* mols, int lo, int hi, double* f) const {
    double pe = 0;
    for (int i = lo; i < hi; ++i)
      for (int k = 1; k <= window(i); ++k) {
        const int j = (i + k) % n;
        pe += pair(mols[i], mols[j], &f[3 * i], &f[3 * j]);
      }
    return pe;
  }

  // All forces of `mols` (sequential); returns the potential energy.
  double forces(std::vector<molecule>& mols) const {
    std::vector<double> f(3 * static_cast<std::size_t>(n), 0.0);
    const double pe = partial_forces(mols.data(), 0, n, f.data());
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) mols[i].force[d] = f[3 * i + d];
    return pe;
  }
};

struct energies {
  double kinetic;
  double potential;
};

// The sequential reference: energies after every step and the final state.
inline std::vector<energies> run_sequential(const model& md, std::vector<molecule>& mols, int steps) {
  std::vector<energies> out;
  md.forces(mols);
  for (int s = 0; s < steps; ++s) {
    for (auto& m : mols) md.predict(m);
    const double pe = md.forces(mols);
    double ke = 0;
    for (auto& m : mols) ke += md.correct(m);
    out.push_back({ke, pe});
  }
  return out;
}

// Block distribution: rank r owns molecules [first_of(r), first_of(r + 1)).
inline int first_of(int r, int n, int np) { return static_cast<int>(static_cast<long>(r) * n / np); }
inline int owner_of(int i, int n, int np) { return static_cast<int>((static_cast<long>(i + 1) * np + n - 1) / n) - 1; }

// Rank 0, after the measured section: runs the sequential reference and compares the energies of
// every step (slots[step * np + r] holds rank r's share) and the final positions with it, within
// k_tolerance; prints every step's energies and the largest differences.
inline bool verify(const model& md, std::uint64_t seed, int steps, int np, const std::string& version,
                   const std::vector<energies>& slots, const std::vector<molecule>& final_state) {
  auto ref = md.initial(seed);
  const auto ref_e = run_sequential(md, ref, steps);
  auto rel = [](double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-300); };
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    energies e{0, 0};
    for (int r = 0; r < np; ++r) {
      e.kinetic += slots[static_cast<std::size_t>(s) * np + r].kinetic;
      e.potential += slots[static_cast<std::size_t>(s) * np + r].potential;
    }
    const double dk = rel(e.kinetic, ref_e[s].kinetic), dp = rel(e.potential, ref_e[s].potential);
    worst = std::max({worst, dk, dp});
    std::printf("water %s: step %d kinetic %.9f potential %.9f total %.9f kJ/mol (sequential %.9f %.9f)\n",
                version.c_str(), s + 1, e.kinetic, e.potential, e.kinetic + e.potential, ref_e[s].kinetic,
                ref_e[s].potential);
  }
  double worst_pos = 0;
  for (int i = 0; i < md.n; ++i)
    for (int d = 0; d < 3; ++d) worst_pos = std::max(worst_pos, std::fabs(final_state[i].pos[d] - ref[i].pos[d]) / md.box);
  std::printf("water %s: %d molecules, %d steps, largest relative difference: energies %.3g, positions %.3g "
              "(tolerance %.0e)\n",
              version.c_str(), md.n, steps, worst, worst_pos, k_tolerance);
  return worst <= k_tolerance && worst_pos <= k_tolerance;
}

}  // namespace mdsm_apps::water
