#include "sweep/optimizer_lists.h"

#include <c10/util/Exception.h>

#include "optim/registry.h"

namespace sweep {

std::vector<std::string> zoo_optimizers() {
  return {"adam",   "sgd",  "scalar-adam", "muon",    "rmsprop",
          "signum", "lion", "adafactor",   "shampoo", "adam-p0.5"};
}

std::vector<std::string> modern_optimizers() {
  return {"soap",       "soap-right",   "adam-mini",    "normuon",
          "adamuon",    "scion-col",    "scion-row",    "shampoo-graft",
          "muon-torch", "cautious-sgd", "cautious-adam"};
}

namespace {

// The torch-zoo's first rule, torch.optim.Adam at its rate.
constexpr char kTorchAdam[] = R"(torch:Adam{"lr":0.001})";

}  // namespace

bool runs_torch_rules() {
  // Asks the registry only: resolving a name would start Python and import
  // torch (seconds), which every twin-run would then pay for its table
  // list.
  return optim::has_resolver(kTorchAdam);
}

std::vector<std::string> torch_optimizers() {
  // Canonical names (keys sorted, no spaces): lr is each one's rate on the
  // Table-3 model, chosen so that it trains (docs/results.md lists the
  // rates tried).
  std::vector<std::string> names = {kTorchAdam,
          R"(torch:AdamW{"lr":0.001,"weight_decay":0})",
          R"(torch:NAdam{"lr":0.001})",
          R"(torch:RAdam{"lr":0.001})",
          R"(torch:Adamax{"lr":0.002})",
          R"(torch:Adagrad{"lr":0.01})",
          R"(torch:Adadelta{"lr":1.0})",
          R"(torch:RMSprop{"lr":0.001})",
          R"(torch:Rprop{"lr":0.001})",
          R"(torch:ASGD{"lr":2.0})",
          R"(torch:SGD{"lr":0.5})",
          R"(torch:SGD{"lr":0.5,"momentum":0.9})",
          R"(torch:SGD{"lr":0.5,"momentum":0.9,"nesterov":true})"};
  // torch.optim.Muon (PyTorch 2.9+) where the Python's torch has it: at its
  // default rate, the hidden matrices to Muon and the rest to Adam at 1e-3
  // (docs/extending.md), as the zoo's muon-torch.
  const std::string muon = R"(torch:Muon{"lr":0.001})";
  if (optim::has_resolver(muon)) {
    try {
      optim::find_optimizer(muon);
      names.push_back(muon);
    } catch (const c10::Error&) {
      // an older torch: the table is the thirteen above
    }
  }
  return names;
}

std::vector<double> dial_exponents() {
  return {0, 0.125, 0.25, 0.5, 0.75, 1};
}

}  // namespace sweep
