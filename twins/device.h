// Where and how a pair computes: device resolution, determinism, threads.
#pragma once

#include <torch/torch.h>

#include <string>

namespace twins {

// "cpu", "cuda" or "cuda:N". Throws a one-line message when CUDA is asked
// for and this LibTorch has no CUDA, or no such device is visible.
torch::Device resolve_device(const std::string& name);

// Deterministic algorithms on (errors, not warnings, for an op without a
// deterministic implementation); on CUDA also CUBLAS_WORKSPACE_CONFIG, which
// must be set before the first cuBLAS call. Idempotent.
void configure_determinism();

// LibTorch intra-op threads and, when LibTorch runs on OpenBLAS, OpenBLAS's
// own pool (LibTorch does not size it). n <= 0 leaves both as they are.
void set_threads(int n);

// The thread configuration in words, for records and benchmarks.
struct ThreadInfo {
  int torch_threads = 0;
  int openblas_threads = -1;  // -1: OpenBLAS not found
};
ThreadInfo thread_info();

}  // namespace twins
