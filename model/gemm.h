// twins' own matrix products for the CPU: every entry of C = A B is one
// chain of fused multiply-adds in index order (model/gemm_kernels.h), so
// its bits are the same whichever of the kernels computes it — AVX-512 or
// AVX2, any tiling, any thread count — where a BLAS's depend on the core
// type it picked. Chosen per process (--matmul, docs/performance.md); the
// model's linear maps take it where SpeedPaths::fma_chain says so.
#pragma once

#include <torch/torch.h>

#include <string>

namespace model {

// How the model's linear maps multiply on the CPU.
enum class Matmul {
  kBlas,  // LibTorch's matmul (OpenBLAS, MKL): what every record so far used
  kFmaChain,  // the kernels here
};

// Throws naming the value unless it is "blas", "fma-chain" or "auto" (the
// kernels here where this CPU has them, else blas); "fma-chain" on a CPU
// without AVX2 and FMA throws too.
Matmul parse_matmul(const std::string& name);
std::string matmul_name(Matmul matmul);  // "blas", "fma-chain"

// The process's choice, kBlas until set. Set it before the first pair is
// built: records name it in their numeric environment, which is read once.
void set_matmul(Matmul matmul);
Matmul matmul();

// set_matmul for one scope, put back at its end (the bench's rows, tests).
class ScopedMatmul {
 public:
  explicit ScopedMatmul(Matmul matmul) : before_(model::matmul()) {
    set_matmul(matmul);
  }
  ~ScopedMatmul() { set_matmul(before_); }
  ScopedMatmul(const ScopedMatmul&) = delete;
  ScopedMatmul& operator=(const ScopedMatmul&) = delete;

 private:
  Matmul before_;
};

// The instruction set of the kernels on this CPU: "avx512", "avx2", or
// "none" (no AVX2 with FMA: only kBlas).
// In order: a CPU runs every one up to its best.
enum class Isa { kNone, kAvx2, kAvx512 };
Isa best_isa();
std::string isa_name(Isa isa);

// C = A B for 2-D float32 or float64 CPU tensors of one dtype; A of any
// strides, B's rows made contiguous. `isa` below best_isa() picks a slower
// kernel (the tests compare them). Splits C's rows over ATen's intra-op
// threads.
torch::Tensor chain_mm(const torch::Tensor& a, const torch::Tensor& b,
                       Isa isa = best_isa());

// One core's FMA peak in GFLOP/s for `dtype` with `isa`'s kernels: their
// tile's FMAs on registers alone, timed on this thread (a median of a few
// runs of about 20 ms each). The bench's "% of FMA peak".
double fma_peak_gflops(torch::Dtype dtype, Isa isa = best_isa());

// How many products chain_mm has computed in this process: what shows
// that a pass took the kernels where a BLAS happens to sum in the same
// order (MKL's small float64 products do) and the bits cannot tell.
int64_t chain_products();

// The kernels' own clock, for the bench's figure of the products as a
// training step runs them (operands where the step leaves them in the
// cache): while it runs, every kernel call, on any thread, adds its wall
// seconds, its 2 m n k FLOPs and one call. Off by default (a relaxed load
// a call); starting it zeroes the totals.
struct KernelClock {
  double seconds = 0, flops = 0;
  int64_t calls = 0;
};
void start_kernel_clock();
KernelClock stop_kernel_clock();

// C = A B + add, `add` of C's shape: each entry's chain, then one addition
// in the store (the bits of chain_mm's C plus add as a separate sum).
torch::Tensor chain_mm_add(const torch::Tensor& a, const torch::Tensor& b,
                           const torch::Tensor& add, Isa isa = best_isa());

// x W^T for x (..., in) and W (out, in), differentiable in both: forward
// and both gradients (dX = dY W, dW = dY^T X) by chain_mm. With a defined
// `residual` (..., out): residual + x W^T, the sum in the product's stores
// (a residual connection without a pass of its own), differentiable in it
// too.
torch::Tensor chain_linear(const torch::Tensor& x, const torch::Tensor& w,
                           const torch::Tensor& residual = {});

// exp(x) by the sequence of IEEE operations of the kernels' epilogues
// (model/gemm_kernels.h, ExpConstants), one value at a time: their
// reference. Within 2 ulp of exp; +inf above 88 (float32) / 709
// (float64), 0 below -87 / -708.
float fma_exp(float x);
double fma_exp(double x);

// SiLU of each entry h of C = A B, in the kernels' stores: `act` = h sig,
// `sig` = 1 / (1 + fma_exp(-h)). Each h is the chain chain_mm computes.
struct SiluProduct {
  torch::Tensor act, sig;
};
SiluProduct chain_mm_silu(const torch::Tensor& a, const torch::Tensor& b,
                          Isa isa = best_isa());

// Each entry h of C = A B times SiLU's derivative where the forward pass
// gave `act` and `sig` (chain_mm_silu's, C's shape): h * fma(act, 1 - sig,
// sig), since SiLU'(z) = sig + z sig (1 - sig).
torch::Tensor chain_mm_silu_grad(const torch::Tensor& a, const torch::Tensor& b,
                                 const torch::Tensor& act,
                                 const torch::Tensor& sig,
                                 Isa isa = best_isa());

// The block's MLP W2 silu(W1 x) for x (..., d), W1 (f, d), W2 (d, f),
// differentiable in all three: the products by chain_mm, SiLU in W1's
// product's stores and its derivative in the stores of dY W2 (no pass of
// its own over the (..., f) activations). With a defined `residual` (x's
// shape): residual + the MLP, summed in W2's product's stores.
torch::Tensor chain_mlp(const torch::Tensor& x, const torch::Tensor& w1,
                        const torch::Tensor& w2,
                        const torch::Tensor& residual = {});

}  // namespace model
