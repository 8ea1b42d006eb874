#include "model/gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "model/gemm_kernels.h"

namespace model {

namespace {

std::atomic<Matmul> g_matmul{Matmul::kBlas};
std::atomic<int64_t> g_chain_products{0};

Isa detect_isa() {
#if !defined(__x86_64__)
  return Isa::kNone;  // not an x86-64 build: no kernels were compiled
#else
  // libgcc's test includes the operating system's support (XCR0).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return Isa::kAvx2;
  return Isa::kNone;
#endif
}

template <typename T>
void run_kernel(Isa isa, const gemm::Operands<T>& g) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512)
    gemm::gemm_avx512(g);
  else
    gemm::gemm_avx2(g);
#else
  (void)isa, (void)g;  // best_isa() is kNone: never called
#endif
}

// The rows of C are shared among the intra-op threads in blocks of whole
// kernel tiles, each big enough to be worth a thread.
template <typename T>
void multiply(Isa isa, const torch::Tensor& a, const torch::Tensor& b,
              torch::Tensor& c) {
  gemm::Operands<T> g;
  g.a = a.data_ptr<T>();
  g.a_row = a.stride(0);
  g.a_col = a.stride(1);
  g.b = b.data_ptr<T>();
  g.ldb = b.stride(0);
  g.c = c.data_ptr<T>();
  g.ldc = c.stride(0);
  g.m = a.size(0);
  g.k = a.size(1);
  g.n = b.size(1);
  constexpr int64_t kTileRows = 6, kMinWork = 1 << 18;  // multiply-adds
  const int64_t per_row = std::max<int64_t>(1, g.n * g.k);
  const int64_t grain =
      std::max<int64_t>(1, kMinWork / per_row / kTileRows) * kTileRows;
  at::parallel_for(0, g.m, grain, [&](int64_t begin, int64_t end) {
    // Each thread's room for a packed panel of B, kept between calls.
    thread_local std::vector<T> pack;
    if (pack.size() < size_t(g.k * gemm::kPackWidth))
      pack.resize(g.k * gemm::kPackWidth);
    gemm::Operands<T> part = g;
    part.a = g.a + begin * g.a_row;
    part.c = g.c + begin * g.ldc;
    part.m = end - begin;
    part.pack = pack.data();
    run_kernel(isa, part);
  });
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ChainLinear : public torch::autograd::Function<ChainLinear> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    const torch::Tensor rows = x.reshape({-1, x.size(-1)});  // (N, in)
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return chain_mm(rows, w.t().contiguous()).view(shape);  // (..., out)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor gy = grads[0].reshape({-1, w.size(0)});  // (N, out)
    torch::Tensor gx, gw;
    if (ctx->needs_input_grad(0))
      gx = chain_mm(gy, w).view(x.sizes());  // dY W
    if (ctx->needs_input_grad(1))
      gw = chain_mm(gy.t(), x.reshape({-1, x.size(-1)}));  // dY^T X
    return {gx, gw};
  }
};

}  // namespace

Matmul parse_matmul(const std::string& name) {
  if (name == "blas")
    return Matmul::kBlas;
  if (name == "auto")
    return best_isa() == Isa::kNone ? Matmul::kBlas : Matmul::kFmaChain;
  TORCH_CHECK(name == "fma-chain", "Unknown --matmul '", name,
              "' (blas, fma-chain or auto)");
  TORCH_CHECK(best_isa() != Isa::kNone,
              "--matmul fma-chain needs a CPU with AVX2 and FMA, and this "
              "one has neither; use --matmul blas (or auto)");
  return Matmul::kFmaChain;
}

std::string matmul_name(Matmul matmul) {
  return matmul == Matmul::kFmaChain ? "fma-chain" : "blas";
}

void set_matmul(Matmul matmul) {
  TORCH_CHECK(matmul == Matmul::kBlas || best_isa() != Isa::kNone,
              "the fma-chain kernels need a CPU with AVX2 and FMA");
  g_matmul = matmul;
}

Matmul matmul() {
  return g_matmul;
}

int64_t chain_products() { return g_chain_products; }

Isa best_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "none";
  }
}

torch::Tensor chain_mm(const torch::Tensor& a, const torch::Tensor& b,
                       Isa isa) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "chain_mm: cannot multiply ", a.sizes(), " by ", b.sizes());
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(),
              "chain_mm: CPU tensors only");
  TORCH_CHECK(
      a.scalar_type() == b.scalar_type() && (a.scalar_type() == torch::kFloat ||
                                             a.scalar_type() == torch::kDouble),
      "chain_mm: float32 or float64 of one dtype, got ", a.scalar_type(),
      " and ", b.scalar_type());
  TORCH_CHECK(isa != Isa::kNone && isa <= best_isa(), "chain_mm: this CPU ",
              "cannot run the ", isa_name(isa), " kernels");
  const torch::Tensor rows =
      b.stride(1) == 1 && b.stride(0) >= b.size(1) ? b : b.contiguous();
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  ++g_chain_products;
  if (a.scalar_type() == torch::kFloat)
    multiply<float>(isa, a, rows, c);
  else
    multiply<double>(isa, a, rows, c);
  return c;
}

double fma_peak_gflops(torch::Dtype dtype, Isa isa) {
  TORCH_CHECK(isa != Isa::kNone && isa <= best_isa(),
              "fma_peak_gflops: ", "this CPU cannot run the ", isa_name(isa),
              " kernels");
  const bool float64 = dtype == torch::kDouble;
  constexpr int64_t kRounds = 2'000'000;
  std::vector<double> rates;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t flops = 0;
#if defined(__x86_64__)
    flops = isa == Isa::kAvx512 ? gemm::fma_loop_avx512(float64, kRounds)
                                : gemm::fma_loop_avx2(float64, kRounds);
#endif
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    rates.push_back(double(flops) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

torch::Tensor chain_linear(const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
              "chain_linear: weight ", w.sizes(), " does not match input ",
              x.sizes());
  return ChainLinear::apply(x, w);
}

}  // namespace model
