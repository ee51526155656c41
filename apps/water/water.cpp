// Water: molecular dynamics of water molecules in the manner of SPLASH Water-nsquared
// (TreadMarks/CarlOS application).
//
//   water --version=lock|hybrid [--size=MOLECULES] [--steps=N] [--seed=N] [--quick]
//
// The physics (written for this program, deterministic): each molecule is one site of mass 18 u
// with the SPC oxygen Lennard-Jones parameters (sigma 3.166 A, epsilon 0.650 kJ/mol) and a partial
// charge of +-0.41 e arranged as a checkerboard on the initial cubic lattice; the Coulomb term is
// shifted to zero at the spherical cutoff (half the periodic box, as in SPLASH), distances use the
// minimum image. Units: A, ps, u, kJ/mol. Density 0.0334 molecules/A^3 (liquid water). Integration
// is velocity Verlet split into the SPLASH phases, each ended by an mdsm::barrier:
//   predict   owners advance positions and half-step velocities of their molecules;
//   interf    every rank computes its molecules against the next half of the others (each pair
//             once, the N^2/2 scheme), accumulating forces and potential energy privately, then
//             performs one update per molecule it touched;
//   correct   owners finish the velocities and compute the kinetic energy.
//   lock    the force updates go into coherent memory under one mdsm::mutex per molecule.
//   hybrid  a force update is a NONE message carrying the accumulated vector to the molecule's
//           owner, whose handler adds it into a PRIVATE buffer (handlers run one at a time); the
//           owner knows how many updates it will get, waits for all of them, then writes the final
//           forces of its molecules into coherent memory itself.
// Verification (rank 0, after the measured section): a sequential run of the same model; the
// kinetic and potential energies of every step and the final positions must agree to a relative
// 1e-9 (the parallel runs sum forces in another order).
#include "../common/app.hpp"

#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

namespace {

constexpr double k_sigma = 3.166;             // A
constexpr double k_epsilon = 0.650;           // kJ/mol
constexpr double k_charge = 0.41;             // e
constexpr double k_coulomb = 1389.35458;      // kJ/mol * A / e^2
constexpr double k_mass = 18.0153;            // u
constexpr double k_force_to_accel = 100.0;    // (kJ/mol/A)/u -> A/ps^2
constexpr double k_density = 0.0334;          // molecules per A^3
constexpr double k_dt = 0.002;                // ps
constexpr double k_tolerance = 1e-9;          // relative, energies and positions

struct molecule {
  double pos[3];
  double vel[3];
  double force[3];
  double charge;
};
static_assert(std::is_trivially_copyable_v<molecule>);

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform(std::uint64_t& s) { return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53; }  // [0,1)

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

  // All forces of `mols` (sequential); returns the potential energy.
  double forces(std::vector<molecule>& mols) const {
    std::vector<double> f(3 * static_cast<std::size_t>(n), 0.0);
    double pe = 0;
    for (int i = 0; i < n; ++i)
      for (int k = 1; k <= window(i); ++k) {
        const int j = (i + k) % n;
        pe += pair(mols[i], mols[j], &f[3 * i], &f[3 * j]);
      }
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
std::vector<energies> run_sequential(const model& md, std::vector<molecule>& mols, int steps) {
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
int first_of(int r, int n, int np) { return static_cast<int>(static_cast<long>(r) * n / np); }
int owner_of(int i, int n, int np) { return static_cast<int>((static_cast<long>(i + 1) * np + n - 1) / n) - 1; }

// The molecules (other than its own) whose force rank r updates.
std::vector<char> touched_by(const model& md, int r, int np) {
  std::vector<char> t(static_cast<std::size_t>(md.n), 0);
  for (int i = first_of(r, md.n, np); i < first_of(r + 1, md.n, np); ++i)
    for (int k = 1; k <= md.window(i); ++k) t[(i + k) % md.n] = 1;
  for (int i = first_of(r, md.n, np); i < first_of(r + 1, md.n, np); ++i) t[i] = 0;
  return t;
}

struct force_update {
  std::int32_t molecule;
  std::int32_t pad;
  double f[3];
};

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  auto args = mdsm_apps::parse_args(argc, argv, "lock");
  const int n = static_cast<int>(args.size > 0 ? args.size : (args.quick ? 64 : 343));
  const int steps = static_cast<int>(args.steps > 0 ? args.steps : 5);
  const bool hybrid = args.version == "hybrid";
  if (!hybrid && args.version != "lock") {
    if (mdsm::rank() == 0) std::fprintf(stderr, "water: unknown --version=%s (lock, hybrid)\n", args.version.c_str());
    mdsm::finalize();
    return 2;
  }
  const int me = mdsm::rank(), np = mdsm::size();
  const model md(n);
  const int lo = first_of(me, n, np), hi = first_of(me + 1, n, np);

  // Coherent state: the molecules and one energy slot per (step, rank).
  auto* mols = mdsm::alloc_collective_array<molecule>(static_cast<std::size_t>(n));
  auto* slots = mdsm::alloc_collective_array<energies>(static_cast<std::size_t>(steps) * np);
  std::vector<std::unique_ptr<mdsm::mutex>> locks;
  if (!hybrid)
    for (int i = 0; i < n; ++i) locks.push_back(std::make_unique<mdsm::mutex>());
  mdsm::barrier bar;

  // hybrid: the owner's private accumulation buffer, written by the handler only.
  std::vector<double> acc(3 * static_cast<std::size_t>(n), 0.0);
  std::atomic<long> received{0};
  std::atomic<bool> misrouted{false};  // an update for a molecule this rank does not own
  mdsm::handler_id h_force = 0;
  long expected = 0;
  if (hybrid) {
    h_force = mdsm::register_handler("water.force", [&](mdsm::message& m) {
      const auto u = m.as<force_update>();
      if (u.molecule < lo || u.molecule >= hi) misrouted.store(true);  // counted, fails verification
      else
        for (int d = 0; d < 3; ++d) acc[3 * static_cast<std::size_t>(u.molecule) + d] += u.f[d];
      received.fetch_add(1, std::memory_order_release);
    });
    for (int r = 0; r < np; ++r) {
      if (r == me) continue;
      auto t = touched_by(md, r, np);
      for (int i = lo; i < hi; ++i) expected += t[i];
    }
  }
  const auto mine_touched = touched_by(md, me, np);

  if (me == 0) {
    auto init = md.initial(args.seed);
    md.forces(init);
    std::copy(init.begin(), init.end(), mols);
  }
  bar.arrive_and_wait();

  const double start = mdsm_apps::begin_measurement();
  std::vector<double> f(3 * static_cast<std::size_t>(n));
  std::vector<molecule> local(static_cast<std::size_t>(n));
  for (int s = 0; s < steps; ++s) {
    // predict (and, for lock, clear the forces the updates accumulate into)
    for (int i = lo; i < hi; ++i) {
      md.predict(mols[i]);
      if (!hybrid)
        for (int d = 0; d < 3; ++d) mols[i].force[d] = 0;
    }
    bar.arrive_and_wait();

    // interf: private accumulation over this rank's half of the pairs
    std::copy(mols, mols + n, local.begin());
    std::fill(f.begin(), f.end(), 0.0);
    double pe = 0;
    for (int i = lo; i < hi; ++i)
      for (int k = 1; k <= md.window(i); ++k) {
        const int j = (i + k) % n;
        pe += md.pair(local[i], local[j], &f[3 * i], &f[3 * j]);
      }
    if (!hybrid) {
      for (int j = 0; j < n; ++j) {
        if (!mine_touched[j] && (j < lo || j >= hi)) continue;
        std::lock_guard lk(*locks[j]);
        for (int d = 0; d < 3; ++d) mols[j].force[d] += f[3 * j + d];
      }
    } else {
      for (int j = 0; j < n; ++j) {
        if (!mine_touched[j]) continue;
        const force_update u{j, 0, {f[3 * j], f[3 * j + 1], f[3 * j + 2]}};
        mdsm::send_value(owner_of(j, n, np), h_force, u, mdsm::annotation::none);
      }
      // Every update for this step has arrived once the count does; the handler is then done with
      // `acc` until the next step's updates, which are sent only after the next barrier.
      const long want = expected * (s + 1);
      mdsm::wait_until([&] { return received.load(std::memory_order_acquire) >= want; });
      for (int i = lo; i < hi; ++i)
        for (int d = 0; d < 3; ++d) {
          const std::size_t k = 3 * static_cast<std::size_t>(i) + d;
          mols[i].force[d] = acc[k] + f[k];
          acc[k] = 0;
        }
    }
    bar.arrive_and_wait();

    // correct
    double ke = 0;
    for (int i = lo; i < hi; ++i) ke += md.correct(mols[i]);
    slots[static_cast<std::size_t>(s) * np + me] = energies{ke, pe};
  }
  bar.arrive_and_wait();
  auto m = mdsm_apps::end_measurement(start);
  // Rank 0 copies the results out while the others wait in a barrier: the copy may fetch diffs
  // from them, and without a progress thread only a rank inside mdsm serves them.
  std::vector<energies> all_slots;
  std::vector<molecule> final_state;
  if (me == 0) {
    all_slots.assign(slots, slots + static_cast<std::size_t>(steps) * np);
    final_state.assign(mols, mols + n);
  }
  bar.arrive_and_wait();

  bool ok = !misrouted.load();
  if (me == 0) {
    auto ref = md.initial(args.seed);
    const auto ref_e = run_sequential(md, ref, steps);
    auto rel = [](double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-300); };
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
      energies e{0, 0};
      for (int r = 0; r < np; ++r) {
        e.kinetic += all_slots[static_cast<std::size_t>(s) * np + r].kinetic;
        e.potential += all_slots[static_cast<std::size_t>(s) * np + r].potential;
      }
      const double dk = rel(e.kinetic, ref_e[s].kinetic), dp = rel(e.potential, ref_e[s].potential);
      worst = std::max({worst, dk, dp});
      std::printf("water %s: step %d kinetic %.9f potential %.9f total %.9f kJ/mol (sequential %.9f %.9f)\n",
                  args.version.c_str(), s + 1, e.kinetic, e.potential, e.kinetic + e.potential, ref_e[s].kinetic,
                  ref_e[s].potential);
    }
    double worst_pos = 0;
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) worst_pos = std::max(worst_pos, std::fabs(final_state[i].pos[d] - ref[i].pos[d]) / md.box);
    ok = ok && worst <= k_tolerance && worst_pos <= k_tolerance;
    std::printf("water %s: %d molecules, %d steps, largest relative difference: energies %.3g, positions %.3g "
                "(tolerance %.0e)\n",
                args.version.c_str(), n, steps, worst, worst_pos, k_tolerance);
  }
  const int rc = mdsm_apps::report("water", args.version, ok, m);
  mdsm::finalize();
  return rc;
}
