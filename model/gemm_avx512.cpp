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
  static Reg splat(T x) { return _mm512_set1_ps(x); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg nearest(Reg x) {
    return _mm512_roundscale_ps(x,
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-126, 127]: n + 127 in the exponent field.
  static Reg pow2(Reg n) {
    const __m512i e =
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  // Whether a == b in every lane (false where either is NaN).
  static bool all_equal(Reg a, Reg b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ) == 0;
  }
  // exp's lanes outside its bounds (gemm::ExpConstants).
  static Reg exp_limits(Reg x, Reg e) {
    using C = gemm::ExpConstants<T>;
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, splat(C::kHi), _CMP_GT_OQ),
                             e, splat(__builtin_huge_valf()));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, splat(C::kLo), _CMP_LT_OQ),
                             e, zero());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
  }
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
  static Reg splat(T x) { return _mm512_set1_pd(x); }
  static Reg add(Reg a, Reg b) { return _mm512_add_pd(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_pd(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_pd(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_pd(a, b); }
  static Reg min(Reg a, Reg b) { return _mm512_min_pd(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_pd(a, b); }
  static Reg nearest(Reg x) {
    return _mm512_roundscale_pd(x,
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-1022, 1023]: n + 1023 in the exponent field.
  static Reg pow2(Reg n) {
    const __m512i e = _mm512_add_epi64(
        _mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(n)), _mm512_set1_epi64(1023));
    return _mm512_castsi512_pd(_mm512_slli_epi64(e, 52));
  }
  static bool all_equal(Reg a, Reg b) {
    return _mm512_cmp_pd_mask(a, b, _CMP_NEQ_UQ) == 0;
  }
  static Reg exp_limits(Reg x, Reg e) {
    using C = gemm::ExpConstants<T>;
    e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, splat(C::kHi), _CMP_GT_OQ),
                             e, splat(__builtin_huge_val()));
    e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, splat(C::kLo), _CMP_LT_OQ),
                             e, zero());
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), e, x);
  }
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
