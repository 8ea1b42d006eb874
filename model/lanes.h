// Small loops shared by the CPU kernels (model/small_attention.cpp,
// model/fused.cpp).
#pragma once

#include <cstdint>

namespace model::lanes {

// A dot product with eight running sums, lane by lane, added up in one
// fixed order: no dependence chain through every term, and the same bits
// whatever the compiler vectorises. Inlined always, so that where n is a
// constant (the attention kernel's head width) the loops unroll: called
// out of line, the call and its generic tail cost more than the 16
// multiply-adds of a head.
template <typename scalar_t>
[[gnu::always_inline]] inline scalar_t dot(const scalar_t* a, const scalar_t* b,
                                           int64_t n) {
  scalar_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[c + l] * b[c + l];
  }
  for (int l = 0; l < 8 && c < n; ++c, ++l)  // the last n % 8 terms
    acc[l] += a[c] * b[c];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// y += a * x over n elements.
template <typename scalar_t>
[[gnu::always_inline]] inline void axpy(scalar_t a, const scalar_t* x,
                                        scalar_t* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += a * x[c];
}

}  // namespace model::lanes
