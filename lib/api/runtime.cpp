#include "api/runtime.hpp"

#include "common/check.hpp"
#include "common/deferred.hpp"
#include "common/env.hpp"
#include "common/wait_subject.hpp"
#include "messages/current.hpp"
#include "stats/report.hpp"

#include <mdsm/mdsm.hpp>

#include <algorithm>

namespace mdsm {

namespace detail {

std::unique_ptr<runtime> g_runtime;

namespace {

// Frames up to this size travel in the preposted receive ring; larger ones are announced.
std::size_t inline_frame_max(std::size_t unit) { return std::max<std::size_t>(16 * 1024, unit + 1024); }

// Waits for a collective of every rank; `what` names it for the failure detector's report.
void wait_request(net::progress& p, MPI_Request& req, const char* what) {
  detail::wait_subject subject{.what = what};
  detail::waiting_for waiting(subject);
  p.wait_until([&] {
    int done = 0;
    PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}
}  // namespace

void runtime::update_gc_threshold() {
  std::uint64_t t = gc_threshold.load(std::memory_order_relaxed);
  // A program whose writes between two barriers cover its shared data holds a twin per written
  // unit, i.e. metadata of about the data's size, and a collection at 64 MiB would then diff every
  // unit it wrote at every barrier (matmul at 2048: 0.06-0.14 s of a 1.6 s run, for nothing any
  // rank was short of). The default lets metadata grow to the collectively allocated size.
  if (!gc_threshold_set.load(std::memory_order_relaxed) && allocator) t = std::max(t, allocator->collective_bytes());
  gc_threshold_effective.store(t, std::memory_order_relaxed);
  engine->set_gc_threshold(t);
}

runtime::~runtime() {
  sync::set_current(nullptr);
  sync.reset();
  messages::set_current(nullptr);
  if (progress) progress->stop_thread();
  allocator.reset();
  one_sided.reset();
  noncoherent.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (mpi_ext_comm != MPI_COMM_NULL && !finalized) PMPI_Comm_free(&mpi_ext_comm);
  endpoint.reset();
  engine.reset();
  progress.reset();
  transport.reset();
}

runtime& rt() {
  if (!g_runtime) fail(MDSM_ERR_NOT_INITIALIZED, "mdsm is not initialized: call mdsm::init (mdsm_init) first");
  rethrow_deferred();
  return *g_runtime;
}

runtime& rt_blocking(const char* what) {
  runtime& r = rt();
  if (const char* h = net::current_handler())
    fail(MDSM_ERR_HANDLER_CONTEXT, what, " waits for other ranks and cannot be called from message handler '", h, "'");
  return r;
}

}  // namespace detail

bool initialized() noexcept { return detail::g_runtime != nullptr; }

std::size_t detail::array_bytes(std::size_t n, std::size_t size, const char* what) {
  if (size != 0 && n > SIZE_MAX / size)
    fail(MDSM_ERR_OUT_OF_MEMORY, what, "(", n, "): ", n, " elements of ", size, " bytes do not fit in size_t");
  return n * size;
}

void init(MPI_Comm comm, const options& opts) {
  if (detail::g_runtime) detail::fail(MDSM_ERR_ALREADY_INITIALIZED, "init: mdsm is already initialized");
  int mpi_up = 0, mpi_down = 0;
  MPI_Initialized(&mpi_up);
  MPI_Finalized(&mpi_down);
  if (mpi_down)
    detail::fail(MDSM_ERR_NOT_INITIALIZED, "init: MPI has been finalized (by MPI_Finalize, or by mdsm::finalize "
                                           "when mdsm::init(&argc, &argv) started MPI) and cannot be used again; "
                                           "mdsm can be initialized again only while MPI is up");
  if (!mpi_up)
    detail::fail(MDSM_ERR_NOT_INITIALIZED, "init: MPI is not initialized; call MPI_Init_thread with "
                                           "MPI_THREAD_MULTIPLE first, or mdsm::init(&argc, &argv)");
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE)
    detail::fail(MDSM_ERR_THREAD_LEVEL, "init: MPI was initialized with thread level ", provided,
                 "; mdsm needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                 "): initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  detail::clear_deferred();
  stats::reset();  // statistics describe one init..finalize session

  auto r = std::make_unique<detail::runtime>();
  r->stats_spec = detail::env_string("MDSM_STATS").value_or("");
  r->gc_threshold_set = detail::env_string("MDSM_GC_THRESHOLD").has_value();
  r->gc_threshold = detail::env_size("MDSM_GC_THRESHOLD", detail::k_default_gc_threshold);
  stats::check_spec(r->stats_spec);
  // The clocks behind handler_ns and wait_ns run when a report was asked for, or on request.
  const bool report = !r->stats_spec.empty() && r->stats_spec != "0";
  stats::g_timing.store(detail::env_uint("MDSM_STATS_TIMING", report ? 1 : 0) != 0, std::memory_order_relaxed);

  coherence::region_config region;
  if (opts.coherent_size != 0) region.size = opts.coherent_size;
  if (opts.unit_pages != 0) region.unit_pages = opts.unit_pages;
  region.address = opts.coherent_address;
  region.strict_address = opts.strict_address;
  region = coherence::region_config::from_env(region);

  net::progress_config pc;
  pc.thread = opts.progress_thread;
  if (opts.wait_deadline_s < 0) pc.wait_deadline_ns = 0;
  else if (opts.wait_deadline_s > 1e9)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "options::wait_deadline_s = ", opts.wait_deadline_s, " is out of range");
  else if (opts.wait_deadline_s > 0) pc.wait_deadline_ns = static_cast<std::uint64_t>(opts.wait_deadline_s * 1e9);
  pc = net::progress_config::from_env(pc);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &pc.local_rank);
  MPI_Comm_size(node, &pc.local_size);
  MPI_Comm_free(&node);

  const std::size_t unit = region.unit_pages * os::page_size();
  // Credits per sender -> receiver pair, in 4 KiB units (net/flow.hpp); agreed by all ranks.
  const std::uint64_t window = detail::env_uint("MDSM_FLOW_WINDOW", net::flow_control::k_default_window);
  if (window < net::flow_control::k_min_window || window > net::flow_control::k_max_window)
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "MDSM_FLOW_WINDOW=", window, ": the credit window must be between ",
                 net::flow_control::k_min_window, " and ", net::flow_control::k_max_window, " (units of 4 KiB)");
  r->transport = std::make_unique<net::transport>(comm, detail::inline_frame_max(unit), static_cast<std::uint32_t>(window));
  // On one host every request rings this rank's doorbell, so the progress thread may nap longer
  // between timed wake-ups (each one takes a computing application's core: water hybrid at 2744
  // molecules, 2 ranks, 2.21 -> 1.90 s with 2 ms instead of 200 us).
  if (r->transport->bells().cover_every_rank()) pc = pc.with_bells();
  r->progress = std::make_unique<net::progress>(*r->transport, pc);
  r->engine = std::make_unique<coherence::engine>(*r->transport, *r->progress, region);
  r->update_gc_threshold();  // no allocations yet
  r->endpoint = std::make_unique<messages::endpoint>(*r->transport, *r->progress, *r->engine);
  messages::set_current(r->endpoint.get());
  r->allocator = std::make_unique<regions::coherent_allocator>(*r->engine, *r->endpoint);
  // The non-coherent region goes right next to the coherent one where every rank has room there.
  regions::noncoherent_config nc;
  if (opts.noncoherent_size != 0) nc.size = opts.noncoherent_size;
  nc = regions::noncoherent_config::from_env(nc);
  const coherence::region_map& coherent = r->engine->region();
  r->noncoherent = std::make_unique<regions::noncoherent_region>(
      r->transport->collective_comm(), nc, reinterpret_cast<std::uintptr_t>(coherent.app_base()),
      reinterpret_cast<std::uintptr_t>(coherent.app_base()) + coherent.size());
  r->one_sided = std::make_unique<regions::one_sided>(*r->transport, *r->progress, *r->noncoherent, coherent);
  PMPI_Comm_dup(comm, &r->mpi_ext_comm);
  MPI_Comm_set_errhandler(r->mpi_ext_comm, MPI_ERRORS_RETURN);
  r->user_comm = comm;
  static std::atomic<std::uint64_t> sessions{0};
  r->session = sessions.fetch_add(1, std::memory_order_relaxed) + 1;
  r->progress->start_thread();
  detail::g_runtime = std::move(r);
  // lib/sync registers its handlers through the public API, so it comes up last.
  try {
    detail::g_runtime->sync = std::make_unique<sync::services>(comm);
  } catch (...) {
    detail::g_runtime.reset();
    throw;
  }
  sync::set_current(detail::g_runtime->sync.get());
}

void init(int* argc, char*** argv, const options& opts) {
  if (detail::g_runtime) detail::fail(MDSM_ERR_ALREADY_INITIALIZED, "init: mdsm is already initialized");
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  bool owns = false;
  if (!mpi_up) {
    int provided = 0;
    if (PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      detail::fail(MDSM_ERR_MPI, "init: MPI_Init_thread failed");
    owns = true;
  }
  init(MPI_COMM_WORLD, opts);
  detail::g_runtime->owns_mpi = owns;
}

void finalize() {
  detail::runtime& r = detail::rt_blocking("finalize");
  // Termination detection: all ranks are here (no application sends any more), but handlers may
  // still be sending. Done when the global counts of frames sent and received agree and did not
  // change between two rounds.
  r.engine->wait_all_acquires();
  std::uint64_t previous[2] = {~0ull, ~0ull};
  for (;;) {
    std::uint64_t local[2] = {r.transport->frames_sent(), r.transport->frames_received()}, global[2];
    MPI_Request req;
    MPI_Iallreduce(local, global, 2, MPI_UINT64_T, MPI_SUM, r.transport->collective_comm(), &req);
    detail::wait_request(*r.progress, req, "finalize (collective: every rank calls it)");
    if (global[0] == global[1] && global[0] == previous[0] && global[1] == previous[1]) break;
    previous[0] = global[0];
    previous[1] = global[1];
  }
  for (auto& f : r.at_finalize) f();
  r.progress->stop_thread();
  try {
    stats::report(r.transport->collective_comm(), r.stats_spec);
  } catch (const error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
  const bool owns = r.owns_mpi;
  detail::g_runtime.reset();
  detail::clear_deferred();
  if (owns) PMPI_Finalize();
}

int rank() { return detail::rt().transport->rank(); }
int size() { return detail::rt().transport->size(); }

handler_id register_handler(std::string_view name, handler_fn fn) {
  return detail::rt_blocking("register_handler").endpoint->register_handler(name, std::move(fn));
}

void send(int dest, handler_id h, std::span<const std::byte> payload, annotation a) {
  if (payload.data() == nullptr && !payload.empty())
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, "send: the payload is a null pointer with a nonzero length (",
                 payload.size(), " bytes)");
  detail::rt().endpoint->send(dest, h, payload, a);
}

bool in_handler() noexcept { return net::current_handler() != nullptr; }

unthrottled_sends::unthrottled_sends() noexcept { ++net::t_unthrottled; }
unthrottled_sends::~unthrottled_sends() { --net::t_unthrottled; }

void poll() {
  detail::runtime& r = detail::rt_blocking("poll");
  r.progress->poll_once();
  r.engine->wait_all_acquires();
}

namespace {
void set_progress_paused(bool paused, const char* what) {
  detail::runtime& r = detail::rt();
  if (const char* h = net::current_handler())
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, what, " is for application threads and was called from message handler '",
                 h, "'");
  r.progress->set_paused(paused);
}
}  // namespace

void pause_progress_thread() { set_progress_paused(true, "pause_progress_thread"); }
void resume_progress_thread() { set_progress_paused(false, "resume_progress_thread"); }

void wait_until(const std::function<bool()>& done) {
  if (!done) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "wait_until: empty predicate");
  detail::wait_until_ref([](void* ctx) { return (*static_cast<const std::function<bool()>*>(ctx))(); },
                         const_cast<std::function<bool()>*>(&done));
}

void detail::wait_until_ref(bool (*done)(void*), void* ctx) {
  if (done == nullptr) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "wait_until: empty predicate");
  detail::runtime& r = detail::rt_blocking("wait_until");
  r.progress->wait_until([&] { return done(ctx) || detail::deferred_pending_here(); });
  if (!r.engine->all_acquires_done()) r.engine->wait_all_acquires();
  detail::rethrow_deferred();
}

void* detail::current_user_thread() noexcept {
  return g_runtime ? g_runtime->progress->current_user_thread() : nullptr;
}

void detail::set_upcalls_from(const char* api, net::upcalls u) {
  detail::runtime& r = detail::rt();
  if (const char* h = net::current_handler())
    detail::fail(MDSM_ERR_HANDLER_CONTEXT, api, " was called from message handler '", h, "'");
  const bool any = u.current != nullptr || u.block != nullptr || u.wake != nullptr;
  if (any && (u.current == nullptr || u.block == nullptr || u.wake == nullptr))
    detail::fail(MDSM_ERR_INVALID_ARGUMENT, api, ": current, block and wake must all be set (or all null)");
  r.progress->set_upcalls(u);
}

void set_upcalls(const upcalls& u) {
  // The public token is the internal one under another name (it is opaque to the scheduler).
  detail::set_upcalls_from("set_upcalls", detail::upcall_trampolines<&upcalls::ctx>(u));
}

void* alloc(std::size_t bytes) { return detail::rt().allocator->alloc(bytes); }
void* alloc_collective(std::size_t bytes) {
  detail::runtime& r = detail::rt_blocking("alloc_collective");
  void* p = r.allocator->alloc_collective(bytes);
  r.update_gc_threshold();
  return p;
}
void free(void* p) { detail::rt_blocking("free").allocator->free(p); }
void free_collective(void* p) {
  detail::runtime& r = detail::rt_blocking("free_collective");
  r.allocator->free_collective(p);
  r.update_gc_threshold();
}

void make_coherent(void* addr, std::size_t bytes) {
  detail::runtime& r = detail::rt_blocking("make_coherent");
  // The non-coherent region lies at one address on every rank, so every rank decides alike.
  if (r.noncoherent && bytes != 0) {
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    const auto b = reinterpret_cast<std::uintptr_t>(r.noncoherent->base());
    if (a < b + r.noncoherent->size() && b < a + bytes)
      detail::fail(MDSM_ERR_INVALID_ARGUMENT, "make_coherent: the range [", addr, ", +", bytes,
                   " bytes) overlaps the non-coherent region");
  }
  r.allocator->make_coherent(addr, bytes);
}

bool is_coherent(const void* p) noexcept {
  return detail::g_runtime && detail::g_runtime->engine->region().contains(p);
}

bool is_noncoherent(const void* p) noexcept {
  return detail::g_runtime && detail::g_runtime->noncoherent && detail::g_runtime->noncoherent->contains(p);
}

void gc() { detail::rt_blocking("gc").engine->gc(); }

std::uint64_t gc_threshold() { return detail::rt().gc_threshold_effective.load(std::memory_order_relaxed); }
void set_gc_threshold(std::uint64_t bytes) {
  detail::runtime& r = detail::rt();
  r.gc_threshold.store(bytes, std::memory_order_relaxed);
  r.gc_threshold_set.store(true, std::memory_order_relaxed);
  r.update_gc_threshold();
}

std::map<std::string, std::uint64_t> statistics() {
  detail::rt();
  std::map<std::string, std::uint64_t> out;
  for (unsigned i = 0; i < stats::k_counters; ++i)
    out.emplace(std::string(stats::name(static_cast<stats::counter>(i))), stats::get(static_cast<stats::counter>(i)));
  return out;
}

std::uint64_t statistic(std::string_view name) {
  detail::rt();
  const auto c = stats::find(name);
  if (!c) detail::fail(MDSM_ERR_INVALID_ARGUMENT, "statistic: there is no counter named '", name, "'");
  return stats::get(*c);
}

std::map<std::string, std::uint64_t> statistics_total() {
  detail::runtime& r = detail::rt_blocking("statistics_total");
  std::vector<std::uint64_t> mine(stats::k_counters), sum(stats::k_counters);
  for (unsigned i = 0; i < stats::k_counters; ++i) mine[i] = stats::get(static_cast<stats::counter>(i));
  MPI_Request req;
  MPI_Iallreduce(mine.data(), sum.data(), static_cast<int>(stats::k_counters), MPI_UINT64_T, MPI_SUM,
                 r.transport->collective_comm(), &req);
  detail::wait_request(*r.progress, req, "statistics_total (collective: every rank calls it)");
  std::map<std::string, std::uint64_t> out;
  for (unsigned i = 0; i < stats::k_counters; ++i) out.emplace(std::string(stats::name(static_cast<stats::counter>(i))), sum[i]);
  return out;
}

void statistics_reset() {
  detail::rt();
  stats::reset();
}

void set_statistics_timing(bool on) {
  detail::rt();
  stats::g_timing.store(on, std::memory_order_relaxed);
}

}  // namespace mdsm
