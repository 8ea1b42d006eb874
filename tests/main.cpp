// The test executables' main: GoogleTest's, after what twin-run's main does
// before anything computes where OpenBLAS does not know the CPU
// (twins::enter_known_blas_core), so that what a test computes in its own
// process runs the kernels twin-run's records name.
#include <gtest/gtest.h>

#include "twins/environment.h"

int main(int argc, char** argv) {
  twins::enter_known_blas_core(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
