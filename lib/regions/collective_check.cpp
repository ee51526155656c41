#include "regions/collective_check.hpp"

#include "common/check.hpp"
#include "common/wait_subject.hpp"

#include <string>

namespace mdsm::regions {

void check_same_everywhere(net::transport& t, net::progress& p, std::uint64_t value, const char* what) {
  std::uint64_t mine[2] = {value, ~value}, out[2];
  MPI_Request req;
  MPI_Iallreduce(mine, out, 2, MPI_UINT64_T, MPI_MAX, t.collective_comm(), &req);
  detail::wait_subject subject{.what = what, .object = nullptr, .id = 0, .peer = -1,
                               .peer_role = nullptr,
                               .detail = [](const void*) { return std::string("a collective call: every rank makes it"); }};
  detail::waiting_for waiting(subject);
  p.wait_until([&] {
    int done = 0;
    PMPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  if (out[0] != value || ~out[1] != value)
    detail::fail(MDSM_ERR_MISMATCH, what, ": ranks passed different values (", ~out[1], " .. ", out[0],
                 "); every rank must make the same collective call");
}

}  // namespace mdsm::regions
