// doctest main shared by every suite: prints the seed before any test runs, and lets a GPU
// suite skip (exit code 77, which ctest reports as "Skipped") where no CUDA device exists.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "support/test_support.hpp"

int main(int argc, char** argv) {
  bool listing = false;  // ctest's test discovery lists test cases: print nothing else then
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-ltc", 4) == 0;
#ifdef STREAMKNN_TEST_CUDA
  if (!listing && !streamknn::cuda_available()) {
    std::printf("SKIPPED: no usable CUDA device (or this build has no CUDA backend); "
                "the CUDA suites run on a GPU machine, see docs/cuda.md (Checking it on a GPU)\n");
    return 77;
  }
#endif
  if (!listing) (void)test::seed();
  doctest::Context context(argc, argv);
  return context.run();
}
