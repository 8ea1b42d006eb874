#include "optim/adam_mini.h"

#include <algorithm>
#include <cmath>

namespace optim {

Hparams AdamMiniOptions::hparams() const {
  return {{"beta1", std::get<0>(betas())},
          {"beta2", std::get<1>(betas())},
          {"eps", eps()},
          {"weight_decay", 0.0}};
}

void adam_mini_update_(const torch::Tensor& p, const torch::Tensor& grad,
                       const torch::Tensor& exp_avg,
                       const torch::Tensor& exp_avg_sq, int64_t step, double lr,
                       double beta1, double beta2, double eps) {
  const int64_t blocks = exp_avg_sq.size(0);
  const torch::Tensor g = grad.reshape({blocks, -1});  // (blocks, per block)
  exp_avg.view({blocks, -1}).mul_(beta1).add_(g, 1 - beta1);
  exp_avg_sq.mul_(beta2).add_(g.square().mean(1, /*keepdim=*/true), 1 - beta2);
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  p.view({blocks, -1})
      .addcdiv_(exp_avg.view({blocks, -1}),
                adam_denominator(exp_avg_sq, bias_correction2, eps),
                -lr / bias_correction1);
}

AdamMini::AdamMini(std::vector<torch::Tensor> params,
                   std::vector<torch::Tensor> qk, int64_t heads,
                   AdamMiniOptions defaults)
    : StatefulOptimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                        std::make_unique<AdamMiniOptions>(defaults)),
      heads_(heads) {
  check_adam_options(defaults.lr(), defaults.betas(), defaults.eps());
  TORCH_CHECK(heads >= 1, "AdamMini: invalid head count: ", heads);
  // W_Q has the most rows, heads x head_dim; a W_K of grouped-query
  // attention has fewer heads of the same size.
  int64_t rows = 0;
  for (const auto& w : qk) {
    TORCH_CHECK(w.dim() == 2, "AdamMini: a W_Q / W_K of shape ", w.sizes(),
                " is not a matrix");
    rows = std::max(rows, w.size(0));
  }
  TORCH_CHECK(rows % heads == 0, "AdamMini: a W_Q of ", rows,
              " rows does not split into ", heads, " heads");
  head_rows_ = std::max<int64_t>(rows / heads, 1);
  for (const auto& w : qk) {
    TORCH_CHECK(w.size(0) % head_rows_ == 0, "AdamMini: a W_Q / W_K of shape ",
                w.sizes(), " does not split into head blocks of ", head_rows_,
                " rows");
    qk_.insert(w.unsafeGetTensorImpl());
  }
}

int64_t AdamMini::blocks(const torch::Tensor& p) const {
  if (qk_.count(p.unsafeGetTensorImpl()))
    return p.size(0) / head_rows_;  // one per head
  return p.dim() == 2 ? p.size(0) : 1;
}

torch::Tensor AdamMini::step(LossClosure closure) {
  return step_each<AdamMiniOptions>(
      closure,
      [](const AdamMiniOptions& options) {
        check_adam_options(options.lr(), options.betas(), options.eps());
      },
      [&](const torch::Tensor& p, AdamMiniOptions& options) {
        TORCH_CHECK(p.is_contiguous(), "AdamMini: parameter of shape ",
                    p.sizes(), " is not contiguous");
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          const int64_t b = blocks(p);
          fresh.set("exp_avg", torch::zeros({b, p.numel() / b}, p.options()));
          fresh.set("exp_avg_sq", torch::zeros({b, 1}, p.options()));
        });
        s.step += 1;
        adam_mini_update_(p, p.grad(), s.at("exp_avg"), s.at("exp_avg_sq"),
                          s.step, options.lr(), std::get<0>(options.betas()),
                          std::get<1>(options.betas()), options.eps());
      });
}

}  // namespace optim
