// Small loops shared by the CPU kernels (model/small_attention.cpp,
// model/fused.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

namespace model::lanes {

// Four lanes of scalar_t as one GCC vector (SSE2 registers on a plain
// x86-64 build): the lanes' operations written out, so that the loops below
// vectorise in whatever function they are inlined into, not as the
// compiler's analysis of that function allows.
template <typename scalar_t>
struct Quad {
  static_assert(std::is_same_v<scalar_t, float> ||
                    std::is_same_v<scalar_t, double>,
                "model::lanes: float or double lanes only");
};
template <>
struct Quad<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct Quad<double> {
  typedef double type __attribute__((vector_size(32)));
};

// Loads and stores of a quad, by reference: a 32-byte vector passed by
// value would be an AVX argument, which a plain x86-64 build warns of.
template <typename scalar_t>
[[gnu::always_inline]] inline void load_quad(const scalar_t* p,
                                             typename Quad<scalar_t>::type& v) {
  __builtin_memcpy(&v, p, sizeof v);
}

template <typename scalar_t>
[[gnu::always_inline]] inline void store_quad(
    scalar_t* p, const typename Quad<scalar_t>::type& v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// A dot product with eight running sums, lane by lane, added up in one
// fixed order: no dependence chain through every term, and the same bits
// whatever the compiler vectorises. Inlined always, so that where n is a
// constant (the attention kernel's head width) the loops unroll: called
// out of line, the call and its generic tail cost more than the 16
// multiply-adds of a head. Lanes 0-3 and 4-7 are two quads.
template <typename scalar_t>
[[gnu::always_inline]] inline scalar_t dot(const scalar_t* a, const scalar_t* b,
                                           int64_t n) {
  using V = typename Quad<scalar_t>::type;
  V low = {0, 0, 0, 0}, high = {0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    V a_low, a_high, b_low, b_high;
    load_quad(a + c, a_low);
    load_quad(a + c + 4, a_high);
    load_quad(b + c, b_low);
    load_quad(b + c + 4, b_high);
    low += a_low * b_low;
    high += a_high * b_high;
  }
  scalar_t acc[8] = {low[0],  low[1],  low[2],  low[3],
                     high[0], high[1], high[2], high[3]};
  for (int l = 0; l < 8 && c < n; ++c, ++l)  // the last n % 8 terms
    acc[l] += a[c] * b[c];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// y += a * x over n elements.
template <typename scalar_t>
[[gnu::always_inline]] inline void axpy(scalar_t a, const scalar_t* x,
                                        scalar_t* y, int64_t n) {
  using V = typename Quad<scalar_t>::type;
  const V splat = {a, a, a, a};
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    V x4, y4;
    load_quad(x + c, x4);
    load_quad(y + c, y4);
    y4 += splat * x4;
    store_quad(y + c, y4);
  }
  for (; c < n; ++c)
    y[c] += a * x[c];
}

}  // namespace model::lanes
