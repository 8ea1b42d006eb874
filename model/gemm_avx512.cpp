// model/gemm_kernels.h for AVX-512 (compiled with -mavx512f -mfma): 32
// vector registers hold a 6 x 64 float32 (6 x 32 float64) tile of C.
#include <immintrin.h>

#include "model/gemm_kernels.h"

namespace model {
namespace {

struct F32 {
  using T = float;
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static __mmask16 first(int n) { return __mmask16((1u << n) - 1u); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const T* p) { return _mm512_loadu_ps(p); }
  static Reg load_first(const T* p, int n) {
    return _mm512_maskz_loadu_ps(first(n), p);
  }
  static void store(T* p, Reg x) { _mm512_storeu_ps(p, x); }
  static void store_first(T* p, Reg x, int n) {
    _mm512_mask_storeu_ps(p, first(n), x);
  }
  static Reg broadcast(const T* p) { return _mm512_set1_ps(*p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
};

struct F64 {
  using T = double;
  using Reg = __m512d;
  static constexpr int kWidth = 8;
  static __mmask8 first(int n) { return __mmask8((1u << n) - 1u); }
  static Reg zero() { return _mm512_setzero_pd(); }
  static Reg load(const T* p) { return _mm512_loadu_pd(p); }
  static Reg load_first(const T* p, int n) {
    return _mm512_maskz_loadu_pd(first(n), p);
  }
  static void store(T* p, Reg x) { _mm512_storeu_pd(p, x); }
  static void store_first(T* p, Reg x, int n) {
    _mm512_mask_storeu_pd(p, first(n), x);
  }
  static Reg broadcast(const T* p) { return _mm512_set1_pd(*p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_pd(a, b, c); }
};

#include "model/gemm_tile.h"

}  // namespace

void gemm::gemm_avx512(const Operands<float>& g) {
  multiply<F32, 6, 4>(g);
}
void gemm::gemm_avx512(const Operands<double>& g) {
  multiply<F64, 6, 4>(g);
}

int64_t gemm::fma_loop_avx512(bool float64, int64_t rounds) {
  volatile double sink =
      float64 ? fma_loop<F64, 6, 4>(rounds) : fma_loop<F32, 6, 4>(rounds);
  (void)sink;
  const int64_t lanes = float64 ? F64::kWidth : F32::kWidth;
  return rounds * 6 * 4 * lanes * 2;
}

}  // namespace model
