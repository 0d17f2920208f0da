// The MPI pieces of the sharded store: a duplicate communicator (RAII), byte collectives with
// 64-bit sizes checked against MPI's int counts, and agree(), which turns one rank's failure into
// the same exception on every rank (so no rank waits in a collective another has left).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "core/store_vector.hpp"

namespace streamknn::detail::mpi {

/// MPI_Comm_dup of the caller's communicator, freed on destruction (unless MPI was finalised).
class Comm {
 public:
  explicit Comm(MPI_Comm parent);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  MPI_Comm get() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

/// The rank's index among the ranks of its host (MPI_COMM_TYPE_SHARED).
int local_rank(MPI_Comm comm);

/// Throws Error naming the call when an MPI call returned an error (with MPI_ERRORS_RETURN).
void check_mpi(int rc, const char* call);

/// Every rank's copy of a trivially copyable value, in rank order.
template <class T>
std::vector<T> allgather(MPI_Comm comm, const T& mine) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<T> all(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&mine, sizeof(T), MPI_BYTE, all.data(), sizeof(T), MPI_BYTE, comm), "MPI_Allgather");
  return all;
}

/// Every rank's bytes, concatenated in rank order; offsets (size + 1 entries) delimit them.
std::vector<std::byte> allgatherv(MPI_Comm comm, std::span<const std::byte> mine, std::vector<std::size_t>& offsets,
                                  const char* what);

/// Bytes whose growth is not zero-filled (core/store_vector.hpp's allocator): a query batch's
/// chunks reach megabytes, kept between batches, and zeroing them would cost as much as the
/// copies into them.
using Bytes = std::vector<std::byte, detail::StoreAllocator<std::byte>>;

/// Rank r's chunk, send[send_offsets[r], send_offsets[r + 1]), goes to rank r; what each rank
/// sent here lands in `received`, in rank order, delimited by offsets (size + 1 entries).
void alltoallv_into(MPI_Comm comm, std::span<const std::byte> send, std::span<const std::size_t> send_offsets,
                    Bytes& received, std::vector<std::size_t>& offsets, const char* what);

/// send[r] goes to rank r; returns what each rank sent here, concatenated in rank order, with
/// offsets (size + 1 entries) delimiting them.
std::vector<std::byte> alltoallv(MPI_Comm comm, const std::vector<std::vector<std::byte>>& send,
                                 std::vector<std::size_t>& offsets, const char* what);

/// The library error kinds, carried between ranks.
enum class ErrorKind : std::int32_t {
  None = 0, Error, InvalidArgument, OutOfMemory, BackendUnavailable, CudaError, CheckpointError
};

struct Failure {
  ErrorKind kind = ErrorKind::None;
  std::string message;
  bool failed() const noexcept { return kind != ErrorKind::None; }
};

/// The failure an exception stands for (call inside a catch block, or with an exception_ptr).
Failure failure_of(std::exception_ptr error);

/// Throws the library exception of that kind with that message.
[[noreturn]] void throw_failure(ErrorKind kind, const std::string& message);

/// Collective: when some rank failed, every rank throws the first failing rank's kind, with
/// "<what>: rank r: <message>" for every failing rank; otherwise returns.
void agree(MPI_Comm comm, const Failure& mine, const std::string& what);

/// "rank 3" or "ranks 0, 2, 5".
std::string rank_list(const std::vector<std::size_t>& ranks);

}  // namespace streamknn::detail::mpi
