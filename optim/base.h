// Shared plumbing for the project's optimizers: the per-parameter state map
// of torch::optim::Optimizer is keyed differently across LibTorch releases
// (a string of the TensorImpl address in 1.13, the address itself in 2.x);
// this is the one place that knows.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace optim {

// An optimizer's hyperparameters as (name, value) pairs, in a fixed order:
// what a result record carries so that a resumed run can tell whether the
// rule it would run is the one that wrote the file. Flags are 0 / 1.
using Hparams = std::vector<std::pair<std::string, double>>;

class StatefulOptimizer : public torch::optim::Optimizer {
 protected:
  using torch::optim::Optimizer::Optimizer;

  static auto state_key(const torch::Tensor& p) {
#if TORCH_VERSION_MAJOR < 2
    return c10::guts::to_string(p.unsafeGetTensorImpl());
#else
    return static_cast<void*>(p.unsafeGetTensorImpl());
#endif
  }

  // The state of `p`, created by `init()` (returning unique_ptr<State>) on
  // first use.
  template <class State, class Init>
  State& state_for(const torch::Tensor& p, Init&& init) {
    auto key = state_key(p);
    auto it = state_.find(key);
    if (it == state_.end()) {
      it = state_.insert({key, init()}).first;
    }
    return static_cast<State&>(*it->second);
  }

  // The step every per-parameter rule shares: no autograd, the closure's
  // loss, `check(options)` once per group, then `update(p, options)` for each
  // parameter that has a gradient. Returns the closure's loss.
  template <class Options, class Check, class Update>
  torch::Tensor step_each(const LossClosure& closure, Check&& check,
                          Update&& update) {
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure) {
      torch::AutoGradMode enable_grad(true);
      loss = closure();
    }
    for (auto& group : param_groups_) {
      auto& o = static_cast<Options&>(group.options());
      check(o);
      for (auto& p : group.params()) {
        if (p.grad().defined())
          update(p, o);
      }
    }
    return loss;
  }
};

// TORCH_CHECKs of Adam's constructor: lr >= 0, eps >= 0, betas in [0, 1).
void check_adam_options(double lr, const std::tuple<double, double>& betas,
                        double eps);

// One step of LibTorch's torch::optim::Adam (no weight decay, no amsgrad),
// written op for op as its adam.cpp so that it is bitwise the same; `step`
// counts from 1. Used where an optimizer needs Adam on some parameters.
void adam_update_(const torch::Tensor& p, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                  int64_t step, double lr, double beta1, double beta2,
                  double eps);

// The Adam half of a hybrid rule (its `others` group): the moments a state
// starts with, and one Adam step at the options' adam_lr, adam_betas and
// adam_eps, counted by the state's step.
template <class State>
void start_adam_moments(State& s, const torch::Tensor& p) {
  s.exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  s.exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
}
template <class State, class Options>
void hybrid_adam_update_(const torch::Tensor& p, const torch::Tensor& grad,
                         State& s, const Options& o) {
  adam_update_(p, grad, s.exp_avg(), s.exp_avg_sq(), s.step(), o.adam_lr(),
               std::get<0>(o.adam_betas()), std::get<1>(o.adam_betas()),
               o.adam_eps());
}

// The parameter groups of a hybrid rule (Muon, Shampoo): `matrices` (each
// 2-D, updated by the rule itself) and `others` (updated by Adam), each
// group with the defaults and its flag set by `with_flag(options, on)`.
// Per-group options replace the defaults whole, so each is given in full.
// Throws naming `rule` for a matrix that is not 2-D.
template <class Options, class WithFlag>
std::vector<torch::optim::OptimizerParamGroup> hybrid_groups(
    const char* rule, std::vector<torch::Tensor> matrices,
    std::vector<torch::Tensor> others, const Options& defaults,
    WithFlag with_flag) {
  for (const auto& p : matrices) {
    TORCH_CHECK(p.dim() == 2, rule, ": matrix parameters must be 2-D, got ",
                p.sizes());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(matrices),
                      std::make_unique<Options>(with_flag(defaults, true)));
  if (!others.empty()) {
    groups.emplace_back(std::move(others),
                        std::make_unique<Options>(with_flag(defaults, false)));
  }
  return groups;
}

}  // namespace optim
