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
};

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
