// What every rule of this library is built on, and the two families that
// share more than that:
//  - ParamState: one parameter's step counter and named buffers, one type
//    for every rule, so that cloning, saving and loading are written once;
//  - StatefulOptimizer: the state map (keyed differently across LibTorch
//    releases, a string of the TensorImpl address in 1.13 and the address
//    itself in 2.x: this is the one place that knows), the per-parameter
//    step skeleton, and save / load of the whole state;
//  - HybridOptions / HybridOptimizer: a matrix rule on the hidden 2-D
//    weights, Adam on every other parameter (Muon and its descendants,
//    Shampoo, Scion);
//  - PooledAdamOptions / PooledAdam: Adam's moments with a denominator that
//    may read one scalar pooled over every parameter (scalar-Adam, the
//    Adam-p dial; docs/protocol.md §5.1).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace optim {

// An optimizer's hyperparameters as (name, value) pairs, in a fixed order:
// what a result record carries so that a resumed run can tell whether the
// rule it would run is the one that wrote the file. Flags are 0 / 1.
using Hparams = std::vector<std::pair<std::string, double>>;

// A rule whose weights to evaluate differ from the iterate it trains
// (schedule-free rules: the average x beside the gradient point y). The
// lockstep swaps every copy to its evaluation weights before a measurement
// and back to its training iterate after (docs/protocol.md §6); a rule
// without this interface is measured as it trains.
class EvaluationWeights {
 public:
  virtual ~EvaluationWeights() = default;
  // Whether this rule has evaluation weights at all.
  virtual bool has_evaluation_weights() const = 0;
  virtual void to_evaluation() = 0;  // the weights to measure
  virtual void to_training() = 0;    // back to the iterate to step
};

// ---------------------------------------------------------------------------
// Per-parameter state

class ParamState
    : public torch::optim::OptimizerCloneableParamState<ParamState> {
 public:
  int64_t step = 0;  // the rule's step counter (SOAP: calls, see soap.h)

  // The buffer `name`; throws naming it when the rule made none.
  torch::Tensor& at(std::string_view name);
  const torch::Tensor& at(std::string_view name) const;
  bool has(std::string_view name) const;
  // Makes or replaces the buffer `name`; returns it.
  torch::Tensor& set(const std::string& name, torch::Tensor value);
  const std::map<std::string, torch::Tensor, std::less<>>& buffers() const {
    return buffers_;
  }

  // LibTorch's per-state hooks: "step" and every buffer with its name.
  void serialize(torch::serialize::OutputArchive& archive) const override;
  void serialize(torch::serialize::InputArchive& archive) override;

 private:
  std::map<std::string, torch::Tensor, std::less<>> buffers_;
};

// ---------------------------------------------------------------------------
// The optimizer every rule derives from

class StatefulOptimizer : public torch::optim::Optimizer {
 public:
  // The whole state, every parameter's step and buffers, addressed by group
  // and position in the group rather than by tensor, so that an optimizer
  // built afresh on other tensors of the same shapes reads it back. The
  // groups' options are not part of it: they are the builder's (the run's
  // recorded hyperparameters).
  void save(torch::serialize::OutputArchive& archive) const override;
  // Replaces the state with the one `save` wrote (parameters it has no
  // state for start afresh); throws naming the counts when the groups or
  // their sizes differ from this optimizer's.
  void load(torch::serialize::InputArchive& archive) override;

 protected:
  using torch::optim::Optimizer::Optimizer;

  static auto state_key(const torch::Tensor& p) {
#if TORCH_VERSION_MAJOR < 2
    return c10::guts::to_string(p.unsafeGetTensorImpl());
#else
    return static_cast<void*>(p.unsafeGetTensorImpl());
#endif
  }

  // The state of `p`, filled by `init(state)` on first use.
  template <class Init>
  ParamState& state_for(const torch::Tensor& p, Init&& init) {
    auto key = state_key(p);
    auto it = state_.find(key);
    if (it == state_.end()) {
      auto s = std::make_unique<ParamState>();
      init(*s);
      it = state_.insert({key, std::move(s)}).first;
    }
    return static_cast<ParamState&>(*it->second);
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

// ---------------------------------------------------------------------------
// Adam, where a rule needs it

// TORCH_CHECKs of Adam's constructor: lr >= 0, eps >= 0, betas in [0, 1).
void check_adam_options(double lr, const std::tuple<double, double>& betas,
                        double eps);

// Adam's denominator sqrt(v / bias_correction2) + eps, as LibTorch's
// adam.cpp computes it.
torch::Tensor adam_denominator(const torch::Tensor& exp_avg_sq,
                               double bias_correction2, double eps);

// One step of LibTorch's torch::optim::Adam (no weight decay, no amsgrad),
// written op for op as its adam.cpp so that it is bitwise the same; `step`
// counts from 1.
void adam_update_(const torch::Tensor& p, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                  int64_t step, double lr, double beta1, double beta2,
                  double eps);

// Adam's moments m ("exp_avg") and v ("exp_avg_sq"), zero, shaped as p.
void start_adam_moments(ParamState& state, const torch::Tensor& p);

// The momentum of the Muon variants that follow PyTorch's Muon (NorMuon,
// AdaMuon, PyTorch-style Muon): the buffer moves toward the gradient in
// place, m <- m + (1 - momentum) (g - m), and the direction handed on is,
// with Nesterov, g + momentum (m - g), else m itself.
torch::Tensor muon_momentum_(const torch::Tensor& grad,
                             const torch::Tensor& momentum_buffer,
                             double momentum, bool nesterov);

// ---------------------------------------------------------------------------
// Options of a family: fields in a base class, setters typed as the rule's

// The base of a family's options: its setters return the rule's options
// (`Derived`), so that they chain as TORCH_ARG's do (a TORCH_ARG declared
// in the base would return the base).
template <class Derived>
struct ChainedOptions
    : public torch::optim::OptimizerCloneableOptions<Derived> {
 protected:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  template <class T, class V>
  Derived& set(T& field, V value) {
    field = std::move(value);
    return static_cast<Derived&>(*this);
  }
};

// ---------------------------------------------------------------------------
// The hybrid family: a matrix rule and the auxiliary Adam

// What a hybrid rule runs on its `others` group (embedding, positional,
// gains, head), as the reference MuonWithAuxAdam does.
struct AuxAdam {
  double lr = 1e-3;
  std::tuple<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
};

// The options of a hybrid rule: the matrix rule's step size, which rule a
// group takes, and the auxiliary Adam's fields; `Derived` adds its rule's
// own fields with `Hparams rule_hparams() const` (all but lr) and
// `void check() const` (TORCH_CHECKs naming the value). The setters chain
// as TORCH_ARG's do.
template <class Derived>
struct HybridOptions : public ChainedOptions<Derived> {
  using betas_t = std::tuple<double, double>;
  HybridOptions(double lr, AuxAdam adam) : lr_(lr), adam_(adam) {}

  double lr() const { return lr_; }  // the matrix rule's step size
  Derived& lr(double v) { return set(lr_, v); }
  bool matrix_rule() const { return matrix_rule_; }  // false: Adam
  Derived& matrix_rule(bool on) { return set(matrix_rule_, on); }
  double adam_lr() const { return adam_.lr; }
  Derived& adam_lr(double v) { return set(adam_.lr, v); }
  const betas_t& adam_betas() const { return adam_.betas; }
  Derived& adam_betas(betas_t v) { return set(adam_.betas, v); }
  double adam_eps() const { return adam_.eps; }
  Derived& adam_eps(double v) { return set(adam_.eps, v); }

  double get_lr() const override { return matrix_rule_ ? lr_ : adam_.lr; }
  void set_lr(const double lr) override {
    (matrix_rule_ ? lr_ : adam_.lr) = lr;
  }

  // Whether the record lists "weight_decay" 0 after Adam's fields: the
  // rules added with the optimizers in current use do (docs/protocol.md
  // §5.3), the protocol's muon and shampoo, whose records came first, not.
  static constexpr bool kRecordsWeightDecay = true;

  // The rule's hyperparameters, then adam_lr, adam_beta1, adam_beta2,
  // adam_eps (and weight_decay, see above).
  Hparams hparams() const {
    Hparams h = self().rule_hparams();
    h.insert(h.end(), {{"adam_lr", adam_.lr},
                       {"adam_beta1", std::get<0>(adam_.betas)},
                       {"adam_beta2", std::get<1>(adam_.betas)},
                       {"adam_eps", adam_.eps}});
    if (Derived::kRecordsWeightDecay)
      h.emplace_back("weight_decay", 0.0);
    return h;
  }

  // lr >= 0, the rule's own checks, then Adam's.
  void validate() const {
    TORCH_CHECK(lr_ >= 0, "Invalid learning rate: ", lr_);
    self().check();
    check_adam_options(adam_.lr, adam_.betas, adam_.eps);
  }

 private:
  using ChainedOptions<Derived>::self;
  using ChainedOptions<Derived>::set;

  double lr_;
  bool matrix_rule_ = true;
  AuxAdam adam_;
};

// A hybrid optimizer: group 0 holds the matrices (each 2-D), updated by the
// rule; group 1 (when there are others) takes Adam at adam_lr, adam_betas,
// adam_eps. Each group's options say which it gets (matrix_rule), in full,
// as per-group options replace the defaults whole. A rule gives the buffers
// a matrix starts with (`start`) and one step on a matrix (`update`, with
// the state's step already counted from 1).
template <class Options>
class HybridOptimizer : public StatefulOptimizer {
 public:
  torch::Tensor step(LossClosure closure = nullptr) override {
    return step_each<Options>(
        closure, [](const Options& options) { options.validate(); },
        [&](const torch::Tensor& p, Options& options) {
          ParamState& state = state_for(p, [&](ParamState& fresh) {
            if (options.matrix_rule()) {
              start(p, fresh, options);
            } else {
              start_adam_moments(fresh, p);
            }
          });
          state.step += 1;
          if (options.matrix_rule()) {
            update(p, p.grad(), state, options);
          } else {
            adam_update_(p, p.grad(), state.at("exp_avg"),
                         state.at("exp_avg_sq"), state.step, options.adam_lr(),
                         std::get<0>(options.adam_betas()),
                         std::get<1>(options.adam_betas()), options.adam_eps());
          }
        });
  }

 protected:
  // Throws naming `rule` for a matrix that is not 2-D, then for an invalid
  // option.
  HybridOptimizer(const char* rule, std::vector<torch::Tensor> matrices,
                  std::vector<torch::Tensor> others, const Options& defaults)
      : StatefulOptimizer(
            groups(rule, std::move(matrices), std::move(others), defaults),
            std::make_unique<Options>(defaults)) {
    defaults.validate();
  }

  virtual void start(const torch::Tensor& p, ParamState& state,
                     const Options& options) const = 0;
  virtual void update(const torch::Tensor& p, const torch::Tensor& grad,
                      ParamState& state, const Options& options) = 0;

 private:
  static std::vector<torch::optim::OptimizerParamGroup> groups(
      const char* rule, std::vector<torch::Tensor> matrices,
      std::vector<torch::Tensor> others, Options options) {
    for (const auto& p : matrices) {
      TORCH_CHECK(p.dim() == 2, rule, ": matrix parameters must be 2-D, got ",
                  p.sizes());
    }
    std::vector<torch::optim::OptimizerParamGroup> out;
    out.emplace_back(std::move(matrices),
                     std::make_unique<Options>(options.matrix_rule(true)));
    if (!others.empty()) {
      out.emplace_back(std::move(others),
                       std::make_unique<Options>(options.matrix_rule(false)));
    }
    return out;
  }
};

// ---------------------------------------------------------------------------
// The pooled family: Adam's moments, a denominator that may read the pool

// sqrt(sum_i sum(v_i) / bias_correction2_i / sum_i numel(v_i)), as a 0-dim
// tensor: the root mean of v_hat over every entry of every parameter, the
// pooled scalar of docs/protocol.md §5.1 before its eps.
torch::Tensor pooled_rms(const std::vector<torch::Tensor>& exp_avg_sqs,
                         const std::vector<double>& bias_corrections2);

// lr, betas and eps of a pooled rule, every one read per group; `Derived`
// adds `Hparams rule_hparams() const` (listed before betas and eps) and
// `void check() const`.
template <class Derived>
struct PooledAdamOptions : public ChainedOptions<Derived> {
  using betas_t = std::tuple<double, double>;
  explicit PooledAdamOptions(double lr) : lr_(lr) {}

  double lr() const { return lr_; }
  Derived& lr(double v) { return set(lr_, v); }
  const betas_t& betas() const { return betas_; }
  Derived& betas(betas_t v) { return set(betas_, v); }
  double eps() const { return eps_; }
  Derived& eps(double v) { return set(eps_, v); }

  double get_lr() const override { return lr_; }
  void set_lr(const double lr) override { lr_ = lr; }

  // The rule's hyperparameters, then beta1, beta2, eps.
  Hparams hparams() const {
    Hparams h = self().rule_hparams();
    h.insert(h.end(), {{"beta1", std::get<0>(betas_)},
                       {"beta2", std::get<1>(betas_)},
                       {"eps", eps_}});
    return h;
  }
  void validate() const {
    check_adam_options(lr_, betas_, eps_);
    self().check();
  }

 private:
  using ChainedOptions<Derived>::self;
  using ChainedOptions<Derived>::set;

  double lr_;
  betas_t betas_{0.9, 0.999};
  double eps_ = 1e-8;
};

// One step: pass 1 takes Adam's moments of every parameter with a gradient
// (each at its group's betas); the pooled root mean of v_hat spans them
// all; pass 2 moves each parameter by lr / (1 - beta1^t) m / denominator
// at its group's options. The pool stays a tensor: no host
// synchronisation.
template <class Options>
class PooledAdam : public StatefulOptimizer {
 public:
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    struct Item {
      torch::Tensor p;
      ParamState* state;
      const Options* options;
    };
    std::vector<Item> items;
    std::vector<torch::Tensor> sqs;
    std::vector<double> corrections;
    torch::Tensor loss = step_each<Options>(
        closure, [](const Options& options) { options.validate(); },
        [&](const torch::Tensor& p, Options& options) {
          ParamState& state = state_for(
              p, [&](ParamState& fresh) { start_adam_moments(fresh, p); });
          state.step += 1;
          const auto [beta1, beta2] = options.betas();
          const torch::Tensor& grad = p.grad();
          state.at("exp_avg").mul_(beta1).add_(grad, 1 - beta1);
          state.at("exp_avg_sq").mul_(beta2).addcmul_(grad, grad, 1 - beta2);
          items.push_back({p, &state, &options});
          sqs.push_back(state.at("exp_avg_sq"));
          corrections.push_back(1 - std::pow(beta2, state.step));
        });
    if (items.empty())
      return loss;
    const torch::Tensor rms = pooled_rms(sqs, corrections);
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      const double beta1 = std::get<0>(it.options->betas());
      const double bias_correction1 = 1 - std::pow(beta1, it.state->step);
      it.p.addcdiv_(it.state->at("exp_avg"),
                    denominator(sqs[i], corrections[i], rms, *it.options),
                    -it.options->lr() / bias_correction1);
    }
    return loss;
  }

 protected:
  PooledAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
             const Options& defaults)
      : StatefulOptimizer(std::move(groups),
                          std::make_unique<Options>(defaults)) {
    defaults.validate();
  }

  // The denominator of one parameter's step from its v, 1 - beta2^t and
  // the pooled root mean `rms` (0-dim, without eps).
  virtual torch::Tensor denominator(const torch::Tensor& exp_avg_sq,
                                    double bias_correction2,
                                    const torch::Tensor& rms,
                                    const Options& options) const = 0;
};

}  // namespace optim
