#include "twins/device.h"

#include <dlfcn.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace twins {

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  TORCH_CHECK(name == "cuda" || name.rfind("cuda:", 0) == 0,
              "Unknown device: '", name, "' (known: cpu, cuda, cuda:N)");
  // The index before asking for CUDA: "cuda:abc" is a typo on any machine.
  const std::string index = name.size() > 5 ? name.substr(5) : "";
  TORCH_CHECK(name == "cuda" ||
                  (!index.empty() && index.size() <= 2 &&
                   index.find_first_not_of("0123456789") == std::string::npos),
              "--device '", name,
              "': malformed device index (expected cuda:N, N a whole number "
              "from 0 to 99)");
  TORCH_CHECK(torch::cuda::is_available(), "--device ", name,
              ": this build of LibTorch (", TORCH_VERSION,
              ") has no CUDA support or sees no GPU; rebuild against a CUDA "
              "LibTorch (scripts/build-cuda.sh) or use --device cpu");
  torch::Device device(name);  // throws on a malformed index
  TORCH_CHECK(!device.has_index() ||
                  device.index() < static_cast<int>(torch::cuda::device_count()),
              "--device ", name, ": only ", torch::cuda::device_count(),
              " CUDA device(s) visible");
  return device;
}

void configure_determinism() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Any cuBLAS call reads this when its handle is created; setting it
    // before the first CUDA op makes cuBLAS reductions deterministic.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  });
}

bool keep_freed_memory() {
#if defined(__GLIBC__)
  static const bool ok = [] {
    // Blocks below the threshold come from the heap (and the arenas of
    // other threads), which are no longer trimmed; larger ones are still
    // mapped and unmapped one by one.
    constexpr int kMmapThreshold = 32 << 20;  // glibc's largest allowed
    const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
    const bool trim_ok = mallopt(M_TRIM_THRESHOLD, -1) == 1;  // never trim
    return mmap_ok && trim_ok;
  }();
  return ok;
#else
  return false;
#endif
}

namespace {

using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

// OpenBLAS's entry points, looked up at run time so the build does not
// depend on which BLAS LibTorch was linked with.
template <class Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void set_threads(int n) {
  if (n <= 0) return;
  torch::set_num_threads(n);
  if (auto fn = openblas_symbol<SetThreadsFn>("openblas_set_num_threads")) {
    fn(n);
  }
}

void run_on_threads(size_t items, size_t workers,
                    const std::function<void(size_t, size_t)>& work) {
  workers = std::min(workers, items);
  if (workers <= 1) {
    for (size_t i = 0; i < items; ++i)
      work(i, 0);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::exception_ptr error;
  auto worker = [&](size_t w) {
    set_threads(1);
    for (size_t i; !failed && (i = next++) < items;) {
      try {
        work(i, w);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error)
          error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w)
    pool.emplace_back(worker, w);
  worker(0);
  for (auto& t : pool)
    t.join();
  if (error)
    std::rethrow_exception(error);
}

ThreadInfo thread_info() {
  ThreadInfo info;
  info.torch_threads = torch::get_num_threads();
  if (auto fn = openblas_symbol<GetThreadsFn>("openblas_get_num_threads")) {
    info.openblas_threads = fn();
  }
  return info;
}

}  // namespace twins
