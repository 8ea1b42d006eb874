// The optimizer lists of the tables (sweep/tables.h): the zoo's, the
// modern zoo's, torch.optim's, and the Adam-p dial's exponents.
#pragma once

#include <string>
#include <vector>

namespace sweep {

// The zoo's optimizers: adam, sgd, scalar-adam, muon, rmsprop, signum,
// lion, adafactor, shampoo, adam-p0.5.
std::vector<std::string> zoo_optimizers();

// The optimizers in current use (table zoo-modern, docs/protocol.md §5.3):
// soap, soap-right, adam-mini, normuon, adamuon, scion-col, scion-row,
// shampoo-graft, muon-torch, cautious-sgd, cautious-adam.
std::vector<std::string> modern_optimizers();

// torch.optim's own optimizers (table torch-zoo, docs/results.md), as
// canonical Python rule names with their rates: Adam, AdamW (weight decay
// 0), NAdam, RAdam, Adamax, Adagrad, Adadelta, RMSprop, Rprop, ASGD, SGD
// plain, heavy-ball and Nesterov. The table exists only in a program whose
// registry resolves them (optim::has_resolver: twin-run with Python).
// Listing them may start Python (torch.optim.Muon is probed for).
std::vector<std::string> torch_optimizers();

// Whether this program resolves the torch-zoo's rules, asked of the
// registry without starting Python.
bool runs_torch_rules();


// The dial's exponents: {0, 0.125, 0.25, 0.5, 0.75, 1}.
std::vector<double> dial_exponents();

}  // namespace sweep
