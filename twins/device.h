// Where and how a pair computes: device resolution, determinism, threads.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <string>

namespace twins {

// "cpu", "cuda" or "cuda:N". Throws a one-line message when CUDA is asked
// for and this LibTorch has no CUDA, or no such device is visible.
torch::Device resolve_device(const std::string& name);

// Deterministic algorithms on (errors, not warnings, for an op without a
// deterministic implementation); on CUDA also CUBLAS_WORKSPACE_CONFIG, which
// must be set before the first cuBLAS call. Idempotent.
void configure_determinism();

// Keeps freed memory in the process for reuse. A training step allocates
// and frees the same few megabytes of activations and gradients every time;
// glibc's defaults hand large blocks back to the kernel (munmap, heap trim)
// and every reuse then page-faults them in afresh, which was 15-20% of a
// mod47 step. Sets glibc's mmap threshold to its 32 MiB maximum and turns
// heap trimming off; no effect on results, and none on other C libraries.
// Returns whether the settings took. Idempotent.
bool keep_freed_memory();

// LibTorch intra-op threads and, when LibTorch runs on OpenBLAS, OpenBLAS's
// own pool (LibTorch does not size it). n <= 0 leaves both as they are.
void set_threads(int n);

// The one thread pool: work(item, worker) for every item in [0, items),
// each of `workers` threads (the caller's among them) taking the next item
// in turn. With more than one worker each runs on one LibTorch / OpenBLAS
// thread (set_threads(1)), so an item's reductions never depend on what runs
// beside it; with one (or one item) the caller's thread does every item at
// its own thread settings. After an item throws no new item starts; the
// running ones finish, then the first exception is rethrown.
void run_on_threads(size_t items, size_t workers,
                    const std::function<void(size_t item, size_t worker)>& work);

// The thread configuration in words, for records and benchmarks.
struct ThreadInfo {
  int torch_threads = 0;
  int openblas_threads = -1;  // -1: OpenBLAS not found
};
ThreadInfo thread_info();

}  // namespace twins
