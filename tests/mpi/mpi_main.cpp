// doctest main of the sharded suites, run under mpirun: every rank runs every test case in the
// same order (their collective calls match), with the same seed (rank 0's, broadcast), and the
// job fails where any rank failed. A CUDA variant skips (exit 77 on every rank) without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/test_support.hpp"

int main(int argc, char** argv) {
  bool listing = false;  // ctest's discovery lists test cases (without mpirun)
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-ltc", 4) == 0;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#ifdef STREAMKNN_TEST_CUDA
  int usable = streamknn::cuda_available() ? 1 : 0, everywhere = 0;
  MPI_Allreduce(&usable, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!listing && !everywhere) {
    if (rank == 0) {
      std::printf("SKIPPED: no usable CUDA device on some rank (or this build has no CUDA backend); the sharded "
                  "CUDA suites run on a GPU machine (docs/distributed.md)\n");
    }
    MPI_Finalize();
    return 77;
  }
#endif
  unsigned long long seed = 0;
  if (rank == 0 && !listing) seed = test::seed();
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank != 0 && !listing) {
    setenv("STREAMKNN_SEED", std::to_string(seed).c_str(), 1);
    (void)test::seed();
  }
  doctest::Context context(argc, argv);
  const int mine = context.run();
  int worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
