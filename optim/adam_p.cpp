#include "optim/adam_p.h"

#include <cmath>

#include "optim/scalar_adam.h"

namespace optim {

namespace {

void check_options(const AdamPOptions& o) {
  check_adam_options(o.lr(), o.betas(), o.eps());
  check_adam_p_exponent(o.p());
}

}  // namespace

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

AdamP::AdamP(std::vector<torch::optim::OptimizerParamGroup> groups,
             AdamPOptions defaults)
    : StatefulOptimizer(std::move(groups),
                        std::make_unique<AdamPOptions>(defaults)) {
  check_options(defaults);
}

torch::Tensor AdamP::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const auto& first =
      static_cast<AdamPOptions&>(param_groups_.front().options());
  const double dial = first.p(), eps = first.eps();
  struct Item {
    torch::Tensor p;
    AdamPParamState* state;
    const AdamPOptions* options;
  };
  std::vector<Item> items;
  std::vector<torch::Tensor> sqs;
  std::vector<double> corrections;
  for (auto& group : param_groups_) {
    auto& o = static_cast<AdamPOptions&>(group.options());
    check_options(o);
    const auto [beta1, beta2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      auto& state = state_for<AdamPParamState>(p, [&] {
        auto s = std::make_unique<AdamPParamState>();
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        return s;
      });
      state.step(state.step() + 1);
      if (dial == 1) {
        // Stock Adam, op for op: bitwise equal to `adam`.
        adam_update_(p, p.grad(), state.exp_avg(), state.exp_avg_sq(),
                     state.step(), o.lr(), beta1, beta2, o.eps());
        continue;
      }
      const torch::Tensor& grad = p.grad();
      state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
      state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      items.push_back({p, &state, &o});
      sqs.push_back(state.exp_avg_sq());
      corrections.push_back(1 - std::pow(beta2, state.step()));
    }
  }
  if (items.empty())
    return loss;
  // s + eps over every entry of every parameter (Algorithm 1, line 9).
  const torch::Tensor pooled = pooled_denominator(sqs, corrections, eps);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    const double beta1 = std::get<0>(item.options->betas());
    const double bias_correction1 = 1 - std::pow(beta1, item.state->step());
    item.p.addcdiv_(item.state->exp_avg(),
                    adam_p_denominator(item.state->exp_avg_sq(), corrections[i],
                                       pooled, dial, eps),
                    -item.options->lr() / bias_correction1);
  }
  return loss;
}

}  // namespace optim
