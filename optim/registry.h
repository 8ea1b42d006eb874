// The optimizer registry: name -> factory, hyperparameters and the class the
// theory predicts (docs/protocol.md §5). The app, the tables and the tests
// create every optimizer through it. This file is the mechanism; the
// built-in rules are the list in optim/builtins.cpp, the Adam-p dial's names
// are optim/adam_p_names.h. A user's rule is one entry in that list, or one
// register_optimizer() call made before the first use; a family of names
// decided at run time ("py:FILE:NAME") is one register_resolver() call
// (docs/extending.md). Learning rates depend on the task and live with the
// tasks' other defaults (twins/defaults.h), not here.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optim/adam_p_names.h"
#include "optim/base.h"

namespace optim {

// The hyperparameters of an options struct: its hparams(), or for
// LibTorch's own option types the fields its Adam / SGD read.
template <class Options>
Hparams hparams_of(const Options& options) {
  return options.hparams();
}
Hparams hparams_of(const torch::optim::AdamOptions& options);
Hparams hparams_of(const torch::optim::SGDOptions& options);

// What a parameter is in the model, for rules that treat kinds apart (a
// rule written elsewhere can ask for named groups).
// (attention W_Q, W_K, W_V, W_O; MLP W1, W2; then the rest).
enum class Role {
  kWq,
  kWk,
  kWv,
  kWo,
  kW1,
  kW2,
  kEmbedding,
  kPositional,
  kGain,
  kHead
};
const char* to_string(Role role);  // "wq", ..., "embedding", "gain", "head"

struct ParamRole {
  Role role;
  int64_t layer = -1;  // the block it belongs to; -1 outside the blocks
  bool operator==(const ParamRole& other) const {
    return role == other.role && layer == other.layer;
  }
};

// The parameters of one model, split the way hybrid rules need them.
struct ParamSplit {
  std::vector<torch::Tensor> matrices;  // hidden 2-D weights (Muon's set)
  std::vector<torch::Tensor> others;    // embedding, positional, gains, head
  // The W_Q and W_K weights of every layer (each also in `matrices`): their
  // rows come in `heads` blocks of d_model / heads rows, one per head, and
  // the gauge acts on each block from the left.
  std::vector<torch::Tensor> qk;
  int64_t heads = 1;  // attention heads per layer
  // One per entry of all(), in its order; empty when the caller gives none.
  std::vector<ParamRole> roles;

  std::vector<torch::Tensor> all() const;  // matrices, then others
  // The role of p (by tensor identity); nullopt when p is not here or the
  // split carries no roles.
  std::optional<ParamRole> role_of(const torch::Tensor& p) const;
};

// What the theory predicts for the attention-head gauge.
enum class Equivariance { kEquivariant, kBasisDependent };
const char* to_string(Equivariance equivariance);
// "none" for no prediction.
const char* to_string(const std::optional<Equivariance>& equivariance);

using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const ParamSplit& params, double lr)>;

struct OptimizerInfo {
  std::string name;        // what --opt takes
  std::string summary;     // one line for --list-optimizers
  // The class the theory predicts; none for a Python rule that states
  // none and that the census's predictions do not name.
  std::optional<Equivariance> predicted;
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
          [defaults, build](const ParamSplit& split, double lr) {
            Options options = defaults;
            options.lr(lr);
            return build(split, options);
          }};
}

// Adds an optimizer; throws if the name is taken, belongs to a resolver's
// prefix (below), or the entry is incomplete. Call it before the first run
// (e.g. first thing in main, or in a test). Returns true so that it can
// initialise a namespace-scope bool.
bool register_optimizer(OptimizerInfo info);

// A family of names resolved on first use. For a name that begins with its
// prefix and is not registered, `resolve(name)` returns the entry (named
// `name`), nullopt when the name denotes nothing, or throws naming the name
// when it is malformed. It is called without the registry's lock held, at
// most once per name that resolves: find_optimizer keeps the entry.
using Resolver =
    std::function<std::optional<OptimizerInfo>(const std::string& name)>;

// Adds a resolver for the names beginning with `prefix` ("py:", "torch:";
// the Adam-p dial's "adam-p" is one). Every longer name with that prefix is
// then reserved for it. Throws if the prefix is empty, if it or an existing
// prefix begins the other, or if a registered name would fall under it.
// Returns true, as register_optimizer does.
bool register_resolver(std::string prefix, Resolver resolve);

// A registered name, else an entry already resolved, else the entry of the
// resolver whose prefix begins the name. Throws "Unknown optimizer: 'x'
// (known: ...)" when none gives one, and passes on a resolver's error.
const OptimizerInfo& find_optimizer(const std::string& name);
bool has_optimizer(const std::string& name);  // find_optimizer would succeed
// Whether a resolver's prefix begins `name` (and `name` is longer): the
// name's family is known to this program. Resolves nothing.
bool has_resolver(const std::string& name);
std::vector<std::string> optimizer_names();   // registered, in order

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& name, const ParamSplit& params, double lr);

}  // namespace optim
