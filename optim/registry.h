// The optimizer registry: name -> factory, hyperparameters and the class the
// theory predicts (docs/protocol.md §5). The app, the tables and the tests
// create every optimizer through it. The built-in rules are listed in
// optim/registry.cpp (add_builtins); a user's rule is one entry there, or one
// register_optimizer() call made before the first use (docs/extending.md).
// Learning rates depend on the task and live with the tasks' other defaults
// (twins/defaults.h), not here.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optim/base.h"

namespace optim {

// The hyperparameters of an options struct: its hparams(), or for
// LibTorch's own option types the fields its Adam / SGD read.
template <class Options>
Hparams hparams_of(const Options& o) {
  return o.hparams();
}
Hparams hparams_of(const torch::optim::AdamOptions& o);
Hparams hparams_of(const torch::optim::SGDOptions& o);

// The parameters of one model, split the way hybrid rules need them.
struct ParamSplit {
  std::vector<torch::Tensor> matrices;  // hidden 2-D weights (Muon's set)
  std::vector<torch::Tensor> others;    // embedding, positional, gains, head
  // The W_Q and W_K weights of every layer (each also in `matrices`): their
  // rows come in `heads` blocks of d_model / heads rows, one per head, and
  // the gauge acts on each block from the left.
  std::vector<torch::Tensor> qk;
  int64_t heads = 1;  // attention heads per layer
  std::vector<torch::Tensor> all() const;
};

// What the theory predicts for the attention-head gauge.
enum class Equivariance { kEquivariant, kBasisDependent };
const char* to_string(Equivariance e);

using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const ParamSplit& params, double lr)>;

struct OptimizerInfo {
  std::string name;        // what --opt takes
  std::string summary;     // one line for --list-optimizers
  Equivariance predicted;  // the class the theory predicts
  Hparams hparams;         // every hyperparameter `make` uses but lr
  Factory make;            // builds the optimizer at a given lr
  // The learning rate on every task when the learning-rate table
  // (twins/defaults.cpp) has no row for this name; 0: none (pass --lr).
  double lr = 0;
};

// An entry whose factory and recorded hyperparameters come from the same
// options: `defaults` (any lr) with lr replaced, handed to `build`.
template <class Options, class Build>
OptimizerInfo make_entry(std::string name, std::string summary,
                         Equivariance predicted, const Options& defaults,
                         Build build) {
  return {std::move(name), std::move(summary), predicted, hparams_of(defaults),
          [defaults, build](const ParamSplit& p, double lr) {
            Options o = defaults;
            o.lr(lr);
            return build(p, o);
          }};
}

// Adds an optimizer; throws if the name is taken or the entry incomplete.
// Call it before the first run (e.g. first thing in main, or in a test).
// Returns true so that it can initialise a namespace-scope bool.
bool register_optimizer(OptimizerInfo info);

// Throws "Unknown optimizer: 'x' (known: ...)" for a name not registered.
const OptimizerInfo& find_optimizer(const std::string& name);
bool has_optimizer(const std::string& name);
std::vector<std::string> optimizer_names();  // registration order

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& name, const ParamSplit& params, double lr);

// The Adam-p family (paper §7, optim/adam_p.h): "adam-p<p>" names the dial
// at p in [0, 1] (adam-p0.5, adam-p0.125, adam-p1e-3); find_optimizer
// builds such an entry on first use (predicted equivariant only at p = 0).
// The bare "adam-p" is the listed entry and runs at kDefaultAdamP.
constexpr double kDefaultAdamP = 0.5;

// "adam-p" + the shortest decimal spelling of p: adam_p_name(0.5) ==
// "adam-p0.5". Throws for p outside [0, 1].
std::string adam_p_name(double p);

// The exponent an Adam-p name runs at (kDefaultAdamP for bare "adam-p"),
// nullopt for a name outside the family; throws naming the name for a
// malformed "adam-p..." or p outside [0, 1].
std::optional<double> adam_p_exponent(const std::string& name);

// The optimizer names a run records, from what the user gave: each bare
// "adam-p" becomes adam_p_name(p) for every p of `ps` (kDefaultAdamP when
// `ps` is empty), "adam-p<p>" its canonical spelling (adam-p0.50 ->
// adam-p0.5), every other name is checked to exist. Throws for an unknown
// name, for p outside [0, 1], and when `ps` is given but no bare "adam-p"
// takes it (--p).
std::vector<std::string> resolve_optimizer_names(
    const std::vector<std::string>& names, const std::vector<double>& ps = {});

}  // namespace optim
