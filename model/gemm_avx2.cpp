// model/gemm_kernels.h for AVX2 with FMA (compiled with -mavx2 -mfma): 16
// vector registers hold a 6 x 16 float32 (6 x 8 float64) tile of C. Masked
// loads and stores (vmaskmov) read and write only the columns that exist.
#include <immintrin.h>

#include "model/gemm_kernels.h"

namespace model {
namespace {

// Lanes 0 .. n-1 of a mask: all ones where the lane is below n.
inline __m256i first_lanes32(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i first_lanes64(int n) {
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n),
                            _mm256_setr_epi64x(0, 1, 2, 3));
}

struct F32 {
  using T = float;
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const T* p) { return _mm256_loadu_ps(p); }
  static Reg load_first(const T* p, int n) {
    return _mm256_maskload_ps(p, first_lanes32(n));
  }
  static void store(T* p, Reg x) { _mm256_storeu_ps(p, x); }
  static void store_first(T* p, Reg x, int n) {
    _mm256_maskstore_ps(p, first_lanes32(n), x);
  }
  static Reg broadcast(const T* p) { return _mm256_broadcast_ss(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
};

struct F64 {
  using T = double;
  using Reg = __m256d;
  static constexpr int kWidth = 4;
  static Reg zero() { return _mm256_setzero_pd(); }
  static Reg load(const T* p) { return _mm256_loadu_pd(p); }
  static Reg load_first(const T* p, int n) {
    return _mm256_maskload_pd(p, first_lanes64(n));
  }
  static void store(T* p, Reg x) { _mm256_storeu_pd(p, x); }
  static void store_first(T* p, Reg x, int n) {
    _mm256_maskstore_pd(p, first_lanes64(n), x);
  }
  static Reg broadcast(const T* p) { return _mm256_broadcast_sd(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_pd(a, b, c); }
};

#include "model/gemm_tile.h"

}  // namespace

void gemm::gemm_avx2(const Operands<float>& g) {
  multiply<F32, 6, 2>(g);
}
void gemm::gemm_avx2(const Operands<double>& g) {
  multiply<F64, 6, 2>(g);
}

int64_t gemm::fma_loop_avx2(bool float64, int64_t rounds) {
  volatile double sink =
      float64 ? fma_loop<F64, 6, 2>(rounds) : fma_loop<F32, 6, 2>(rounds);
  (void)sink;
  const int64_t lanes = float64 ? F64::kWidth : F32::kWidth;
  return rounds * 6 * 2 * lanes * 2;
}

}  // namespace model
