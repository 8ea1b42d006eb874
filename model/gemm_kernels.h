// The CPU kernels of twins' own matrix products (model/gemm.h), one set per
// instruction set. This header and the kernel files include nothing but
// <cstdint> and the intrinsics: a kernel file is compiled for its
// instruction set (-mavx512f / -mavx2), and an inline function of a shared
// header compiled there could be the copy the linker keeps for every other
// caller, which would then fault on a CPU without it.
#pragma once

#include <cstdint>

namespace model::gemm {

// C (m x n) = A (m x k) B (k x n).
// A(i, p) is a[i * a_row + p * a_col] (any strides: a transposed operand
// is read in place); B's rows are contiguous, b[p * ldb + j]; C's too,
// c[i * ldc + j]. Every C entry is one chain of fused multiply-adds in
// the order p = 0, 1, ..., k - 1, starting from 0: its bits
// depend on nothing else — not on the instruction set, the tiling or the
// thread that computes it.
//
// An epilogue then maps each finished entry h before it is stored:
//   kStore     c = h
//   kSilu      sig = 1 / (1 + exp(-h)) and c = h * sig: SiLU and its
//              sigmoid (exp as model::fma_exp computes it)
//   kSiluGrad  c = h * fma(act, 1 - sig, sig): h times SiLU's derivative,
//              from the SiLU `act` and sigmoid `sig` of the forward pass
//   kAdd       c = h + add: a residual connection's sum, one rounding as
//              a separate addition would make
// each in one fixed sequence of IEEE operations, so that an epilogue's
// bits, too, depend on nothing but its inputs. sig, act and add have C's
// layout (ldc).
enum Epilogue : int { kStore = 0, kSilu = 1, kSiluGrad = 2, kAdd = 3 };

template <typename T>
struct Operands {
  const T* a = nullptr;
  int64_t a_row = 0, a_col = 0;
  const T* b = nullptr;
  int64_t ldb = 0;
  T* c = nullptr;
  int64_t ldc = 0;
  int64_t m = 0, n = 0, k = 0;
  // Room for k * kPackWidth entries, where a panel of B is copied before
  // the row blocks read it (gemm_tile.h's pack_panel), or null: B read in
  // place. The caller owns it: no allocation here.
  T* pack = nullptr;
  int epilogue = kStore;
  // Each chain goes on from the value C holds instead of from 0: a chain
  // over a long k walked in calls of a few rows each (the MLP's backward
  // in blocks of rows), the same chain as one call over all of k.
  bool resume = false;
  T* sig = nullptr;        // kSilu: written; kSiluGrad: read
  const T* act = nullptr;  // kSiluGrad: read
  const T* add = nullptr;  // kAdd: read
};

// exp(x) as the epilogues and model::fma_exp compute it: n = the nearest
// integer to x log2(e) (ties to even), r = x - n ln2 by two FMAs (ln2 in a
// high and a low part), p = the Taylor polynomial of exp(r) to degree
// kDegree by Horner's FMAs (|r| <= ln2 / 2: its truncation is below a
// tenth of an ulp), exp(x) = p * 2^n; +inf above kHi, 0 below kLo (no
// subnormal results), x itself for NaN.
template <typename T>
struct ExpConstants;
template <>
struct ExpConstants<float> {
  static constexpr int kDegree = 7;
  static constexpr float kHi = 88.0f, kLo = -87.0f;
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
};
template <>
struct ExpConstants<double> {
  static constexpr int kDegree = 13;
  static constexpr double kHi = 709.0, kLo = -708.0;
  static constexpr double kLog2e = 1.4426950408889634074;
  static constexpr double kLn2Hi = 6.93147180369123816490e-01,
                          kLn2Lo = 1.90821492927058770002e-10;
};
// The polynomial's coefficient of r^k: 1 / k!, rounded once to T.
template <typename T>
constexpr T exp_coefficient(int k) {
  double factorial = 1;
  for (int i = 2; i <= k; ++i)
    factorial *= i;
  return T(1.0 / factorial);
}

// A panel's width at most, in entries (AVX-512 float32: 4 vectors of 16).
inline constexpr int64_t kPackWidth = 64;

// Each kernel file's FMA peak probe (gemm_tile.h's fma_loop): `rounds`
// rounds of the tile's FMAs on registers alone. Returns the FLOPs done.
int64_t fma_loop_avx512(bool float64, int64_t rounds);
int64_t fma_loop_avx2(bool float64, int64_t rounds);

void gemm_avx512(const Operands<float>& g);
void gemm_avx512(const Operands<double>& g);
void gemm_avx2(const Operands<float>& g);
void gemm_avx2(const Operands<double>& g);

}  // namespace model::gemm
