// The adapter: a torch::optim::Optimizer whose step() is a Python
// optimizer's. The Python object is built on the very parameter tensors the
// C++ model owns (wrapped, not copied), so the Python rule updates them in
// place, and it is built, stepped and destroyed with the GIL held; the GIL
// is taken only around those calls, so the C++ forward and backward passes
// (autograd will not run under a held GIL) and the other copy's Python step
// proceed meanwhile.
//
// The parameter groups the rule receives, one per tensor, in the order of
// optim::ParamSplit::all() (the hidden matrices layer by layer, then the
// others), each a dict with "params" (one tensor) and, from the split's
// roles (twins::param_split):
//   "name"   layers.<l>.wq | .wk | .wv | .wo | .w1 | .w2, layers.<l>.norm1,
//            layers.<l>.norm2, embedding, positional, norm_f, head
//   "role"   wq, wk, wv, wo, w1, w2, embedding, positional, gain, head
//   "layer"  the layer index, or None (embedding, positional, norm_f, head)
//   "matrix" True for the hidden 2-D weights wq..w2 (Muon's set)
// and on wq, wk, wv, wo (d_model x d_model):
//   "heads", "head_dim"   heads per layer and rows per head
//   "head_rows"           [(h * head_dim, (h + 1) * head_dim) for each head
//                         h]: head h's rows of wq, wk, wv (its columns of wo)
//   "gauge"               True on wq and wk: the gauge rotates each head's
//                         row block of both by the same A_h (docs/protocol.md
//                         §2)
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optim/base.h"
#include "optim/registry.h"

namespace bridge {

struct Rule;  // how to build the Python object (python.h)

// One parameter group as the rule receives it (see the top of this file).
struct ParamGroupInfo {
  torch::Tensor param;
  std::string name;      // layers.0.wq, embedding, norm_f, ...
  std::string role;      // wq, wk, wv, wo, w1, w2, embedding, positional,
                         // gain, head
  int64_t layer = -1;    // -1: not in a layer (None in Python)
  bool matrix = false;   // a hidden 2-D weight
  int64_t heads = 0;     // wq, wk, wv, wo: heads per layer; else 0
  int64_t head_dim = 0;  // wq, wk, wv, wo: rows (wo: columns) per head
  bool gauge = false;    // wq, wk: the gauge rotates its head row blocks
};

// The registry entry of `rule`: its factory builds a PythonOptimizer,
// `hparams` and `predicted` as given, lr the default learning rate (0:
// none).
optim::OptimizerInfo rule_info(std::shared_ptr<const Rule> rule,
                               std::string summary,
                               std::optional<optim::Equivariance> predicted,
                               optim::Hparams hparams, double lr);

// The groups of `params`, one per entry of params.all(), named from
// params.roles (a layer's first gain is its norm1, the second its norm2).
// Throws when the split carries no roles or a layer lacks one of its six
// matrices.
std::vector<ParamGroupInfo> param_groups(const optim::ParamSplit& params);

// The options of the one parameter group the C++ side sees: the rate the
// rule was built with (the Python groups hold its hyperparameters).
struct PythonOptimizerOptions
    : public torch::optim::OptimizerCloneableOptions<PythonOptimizerOptions> {
  explicit PythonOptimizerOptions(double lr = 0) : lr_(lr) {}
  TORCH_ARG(double, lr);
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// The rule is built and stepped through bridge/adapter.py: as its
// library expects (closures, train() / eval(), group flags, named
// parameters), isolated from the process's global torch state, with a
// random stream of its own (the same in both copies of a pair), and checked
// after each step (docs/extending.md).
class PythonOptimizer : public torch::optim::Optimizer,
                        public optim::EvaluationWeights {
 public:
  // Builds `rule` on the named groups of `params` (the parameters of one
  // model::Transformer, in param_split's order) at `lr`. Throws a one-line
  // error naming the rule when it rejects them.
  PythonOptimizer(std::shared_ptr<const Rule> rule,
                  const optim::ParamSplit& params, double lr);
  ~PythonOptimizer() override;

  // The Python step(closure) where the rule takes a closure, else step().
  // The closure is the caller's (the lockstep's: it re-evaluates the loss
  // and gradients of the step's batch when the rule has moved the
  // parameters, twins/pair.cpp), run in C++ without the GIL; it may be
  // called only during this step. A Python exception becomes a one-line
  // error naming the rule, the step (counted from 1) and the exception; a
  // step still running after a stop signal's grace is interrupted and
  // throws twins::Stopped (bridge/rule_call.h).
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Schedule-free rules: eval() and train() (optim::EvaluationWeights).
  bool has_evaluation_weights() const override;
  void to_evaluation() override;
  void to_training() override;

  // The whole state: the rule's state_dict() (torch.save'd bytes: every
  // buffer and step of torch.optim's own rules, and the groups' options),
  // its random stream and the step count. Attributes a rule keeps outside
  // its state_dict() are not part of it. A fresh adapter of the same rule
  // on other tensors of the same shapes load()s it and continues as the
  // saved one would have; a Python error (a layout that differs:
  // load_state_dict's ValueError) is a one-line error naming the rule.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  int64_t steps() const { return steps_; }

 private:
  struct State;  // the Python optimizer, touched only under the GIL
  // Calls adapter.Adapter.`method` (what the rule calls it: `what`),
  // turning a Python error into a one-line error naming the rule.
  void call_rule(const char* method, const char* what);
  std::shared_ptr<const Rule> rule_;
  std::unique_ptr<State> state_;
  int64_t steps_ = 0;
};

}  // namespace bridge
