#include "optim/base.h"

#include <cmath>

namespace optim {

void check_adam_options(double lr, const std::tuple<double, double>& betas,
                        double eps) {
  TORCH_CHECK(lr >= 0, "Invalid learning rate: ", lr);
  TORCH_CHECK(eps >= 0, "Invalid epsilon value: ", eps);
  TORCH_CHECK(0 <= std::get<0>(betas) && std::get<0>(betas) < 1.0,
              "Invalid beta parameter at index 0: ", std::get<0>(betas));
  TORCH_CHECK(0 <= std::get<1>(betas) && std::get<1>(betas) < 1.0,
              "Invalid beta parameter at index 1: ", std::get<1>(betas));
}

void adam_update_(const torch::Tensor& p, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg,
                  const torch::Tensor& exp_avg_sq,
                  int64_t step, double lr, double beta1, double beta2,
                  double eps) {
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  torch::Tensor denom =
      (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(eps);
  p.addcdiv_(exp_avg, denom, -lr / bias_correction1);
}

}  // namespace optim
