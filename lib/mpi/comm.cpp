#include "mpi/comm.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "core/check.hpp"
#include "streamknn/checkpoint.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail::mpi {

namespace {

/// Byte counts as MPI's int counts and displacements; throws on every rank when one is too large
/// (each rank checks what it sees, then they agree).
std::vector<int> int_counts(MPI_Comm comm, std::span<const std::uint64_t> counts, const char* what) {
  std::uint64_t total = 0;
  for (const std::uint64_t c : counts) total += c;
  const std::uint64_t mine = total, limit = INT_MAX;
  std::uint64_t largest = 0;
  check_mpi(MPI_Allreduce(&mine, &largest, 1, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  if (largest > limit) {
    throw OutOfMemory(concat("DistributedReferenceSet: ", what, " moves ", largest,
                             " bytes through one rank, beyond MPI's int counts (2^31 - 1): publish more often or "
                             "search in smaller batches"));
  }
  return {counts.begin(), counts.end()};
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

Comm::Comm(MPI_Comm parent) {
  check_mpi(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Comm::~Comm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int local_rank(MPI_Comm comm) {
  MPI_Comm local = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int local_index = 0;
  MPI_Comm_rank(local, &local_index);
  MPI_Comm_free(&local);
  return local_index;
}

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(concat("DistributedReferenceSet: ", call, " failed: ", std::string(text, std::size_t(length))));
}

std::vector<std::byte> allgatherv(MPI_Comm comm, std::span<const std::byte> mine, std::vector<std::size_t>& offsets,
                                  const char* what) {
  const std::vector<std::uint64_t> sizes = allgather<std::uint64_t>(comm, mine.size());
  const std::vector<int> counts = int_counts(comm, sizes, what);
  const std::vector<int> displs = displacements(counts);
  offsets.assign(sizes.size() + 1, 0);
  for (std::size_t r = 0; r < sizes.size(); ++r) offsets[r + 1] = offsets[r] + sizes[r];
  std::vector<std::byte> all(offsets.back());
  check_mpi(MPI_Allgatherv(mine.data(), int(mine.size()), MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                           comm),
            "MPI_Allgatherv");
  return all;
}

namespace {

/// The all-to-all of one call: int counts and displacements both ways, offsets of what arrives.
struct Exchange {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};
Exchange exchange_sizes(MPI_Comm comm, const std::vector<std::uint64_t>& send_sizes, std::vector<std::size_t>& offsets,
                        const char* what) {
  const std::size_t n = send_sizes.size();
  std::vector<std::uint64_t> recv_sizes(n);
  check_mpi(MPI_Alltoall(send_sizes.data(), 1, MPI_UINT64_T, recv_sizes.data(), 1, MPI_UINT64_T, comm),
            "MPI_Alltoall");
  std::vector<std::uint64_t> both(send_sizes);
  both.insert(both.end(), recv_sizes.begin(), recv_sizes.end());
  (void)int_counts(comm, both, what);  // the total in either direction fits an int
  Exchange x;
  x.send_counts.assign(send_sizes.begin(), send_sizes.end());
  x.recv_counts.assign(recv_sizes.begin(), recv_sizes.end());
  x.send_displs = displacements(x.send_counts);
  x.recv_displs = displacements(x.recv_counts);
  offsets.assign(n + 1, 0);
  for (std::size_t r = 0; r < n; ++r) offsets[r + 1] = offsets[r] + recv_sizes[r];
  return x;
}

}  // namespace

void alltoallv_into(MPI_Comm comm, std::span<const std::byte> send, std::span<const std::size_t> send_offsets,
                    Bytes& received, std::vector<std::size_t>& offsets, const char* what) {
  std::vector<std::uint64_t> send_sizes(send_offsets.size() - 1);
  for (std::size_t r = 0; r < send_sizes.size(); ++r) send_sizes[r] = send_offsets[r + 1] - send_offsets[r];
  const Exchange x = exchange_sizes(comm, send_sizes, offsets, what);
  received.resize(offsets.back());
  check_mpi(MPI_Alltoallv(send.data(), x.send_counts.data(), x.send_displs.data(), MPI_BYTE, received.data(),
                          x.recv_counts.data(), x.recv_displs.data(), MPI_BYTE, comm),
            "MPI_Alltoallv");
}

std::vector<std::byte> alltoallv(MPI_Comm comm, const std::vector<std::vector<std::byte>>& send,
                                 std::vector<std::size_t>& offsets, const char* what) {
  std::vector<std::uint64_t> send_sizes(send.size());
  for (std::size_t r = 0; r < send.size(); ++r) send_sizes[r] = send[r].size();
  const Exchange x = exchange_sizes(comm, send_sizes, offsets, what);
  std::vector<std::byte> flat_send;
  flat_send.reserve(std::size_t(x.send_displs.back()) + send_sizes.back());
  for (const auto& part : send) flat_send.insert(flat_send.end(), part.begin(), part.end());
  std::vector<std::byte> received(offsets.back());
  check_mpi(MPI_Alltoallv(flat_send.data(), x.send_counts.data(), x.send_displs.data(), MPI_BYTE, received.data(),
                          x.recv_counts.data(), x.recv_displs.data(), MPI_BYTE, comm),
            "MPI_Alltoallv");
  return received;
}

Failure failure_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    return {ErrorKind::InvalidArgument, e.what()};
  } catch (const OutOfMemory& e) {
    return {ErrorKind::OutOfMemory, e.what()};
  } catch (const BackendUnavailable& e) {
    return {ErrorKind::BackendUnavailable, e.what()};
  } catch (const CudaError& e) {
    return {ErrorKind::CudaError, e.what()};
  } catch (const CheckpointError& e) {
    return {ErrorKind::CheckpointError, e.what()};
  } catch (const std::bad_alloc&) {
    return {ErrorKind::OutOfMemory, "host memory exhausted"};
  } catch (const std::exception& e) {
    return {ErrorKind::Error, e.what()};
  } catch (...) {
    return {ErrorKind::Error, "unknown exception"};
  }
}

void throw_failure(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::InvalidArgument: throw InvalidArgument(message);
    case ErrorKind::OutOfMemory: throw OutOfMemory(message);
    case ErrorKind::BackendUnavailable: throw BackendUnavailable(message);
    case ErrorKind::CudaError: throw CudaError(message);
    case ErrorKind::CheckpointError: throw CheckpointError(message, "", "", 0);
    case ErrorKind::None:
    case ErrorKind::Error: break;
  }
  throw Error(message);
}

void agree(MPI_Comm comm, const Failure& mine, const std::string& what) {
  const std::vector<std::int32_t> kinds = allgather<std::int32_t>(comm, static_cast<std::int32_t>(mine.kind));
  bool any = false;
  for (const std::int32_t k : kinds) any |= k != 0;
  if (!any) return;
  const std::string text = mine.failed() ? mine.message : std::string();
  std::vector<std::size_t> offsets;
  const std::vector<std::byte> all =
      allgatherv(comm, std::as_bytes(std::span<const char>(text.data(), text.size())), offsets, "an error message");
  // One entry per distinct message, with the ranks that gave it (a configuration error is the
  // same on every rank: named once).
  std::vector<std::pair<std::string, std::vector<std::size_t>>> groups;
  ErrorKind first = ErrorKind::None;
  for (std::size_t r = 0; r < kinds.size(); ++r) {
    if (kinds[r] == 0) continue;
    if (first == ErrorKind::None) first = static_cast<ErrorKind>(kinds[r]);
    std::string message(reinterpret_cast<const char*>(all.data()) + offsets[r], offsets[r + 1] - offsets[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == message; });
    if (it == groups.end()) {
      groups.push_back({std::move(message), {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string message = what;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    message += g == 0 ? ": " : "; ";
    message += rank_list(groups[g].second) + ": " + groups[g].first;
  }
  throw_failure(first, message);
}

std::string rank_list(const std::vector<std::size_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace streamknn::detail::mpi
