// The optimizer registry: name -> factory, default learning rates and the
// class the theory predicts (paper §4-5). The app, the tables and the tests
// create every optimizer through it, so a user's optimizer added with one
// register_optimizer() call is available everywhere by name.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace optim {

// The parameters of one model, split the way hybrid rules need them.
struct ParamSplit {
  std::vector<torch::Tensor> matrices;  // hidden 2-D weights (Muon's set)
  std::vector<torch::Tensor> others;    // embedding, positional, gains, head
  std::vector<torch::Tensor> all() const;
};

// What the theory predicts for the attention-head gauge.
enum class Equivariance { kEquivariant, kBasisDependent };
const char* to_string(Equivariance e);

using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const ParamSplit& params, double lr)>;

struct OptimizerInfo {
  std::string name;         // what --opt takes
  std::string summary;      // one line for --list-optimizers
  Equivariance predicted;   // the class the theory predicts
  double lr_mod = 0;        // default learning rate on mod<p>
  double lr_charlm = 0;     // default learning rate on charlm
  Factory make;             // builds the optimizer at a given lr
};

// Adds an optimizer; throws if the name is taken or the entry incomplete.
// Returns true so that it can initialise a namespace-scope bool.
bool register_optimizer(OptimizerInfo info);

// Throws "Unknown optimizer: 'x' (known: ...)" for a name not registered.
const OptimizerInfo& find_optimizer(const std::string& name);
bool has_optimizer(const std::string& name);
std::vector<std::string> optimizer_names();  // registration order

// Default learning rate of `name` for a task family ("mod" or "charlm").
double default_lr(const std::string& name, const std::string& family);

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& name, const ParamSplit& params, double lr);

}  // namespace optim
