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

// The kernel clock (gemm.h): on or off, and its totals in nanoseconds and
// multiply-adds.
std::atomic<bool> g_clock_on{false};
std::atomic<int64_t> g_clock_ns{0}, g_clock_fmas{0}, g_clock_calls{0};

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
void run_kernel_unclocked(Isa isa, const gemm::Operands<T>& g) {
#if defined(__x86_64__)
  if (isa == Isa::kAvx512)
    gemm::gemm_avx512(g);
  else
    gemm::gemm_avx2(g);
#else
  (void)isa, (void)g;  // best_isa() is kNone: never called
#endif
}

template <typename T>
void run_kernel(Isa isa, const gemm::Operands<T>& g) {
  if (!g_clock_on.load(std::memory_order_relaxed))
    return run_kernel_unclocked(isa, g);
  const auto t0 = std::chrono::steady_clock::now();
  run_kernel_unclocked(isa, g);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  g_clock_ns.fetch_add(ns, std::memory_order_relaxed);
  g_clock_fmas.fetch_add(g.m * g.n * g.k, std::memory_order_relaxed);
  g_clock_calls.fetch_add(1, std::memory_order_relaxed);
}

// What the kernels do with C's entries (gemm_kernels.h's epilogues), with
// the tensors of C's layout that they write or read.
struct Finish {
  int epilogue = gemm::kStore;
  torch::Tensor sig, act, add;
};

// Operands of C (m x n, row stride ldc) = A B with A(i, p) =
// a[i * a_row + p * a_col] and B's rows ldb apart.
template <typename T>
gemm::Operands<T> operands(const T* a, int64_t a_row, int64_t a_col, const T* b,
                           int64_t ldb, T* c, int64_t ldc, int64_t m, int64_t n,
                           int64_t k, T* pack) {
  gemm::Operands<T> g;
  g.a = a;
  g.a_row = a_row;
  g.a_col = a_col;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  g.m = m;
  g.n = n;
  g.k = k;
  g.pack = pack;
  return g;
}

// The rows of C are shared among the intra-op threads in blocks of whole
// kernel tiles, each big enough to be worth a thread.
template <typename T>
void multiply(Isa isa, const torch::Tensor& a, const torch::Tensor& b,
              torch::Tensor& c, const Finish& finish) {
  gemm::Operands<T> g =
      operands(a.data_ptr<T>(), a.stride(0), a.stride(1), b.data_ptr<T>(),
               b.stride(0), c.data_ptr<T>(), c.stride(0), a.size(0), b.size(1),
               a.size(1), static_cast<T*>(nullptr));
  g.epilogue = finish.epilogue;
  g.sig = finish.sig.defined() ? finish.sig.data_ptr<T>() : nullptr;
  g.act = finish.act.defined() ? finish.act.data_ptr<T>() : nullptr;
  g.add = finish.add.defined() ? finish.add.data_ptr<T>() : nullptr;
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
    if (g.add)
      part.add = g.add + begin * g.ldc;
    part.m = end - begin;
    part.pack = pack.data();
    run_kernel(isa, part);
  });
}

// ---------------------------------------------------------------------------
// The MLP's backward on one thread, walked in blocks of kMlpRows rows: a
// block's dL/dh = dY W2 * SiLU'(h) stays in cache while dX's rows and the
// two weight gradients take it, and the block's act is read once for both
// its epilogue and dW2. The weight gradients' chains go on from one block
// to the next in row order (Operands::resume), so every entry of every
// output is the chain the unfused products compute: the same bits. Unfused,
// dL/dh (rows x f) went to memory and was read back twice, and act twice.

constexpr int64_t kMlpRows = 128;

// x (N, d), w1 (f, d), w2 (d, f), act and sig (N, f), gy (N, d), all
// contiguous; writes gx (N, d), gw1 (f, d), gw2 (d, f).
template <typename T>
void mlp_backward_in_rows(Isa isa, const T* x, const T* w1, const T* w2,
                          const T* act, const T* sig, const T* gy, T* gx,
                          T* gw1, T* gw2, int64_t N, int64_t d, int64_t f) {
  thread_local std::vector<T> gh, pack;  // a block's dL/dh; a packed panel
  gh.resize(size_t(kMlpRows * f));
  pack.resize(size_t(std::max({d, f, kMlpRows}) * gemm::kPackWidth));
  for (int64_t p0 = 0; p0 < N; p0 += kMlpRows) {
    const int64_t rows = std::min(kMlpRows, N - p0);
    // dL/dh = dY W2 times SiLU'(h).
    gemm::Operands<T> g = operands(gy + p0 * d, d, 1, w2, f, gh.data(), f, rows,
                                   f, d, pack.data());
    g.epilogue = gemm::kSiluGrad;
    g.act = act + p0 * f;
    g.sig = const_cast<T*>(sig + p0 * f);  // read only by kSiluGrad
    run_kernel(isa, g);
    // dX = dL/dh W1.
    run_kernel(isa, operands(gh.data(), f, 1, w1, d, gx + p0 * d, d, rows, d, f,
                             pack.data()));
    // dW1 = dL/dh^T X and dW2 = dY^T act, over this block's rows.
    g = operands(gh.data(), 1, f, x + p0 * d, d, gw1, d, f, d, rows,
                 pack.data());
    g.resume = p0 > 0;
    run_kernel(isa, g);
    g = operands(gy + p0 * d, 1, d, act + p0 * f, f, gw2, f, d, f, rows,
                 pack.data());
    g.resume = p0 > 0;
    run_kernel(isa, g);
  }
}

// The MLP's forward on one thread in the same blocks of rows: a block's
// act = SiLU(x W1) (and its sigmoid, for the backward) goes to memory and
// is read back by act W2 + residual while still in cache. Row by row the
// products of chain_mm_silu and chain_mm_add: the same bits.
template <typename T>
void mlp_forward_in_rows(Isa isa, const T* x, const T* w1t, const T* w2t,
                         const T* residual, T* act, T* sig, T* y, int64_t N,
                         int64_t d, int64_t f) {
  thread_local std::vector<T> pack;
  pack.resize(size_t(std::max(d, f) * gemm::kPackWidth));
  for (int64_t p0 = 0; p0 < N; p0 += kMlpRows) {
    const int64_t rows = std::min(kMlpRows, N - p0);
    gemm::Operands<T> g = operands(x + p0 * d, d, 1, w1t, f, act + p0 * f, f,
                                   rows, f, d, pack.data());
    g.epilogue = gemm::kSilu;
    g.sig = sig + p0 * f;
    run_kernel(isa, g);
    g = operands(static_cast<const T*>(act + p0 * f), f, 1, w2t, d, y + p0 * d,
                 d, rows, d, f, pack.data());
    g.epilogue = gemm::kAdd;
    g.add = residual + p0 * d;
    run_kernel(isa, g);
  }
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A residual (..., out) as the rows of C's layout that kAdd reads.
torch::Tensor residual_rows(const torch::Tensor& residual) {
  return residual.reshape({-1, residual.size(-1)}).contiguous();
}

// x W^T, plus a residual (in the product's stores) where one is given:
// chain_linear. (LibTorch 1.13's functions take no undefined input, so
// the residual is a further argument, not an empty one.)
class ChainLinear : public torch::autograd::Function<ChainLinear> {
 public:
  template <typename... Residual>
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w,
                               const Residual&... residual) {
    static_assert(sizeof...(Residual) <= 1, "one residual at most");
    ctx->save_for_backward({x, w});
    ctx->saved_data["residual"] = sizeof...(Residual) == 1;
    const torch::Tensor rows = x.reshape({-1, x.size(-1)});  // (N, in)
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    const torch::Tensor wt = w.t().contiguous();
    torch::Tensor y;
    if constexpr (sizeof...(Residual) == 1)
      y = chain_mm_add(rows, wt, residual_rows(residual...));
    else
      y = chain_mm(rows, wt);
    return y.view(shape);  // (..., out)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor gy = grads[0].reshape({-1, w.size(0)});  // (N, out)
    variable_list out(ctx->saved_data["residual"].toBool() ? 3 : 2);
    if (ctx->needs_input_grad(0))
      out[0] = chain_mm(gy, w).view(x.sizes());  // dY W
    if (ctx->needs_input_grad(1))
      out[1] = chain_mm(gy.t(), x.reshape({-1, x.size(-1)}));  // dY^T X
    if (out.size() == 3 && ctx->needs_input_grad(2))
      out[2] = grads[0];  // the sum's gradient, as a separate addition's
    return out;
  }
};

// W2 silu(W1 x), plus a residual where one is given: chain_mlp.
class ChainMlp : public torch::autograd::Function<ChainMlp> {
 public:
  template <typename... Residual>
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w1, const torch::Tensor& w2,
                               const Residual&... residual) {
    static_assert(sizeof...(Residual) <= 1, "one residual at most");
    const torch::Tensor rows = x.reshape({-1, x.size(-1)});  // (N, d)
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w2.size(0);
    const torch::Tensor w1t = w1.t().contiguous(), w2t = w2.t().contiguous();
    ctx->saved_data["residual"] = sizeof...(Residual) == 1;
    SiluProduct hidden;
    torch::Tensor y;
    if constexpr (sizeof...(Residual) == 1) {
      if (at::get_num_threads() == 1) {  // in blocks of rows, one thread
        y = forward_in_rows(rows.contiguous(), w1t, w2t,
                            residual_rows(residual...), hidden);
        ctx->save_for_backward({rows, w1, w2, hidden.act, hidden.sig});
        return y.view(shape);
      }
    }
    hidden = chain_mm_silu(rows, w1t);
    ctx->save_for_backward({rows, w1, w2, hidden.act, hidden.sig});
    if constexpr (sizeof...(Residual) == 1)
      y = chain_mm_add(hidden.act, w2t, residual_rows(residual...));
    else
      y = chain_mm(hidden.act, w2t);
    return y.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &rows = saved[0], &w1 = saved[1], &w2 = saved[2],
                        &act = saved[3], &sig = saved[4];
    const torch::Tensor gy = grads[0].reshape({-1, w2.size(0)});  // (N, d)
    std::vector<int64_t> shape = grads[0].sizes().vec();
    shape.back() = w1.size(1);
    variable_list out;
    if (at::get_num_threads() == 1) {
      out = backward_in_rows(rows, w1, w2, act, sig, gy.contiguous());
      out[0] = out[0].view(shape);
    } else {  // the products split their rows over the threads
      // dL/dh, h = W1 x: dY W2 times SiLU'(h), in the product's stores.
      const torch::Tensor gh = chain_mm_silu_grad(gy, w2, act, sig);
      out = {chain_mm(gh, w1).view(shape), chain_mm(gh.t(), rows),
             chain_mm(gy.t(), act)};
    }
    if (ctx->saved_data["residual"].toBool())
      out.push_back(ctx->needs_input_grad(3) ? grads[0] : torch::Tensor());
    return out;
  }

 private:
  // act W2 + residual by mlp_forward_in_rows, act and sig into `hidden`.
  static torch::Tensor forward_in_rows(const torch::Tensor& x,
                                       const torch::Tensor& w1t,
                                       const torch::Tensor& w2t,
                                       const torch::Tensor& residual,
                                       SiluProduct& hidden) {
    const int64_t N = x.size(0), d = x.size(1), f = w1t.size(1);
    hidden.act = torch::empty({N, f}, x.options());
    hidden.sig = torch::empty({N, f}, x.options());
    torch::Tensor y = torch::empty({N, w2t.size(1)}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "chain_mlp", [&] {
      mlp_forward_in_rows<scalar_t>(
          best_isa(), x.data_ptr<scalar_t>(), w1t.data_ptr<scalar_t>(),
          w2t.data_ptr<scalar_t>(), residual.data_ptr<scalar_t>(),
          hidden.act.data_ptr<scalar_t>(), hidden.sig.data_ptr<scalar_t>(),
          y.data_ptr<scalar_t>(), N, d, f);
    });
    g_chain_products += 2;
    return y;
  }

  // {dX, dW1, dW2} by mlp_backward_in_rows.
  static variable_list backward_in_rows(const torch::Tensor& rows,
                                        const torch::Tensor& w1,
                                        const torch::Tensor& w2,
                                        const torch::Tensor& act,
                                        const torch::Tensor& sig,
                                        const torch::Tensor& gy) {
    const torch::Tensor x = rows.contiguous(), w1c = w1.contiguous(),
                        w2c = w2.contiguous();
    const int64_t N = x.size(0), d = x.size(1), f = w1.size(0);
    torch::Tensor gx = torch::empty({N, d}, x.options());
    torch::Tensor gw1 = torch::empty({f, d}, x.options());
    torch::Tensor gw2 = torch::empty({d, f}, x.options());
    if (N == 0) {
      gw1.zero_();
      gw2.zero_();
      return {gx, gw1, gw2};
    }
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "chain_mlp_backward", [&] {
      mlp_backward_in_rows<scalar_t>(
          best_isa(), x.data_ptr<scalar_t>(), w1c.data_ptr<scalar_t>(),
          w2c.data_ptr<scalar_t>(), act.data_ptr<scalar_t>(),
          sig.data_ptr<scalar_t>(), gy.data_ptr<scalar_t>(),
          gx.data_ptr<scalar_t>(), gw1.data_ptr<scalar_t>(),
          gw2.data_ptr<scalar_t>(), N, d, f);
    });
    g_chain_products += 4;
    return {gx, gw1, gw2};
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
  // A weight's gradient dY^T X with few rows and wide rows (64 x 256 from
  // a (tokens, 64) dY and a (tokens, 256) X): computed as its transpose,
  // X^T dY, whose B = dY is read in place where X would be packed panel by
  // panel, then transposed. The same bits: each entry is the same chain of
  // FMAs over the same products in the same order (an FMA's two factors
  // commute exactly).
  if (finish.epilogue == gemm::kStore && a.stride(0) == 1 &&
      a.stride(1) >= a.size(0) && 2 * a.size(0) <= b.size(1) &&
      a.size(0) > 1)
    return product(b.t(), a.t(), isa, finish).t().contiguous();
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

// `t` is read in C's layout: C's shape (a's rows, b's columns), dtype and
// device.
void check_shaped_like_c(const torch::Tensor& t, const torch::Tensor& a,
                         const torch::Tensor& b, const char* what,
                         const char* role) {
  TORCH_CHECK(
      t.dim() == 2 && t.size(0) == a.size(0) && t.size(1) == b.size(1) &&
          t.scalar_type() == a.scalar_type() && t.device().is_cpu(),
      what, ": ", role, " must be a ", a.size(0), " x ", b.size(1), " ",
      a.scalar_type(), " CPU tensor, got ", t.sizes(), " ", t.scalar_type());
}

// An undefined residual, or one of the output's shape (x's with the last
// dimension `out`) and x's dtype.
void check_residual(const torch::Tensor& residual, const torch::Tensor& x,
                    int64_t out, const char* what) {
  if (!residual.defined())
    return;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  TORCH_CHECK(
      residual.sizes() == shape && residual.scalar_type() == x.scalar_type(),
      what, ": residual ", residual.sizes(), " ", residual.scalar_type(),
      " is not the output's ", shape, " ", x.scalar_type());
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

void start_kernel_clock() {
  g_clock_ns = 0;
  g_clock_fmas = 0;
  g_clock_calls = 0;
  g_clock_on = true;
}

KernelClock stop_kernel_clock() {
  g_clock_on = false;
  KernelClock clock;
  clock.seconds = double(g_clock_ns.load()) * 1e-9;
  clock.flops = 2.0 * double(g_clock_fmas.load());
  clock.calls = g_clock_calls.load();
  return clock;
}

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
  check_shaped_like_c(act, a, b, "chain_mm_silu_grad", "the SiLU");
  check_shaped_like_c(sig, a, b, "chain_mm_silu_grad", "the sigmoid");
  Finish finish;
  finish.epilogue = gemm::kSiluGrad;
  // C's layout: product() makes C contiguous.
  finish.act = act.contiguous();
  finish.sig = sig.contiguous();
  return product(a, b, isa, finish);
}

torch::Tensor chain_mm_add(const torch::Tensor& a, const torch::Tensor& b,
                           const torch::Tensor& add, Isa isa) {
  check_operands(a, b, isa, "chain_mm_add");
  check_shaped_like_c(add, a, b, "chain_mm_add", "the addend");
  Finish finish;
  finish.epilogue = gemm::kAdd;
  finish.add = add.contiguous();  // C's layout
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
                        const torch::Tensor& w2,
                        const torch::Tensor& residual) {
  TORCH_CHECK(w1.dim() == 2 && w2.dim() == 2 && x.dim() >= 1 &&
                  x.size(-1) == w1.size(1) && w2.size(1) == w1.size(0),
              "chain_mlp: weights ", w1.sizes(), " and ", w2.sizes(),
              " do not match input ", x.sizes());
  check_residual(residual, x, w2.size(0), "chain_mlp");
  return residual.defined() ? ChainMlp::apply(x, w1, w2, residual)
                            : ChainMlp::apply(x, w1, w2);
}

torch::Tensor chain_linear(const torch::Tensor& x, const torch::Tensor& w,
                           const torch::Tensor& residual) {
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
              "chain_linear: weight ", w.sizes(), " does not match input ",
              x.sizes());
  check_residual(residual, x, w.size(0), "chain_linear");
  return residual.defined() ? ChainLinear::apply(x, w, residual)
                            : ChainLinear::apply(x, w);
}

}  // namespace model
