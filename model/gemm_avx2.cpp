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
  static Reg splat(T x) { return _mm256_set1_ps(x); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg nearest(Reg x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-126, 127]: n + 127 in the exponent field.
  static Reg pow2(Reg n) {
    const __m256i e =
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // Whether a == b in every lane (false where either is NaN).
  static bool all_equal(Reg a, Reg b) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_NEQ_UQ)) == 0;
  }
  // exp's lanes outside its bounds (gemm::ExpConstants).
  static Reg exp_limits(Reg x, Reg e) {
    using C = gemm::ExpConstants<T>;
    e = _mm256_blendv_ps(e, splat(__builtin_huge_valf()),
                         _mm256_cmp_ps(x, splat(C::kHi), _CMP_GT_OQ));
    e = _mm256_blendv_ps(e, zero(),
                         _mm256_cmp_ps(x, splat(C::kLo), _CMP_LT_OQ));
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
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
  static Reg splat(T x) { return _mm256_set1_pd(x); }
  static Reg add(Reg a, Reg b) { return _mm256_add_pd(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_pd(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_pd(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_pd(a, b); }
  static Reg min(Reg a, Reg b) { return _mm256_min_pd(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_pd(a, b); }
  static Reg nearest(Reg x) {
    return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-1022, 1023]: n + 1023 in the exponent field.
  static Reg pow2(Reg n) {
    const __m256i e = _mm256_add_epi64(
        _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023));
    return _mm256_castsi256_pd(_mm256_slli_epi64(e, 52));
  }
  static bool all_equal(Reg a, Reg b) {
    return _mm256_movemask_pd(_mm256_cmp_pd(a, b, _CMP_NEQ_UQ)) == 0;
  }
  static Reg exp_limits(Reg x, Reg e) {
    using C = gemm::ExpConstants<T>;
    e = _mm256_blendv_pd(e, splat(__builtin_huge_val()),
                         _mm256_cmp_pd(x, splat(C::kHi), _CMP_GT_OQ));
    e = _mm256_blendv_pd(e, zero(),
                         _mm256_cmp_pd(x, splat(C::kLo), _CMP_LT_OQ));
    return _mm256_blendv_pd(e, x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  }
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
