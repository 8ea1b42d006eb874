#include "optim/adam_p.h"

#include <cmath>

namespace optim {

void AdamPOptions::check() const {
  check_adam_p_exponent(p());
}

void check_adam_p_exponent(double p) {
  TORCH_CHECK(p >= 0 && p <= 1, "Invalid Adam-p exponent: ", p,
              " (must be in [0, 1])");
}

torch::Tensor adam_p_denominator(const torch::Tensor& exp_avg_sq,
                                 double bias_correction2,
                                 const torch::Tensor& pooled, double p,
                                 double eps) {
  return (exp_avg_sq.sqrt() / std::sqrt(bias_correction2))
      .add_(eps)
      .pow_(p)
      .mul_(pooled.pow(1 - p))
      .add_(eps);
}

torch::Tensor AdamP::denominator(const torch::Tensor& exp_avg_sq,
                                 double bias_correction2,
                                 const torch::Tensor& rms,
                                 const AdamPOptions& options) const {
  if (options.p() == 1) {
    // Stock Adam, op for op: bitwise equal to `adam`.
    return adam_denominator(exp_avg_sq, bias_correction2, options.eps());
  }
  return adam_p_denominator(exp_avg_sq, bias_correction2, rms + options.eps(),
                            options.p(), options.eps());
}

}  // namespace optim
