#include "regions/collective_check.hpp"

#include "common/check.hpp"
#include "common/wait_subject.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace mdsm::regions {

namespace {

// MPI_MAX over the ranks of n words, waiting (delivering frames, named `what` for the failure
// detector) until every rank has contributed.
void max_everywhere(net::transport& t, net::progress& p, const std::uint64_t* in, std::uint64_t* out, int n,
                    const char* what) {
  MPI_Request req;
  MPI_Iallreduce(in, out, n, MPI_UINT64_T, MPI_MAX, t.collective_comm(), &req);
  detail::wait_subject subject{.what = what, .object = nullptr, .id = 0, .peer = -1,
                               .peer_role = nullptr,
                               .detail = [](const void*) { return std::string("a collective call: every rank makes it"); }};
  detail::waiting_for waiting(subject);
  p.wait_until([&] {
    int done = 0;
    PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

}  // namespace

void check_same_everywhere(net::transport& t, net::progress& p, std::uint64_t value, const char* what) {
  std::uint64_t mine[2] = {value, ~value}, out[2];
  max_everywhere(t, p, mine, out, 2, what);
  if (out[0] != value || ~out[1] != value)
    detail::fail(MDSM_ERR_MISMATCH, what, ": ranks passed different values (", ~out[1], " .. ", out[0],
                 "); every rank must make the same collective call");
}

void values_of_rank0(net::transport& t, net::progress& p, std::span<std::uint64_t> values, const char* what) {
  std::vector<std::uint64_t> mine(values.size(), 0);
  if (t.rank() == 0) std::copy(values.begin(), values.end(), mine.begin());
  max_everywhere(t, p, mine.data(), values.data(), static_cast<int>(values.size()), what);
}

}  // namespace mdsm::regions
