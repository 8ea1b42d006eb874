#include "optim/adafactor.h"

#include <cmath>
#include <limits>
#include <vector>

namespace optim {

namespace {

void check_options(const AdafactorOptions& options) {
  TORCH_CHECK(options.lr() >= 0, "Invalid learning rate: ", options.lr());
  TORCH_CHECK(0 <= options.beta2() && options.beta2() < 1.0,
              "Invalid beta2 value: ", options.beta2());
  TORCH_CHECK(options.eps() >= 0, "Invalid epsilon value: ", options.eps());
}

}  // namespace

torch::Tensor factored_second_moment(const torch::Tensor& row,
                                     const torch::Tensor& col) {
  TORCH_CHECK(row.dim() >= 1 && row.dim() == col.dim(),
              "factored_second_moment: row ", row.sizes(), " and col ",
              col.sizes(), " do not match");
  const torch::Tensor scale = row.mean(-1, /*keepdim=*/true)
                                  .clamp_min(std::numeric_limits<float>::min())
                                  .unsqueeze(-1);        // (..., 1, 1)
  return row.unsqueeze(-1) * col.unsqueeze(-2) / scale;  // (..., r, c)
}

void adafactor_factored_update_(const torch::Tensor& p,
                                const torch::Tensor& grad,
                                const torch::Tensor& row,
                                const torch::Tensor& col, int64_t step,
                                double lr, double beta2, double eps) {
  const torch::Tensor g2 = grad * grad;
  row.mul_(beta2).add_(g2.mean(-1), 1 - beta2);
  col.mul_(beta2).add_(g2.mean(-2), 1 - beta2);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  torch::Tensor denom =
      (factored_second_moment(row, col) / bias_correction2).sqrt_().add_(eps);
  p.addcdiv_(grad, denom, -lr);
}

void adafactor_unfactored_update_(const torch::Tensor& p,
                                  const torch::Tensor& grad,
                                  const torch::Tensor& v, int64_t step,
                                  double lr, double beta2, double eps) {
  v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  p.addcdiv_(grad, (v.sqrt() / std::sqrt(bias_correction2)).add_(eps), -lr);
}

Adafactor::Adafactor(std::vector<torch::optim::OptimizerParamGroup> groups,
                     AdafactorOptions defaults)
    : StatefulOptimizer(std::move(groups),
                        std::make_unique<AdafactorOptions>(defaults)) {
  check_options(defaults);
}

torch::Tensor Adafactor::step(LossClosure closure) {
  return step_each<AdafactorOptions>(
      closure, [](const AdafactorOptions& options) { check_options(options); },
      [&](const torch::Tensor& p, AdafactorOptions& options) {
        const bool factored = p.dim() >= 2;
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          if (factored) {
            std::vector<int64_t> row_shape = p.sizes().vec();  // (..., r, c)
            std::vector<int64_t> col_shape = row_shape;
            row_shape.erase(row_shape.end() - 1);  // (..., r)
            col_shape.erase(col_shape.end() - 2);  // (..., c)
            fresh.set("exp_avg_sq_row", torch::zeros(row_shape, p.options()));
            fresh.set("exp_avg_sq_col", torch::zeros(col_shape, p.options()));
          } else {
            fresh.set("exp_avg_sq",
                      torch::zeros_like(p, torch::MemoryFormat::Preserve));
          }
        });
        s.step += 1;
        if (factored) {
          adafactor_factored_update_(
              p, p.grad(), s.at("exp_avg_sq_row"), s.at("exp_avg_sq_col"),
              s.step, options.lr(), options.beta2(), options.eps());
        } else {
          adafactor_unfactored_update_(p, p.grad(), s.at("exp_avg_sq"), s.step,
                                       options.lr(), options.beta2(),
                                       options.eps());
        }
      });
}

}  // namespace optim
