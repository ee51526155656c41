// Water: molecular dynamics of water molecules in the manner of SPLASH Water-nsquared
// (TreadMarks/CarlOS application).
//
//   water --version=lock|hybrid [--size=MOLECULES] [--steps=N] [--seed=N] [--quick]
//
// The physics (written for this program, deterministic) is in water_model.hpp, shared with
// water_mpi.cpp, the plain-MPI reference version. Integration is velocity Verlet split into the
// SPLASH phases, each ended by an mdsm::barrier:
//   predict   owners advance positions and half-step velocities of their molecules;
//   interf    every rank computes its molecules against the next half of the others (each pair
//             once, the N^2/2 scheme), accumulating forces and potential energy privately, then
//             performs one update per molecule it touched;
//   correct   owners finish the velocities and compute the kinetic energy.
//   lock    the force updates go into coherent memory under locks: one mdsm::mutex per group of
//           k_molecules_per_lock consecutive molecules (~ a page of them), as SPLASH Water maps
//           molecules onto a fixed array of locks. Each rank walks the groups starting at its
//           own block, so two ranks rarely want the same lock at the same moment.
//   hybrid  the force updates for one owner's molecules go in one NONE message to that owner
//           (an array of (molecule, vector) entries), whose handler adds them into a PRIVATE
//           buffer (handlers run one at a time); the owner knows how many updates it will get,
//           waits for all of them, then writes the final forces of its molecules into coherent
//           memory itself and goes on to correct them without a barrier: the messages are the
//           synchronization of interf (two barriers per step instead of three).
// Why hybrid may skip the barrier after interf: correct reads and writes only the rank's own
// molecules, whose forces it wrote itself. The others read those molecules again only after the
// next predict's barrier, which this rank enters after correcting. Every rank copied the
// molecules for this step's interf before sending its updates, so before any owner, having
// received them all, corrects. The next step's updates are sent only after that barrier, so
// they cannot mix into this step's sums.
//
// (Until 2026-11-27 the lock version took one lock per molecule and every rank walked them from
// molecule 0, and the hybrid version sent one message per molecule. With every molecule updated
// by every rank in every step, that is a remote lock hand-off per molecule, rank and step: 110K
// per rank at the harness size, more than the whole computation costs; SPLASH's lock array and
// an MPI programmer's one message per destination are the usual forms. docs/APPS.md.)
// Verification (rank 0, after the measured section): a sequential run of the same model; the
// kinetic and potential energies of every step and the final positions must agree to a relative
// 1e-9 (the parallel runs sum forces in another order).
#include "../common/app.hpp"
#include "water_model.hpp"

#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace {

using namespace mdsm_apps::water;

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

constexpr int k_molecules_per_lock = 64;  // 5 KiB of molecules

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
  const int groups = (n + k_molecules_per_lock - 1) / k_molecules_per_lock;
  std::vector<std::unique_ptr<mdsm::mutex>> locks;
  if (!hybrid)
    for (int g = 0; g < groups; ++g) locks.push_back(std::make_unique<mdsm::mutex>());
  mdsm::barrier bar;

  // hybrid: the owner's private accumulation buffer, written by the handler only.
  std::vector<double> acc(3 * static_cast<std::size_t>(n), 0.0);
  std::atomic<long> received{0};
  std::atomic<bool> misrouted{false};  // an update for a molecule this rank does not own
  mdsm::handler_id h_force = 0;
  long expected = 0;
  if (hybrid) {
    h_force = mdsm::register_handler("water.force", [&](mdsm::message& m) {
      const auto bytes = m.payload();
      if (bytes.size() % sizeof(force_update) != 0) {
        misrouted.store(true);
        return;
      }
      const std::size_t count = bytes.size() / sizeof(force_update);
      for (std::size_t k = 0; k < count; ++k) {
        force_update u;
        std::memcpy(&u, bytes.data() + k * sizeof u, sizeof u);
        if (u.molecule < lo || u.molecule >= hi) misrouted.store(true);  // counted, fails verification
        else
          for (int d = 0; d < 3; ++d) acc[3 * static_cast<std::size_t>(u.molecule) + d] += u.f[d];
      }
      received.fetch_add(static_cast<long>(count), std::memory_order_release);
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
  std::vector<force_update> outgoing;
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
    const double pe = md.partial_forces(local.data(), lo, hi, f.data());
    if (!hybrid) {
      const int first_group = lo / k_molecules_per_lock;
      for (int k = 0; k < groups; ++k) {
        const int g = (first_group + k) % groups;
        const int begin = g * k_molecules_per_lock, end = std::min(n, begin + k_molecules_per_lock);
        bool any = false;
        for (int j = begin; j < end && !any; ++j) any = mine_touched[j] || (j >= lo && j < hi);
        if (!any) continue;
        std::lock_guard lk(*locks[static_cast<std::size_t>(g)]);
        for (int j = begin; j < end; ++j)
          if (mine_touched[j] || (j >= lo && j < hi))
            for (int d = 0; d < 3; ++d) mols[j].force[d] += f[3 * j + d];
      }
    } else {
      for (int r = 1; r < np; ++r) {  // one message per other rank, starting with the next one
        const int dest = (me + r) % np;
        outgoing.clear();
        for (int j = first_of(dest, n, np); j < first_of(dest + 1, n, np); ++j)
          if (mine_touched[j]) outgoing.push_back(force_update{j, 0, {f[3 * j], f[3 * j + 1], f[3 * j + 2]}});
        if (!outgoing.empty())
          mdsm::send(dest, h_force, std::as_bytes(std::span(outgoing)), mdsm::annotation::none);
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
    // lock: every rank's updates must be in before an owner corrects. hybrid: the owner wrote
    // its forces itself once every update had come, and correct touches only its molecules, so
    // no barrier is needed (the next one, after predict, orders everything the next step reads).
    if (!hybrid) bar.arrive_and_wait();

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
  if (me == 0) ok = verify(md, args.seed, steps, np, args.version, all_slots, final_state) && ok;
  const int rc = mdsm_apps::report("water", args.version, ok, m);
  mdsm::finalize();
  return rc;
}
