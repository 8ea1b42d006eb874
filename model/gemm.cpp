#include "model/gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
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

// What the kernels do with C's entries (gemm_kernels.h's epilogues), with
// the tensors of C's layout that they write or read.
struct Finish {
  int epilogue = gemm::kStore;
  torch::Tensor sig, act;
};

// The rows of C are shared among the intra-op threads in blocks of whole
// kernel tiles, each big enough to be worth a thread.
template <typename T>
void multiply(Isa isa, const torch::Tensor& a, const torch::Tensor& b,
              torch::Tensor& c, const Finish& finish) {
  gemm::Operands<T> g;
  g.epilogue = finish.epilogue;
  g.sig = finish.sig.defined() ? finish.sig.data_ptr<T>() : nullptr;
  g.act = finish.act.defined() ? finish.act.data_ptr<T>() : nullptr;
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
    if (g.sig)
      part.sig = g.sig + begin * g.ldc;
    if (g.act)
      part.act = g.act + begin * g.ldc;
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

// W2 silu(W1 x): chain_mlp.
class ChainMlp : public torch::autograd::Function<ChainMlp> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w1,
                               const torch::Tensor& w2) {
    const torch::Tensor rows = x.reshape({-1, x.size(-1)});  // (N, d)
    const SiluProduct hidden = chain_mm_silu(rows, w1.t().contiguous());
    ctx->save_for_backward({rows, w1, w2, hidden.act, hidden.sig});
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w2.size(0);
    return chain_mm(hidden.act, w2.t().contiguous()).view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &rows = saved[0], &w1 = saved[1], &w2 = saved[2],
                        &act = saved[3], &sig = saved[4];
    const torch::Tensor gy = grads[0].reshape({-1, w2.size(0)});  // (N, d)
    // dL/dh, h = W1 x: dY W2 times SiLU'(h), in the product's stores.
    const torch::Tensor gh = chain_mm_silu_grad(gy, w2, act, sig);
    std::vector<int64_t> shape = grads[0].sizes().vec();
    shape.back() = w1.size(1);
    return {chain_mm(gh, w1).view(shape), chain_mm(gh.t(), rows),
            chain_mm(gy.t(), act)};
  }
};

template <typename T>
T scalar_exp(T x) {
  using C = gemm::ExpConstants<T>;
  if (std::isnan(x))
    return x;
  if (x > C::kHi)
    return std::numeric_limits<T>::infinity();
  if (x < C::kLo)
    return T(0);
  const T n = std::nearbyint(x * C::kLog2e);
  T r = std::fma(n, -C::kLn2Hi, x);
  r = std::fma(n, -C::kLn2Lo, r);
  T p = gemm::exp_coefficient<T>(C::kDegree);
  for (int k = C::kDegree - 1; k >= 0; --k)
    p = std::fma(p, r, gemm::exp_coefficient<T>(k));
  return p * std::ldexp(T(1), static_cast<int>(n));  // 2^n exactly
}

void check_operands(const torch::Tensor& a, const torch::Tensor& b, Isa isa,
                    const char* what) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), what,
              ": cannot multiply ", a.sizes(), " by ", b.sizes());
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), what,
              ": CPU tensors only");
  TORCH_CHECK(
      a.scalar_type() == b.scalar_type() && (a.scalar_type() == torch::kFloat ||
                                             a.scalar_type() == torch::kDouble),
      what, ": float32 or float64 of one dtype, got ", a.scalar_type(), " and ",
      b.scalar_type());
  TORCH_CHECK(isa != Isa::kNone && isa <= best_isa(), what, ": this CPU ",
              "cannot run the ", isa_name(isa), " kernels");
}

// C = A B through `finish`, into a new C.
torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b, Isa isa,
                      const Finish& finish) {
  const torch::Tensor rows =
      b.stride(1) == 1 && b.stride(0) >= b.size(1) ? b : b.contiguous();
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  ++g_chain_products;
  if (a.scalar_type() == torch::kFloat)
    multiply<float>(isa, a, rows, c, finish);
  else
    multiply<double>(isa, a, rows, c, finish);
  return c;
}

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
  check_operands(a, b, isa, "chain_mm");
  return product(a, b, isa, Finish{});
}

SiluProduct chain_mm_silu(const torch::Tensor& a, const torch::Tensor& b,
                          Isa isa) {
  check_operands(a, b, isa, "chain_mm_silu");
  Finish finish;
  finish.epilogue = gemm::kSilu;
  finish.sig = torch::empty({a.size(0), b.size(1)}, a.options());
  return {product(a, b, isa, finish), finish.sig};
}

torch::Tensor chain_mm_silu_grad(const torch::Tensor& a, const torch::Tensor& b,
                                 const torch::Tensor& act,
                                 const torch::Tensor& sig, Isa isa) {
  check_operands(a, b, isa, "chain_mm_silu_grad");
  for (const torch::Tensor* t : {&act, &sig}) {
    TORCH_CHECK(t->dim() == 2 && t->size(0) == a.size(0) &&
                    t->size(1) == b.size(1) &&
                    t->scalar_type() == a.scalar_type() && t->device().is_cpu(),
                "chain_mm_silu_grad: the SiLU and sigmoid must be ", a.size(0),
                " x ", b.size(1), " ", a.scalar_type(), " CPU tensors, got ",
                t->sizes(), " ", t->scalar_type());
  }
  Finish finish;
  finish.epilogue = gemm::kSiluGrad;
  // C's layout: product() makes C contiguous.
  finish.act = act.contiguous();
  finish.sig = sig.contiguous();
  return product(a, b, isa, finish);
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

float fma_exp(float x) {
  return scalar_exp(x);
}
double fma_exp(double x) {
  return scalar_exp(x);
}

torch::Tensor chain_mlp(const torch::Tensor& x, const torch::Tensor& w1,
                        const torch::Tensor& w2) {
  TORCH_CHECK(w1.dim() == 2 && w2.dim() == 2 && x.dim() >= 1 &&
                  x.size(-1) == w1.size(1) && w2.size(1) == w1.size(0),
              "chain_mlp: weights ", w1.sizes(), " and ", w2.sizes(),
              " do not match input ", x.sizes());
  return ChainMlp::apply(x, w1, w2);
}

torch::Tensor chain_linear(const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
              "chain_linear: weight ", w.sizes(), " does not match input ",
              x.sizes());
  return ChainLinear::apply(x, w);
}

}  // namespace model
