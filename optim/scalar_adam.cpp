#include "optim/scalar_adam.h"

#include <cmath>

namespace optim {

torch::Tensor pooled_denominator(const std::vector<torch::Tensor>& exp_avg_sqs,
                                 const std::vector<double>& bias_corrections2,
                                 double eps) {
  TORCH_CHECK(!exp_avg_sqs.empty(), "pooled_denominator: no parameters");
  TORCH_CHECK(exp_avg_sqs.size() == bias_corrections2.size(),
              "pooled_denominator: ", exp_avg_sqs.size(), " moments but ",
              bias_corrections2.size(), " bias corrections");
  torch::Tensor total;
  int64_t count = 0;
  for (size_t i = 0; i < exp_avg_sqs.size(); ++i) {
    torch::Tensor s = exp_avg_sqs[i].sum() / bias_corrections2[i];
    total = total.defined() ? total + s : s;
    count += exp_avg_sqs[i].numel();
  }
  return (total / double(count)).sqrt() + eps;
}

ScalarAdam::ScalarAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
                       ScalarAdamOptions defaults)
    : StatefulOptimizer(std::move(groups),
                        std::make_unique<ScalarAdamOptions>(defaults)) {
  check_adam_options(defaults.lr(), defaults.betas(), defaults.eps());
}

torch::Tensor ScalarAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // Pass 1: moments of every parameter, pooled second moment.
  struct Item {
    torch::Tensor p;
    ScalarAdamParamState* state;
    const ScalarAdamOptions* options;
  };
  std::vector<Item> items;
  std::vector<torch::Tensor> sqs;
  std::vector<double> corrections;
  for (auto& group : param_groups_) {
    auto& options = static_cast<ScalarAdamOptions&>(group.options());
    check_adam_options(options.lr(), options.betas(), options.eps());
    const auto [beta1, beta2] = options.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& state = state_for<ScalarAdamParamState>(p, [&] {
        auto s = std::make_unique<ScalarAdamParamState>();
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        return s;
      });
      const torch::Tensor& grad = p.grad();
      state.step(state.step() + 1);
      state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
      state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      items.push_back({p, &state, &options});
      sqs.push_back(state.exp_avg_sq());
      corrections.push_back(1 - std::pow(beta2, state.step()));
    }
  }
  if (items.empty()) return loss;
  // All groups share one eps: the first group's (they are built that way).
  const double eps =
      static_cast<ScalarAdamOptions&>(param_groups_.front().options()).eps();
  torch::Tensor denom = pooled_denominator(sqs, corrections, eps);
  // Pass 2: p -= (lr / bias_correction1) * m / s.
  for (auto& item : items) {
    const double beta1 = std::get<0>(item.options->betas());
    const double bias_correction1 = 1 - std::pow(beta1, item.state->step());
    item.p.addcdiv_(item.state->exp_avg(), denom,
                    -item.options->lr() / bias_correction1);
  }
  return loss;
}

}  // namespace optim
