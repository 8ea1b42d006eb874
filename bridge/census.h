// The census's rules (docs/results.md, "The census"): every optimizer the
// installed libraries register — torch.optim, pytorch-optimizer, timm,
// heavyball, torch-optimizer and the single-rule packages — read from each
// library's own registry when the census runs (bridge/census.py), each with
// the class predicted for it before any measurement
// (bridge/census_predictions.tsv) and, when probed, whether it runs here.
#pragma once

#include <string>
#include <vector>

namespace bridge {

struct CensusRule {
  std::string library;  // the distribution, as the predictions name it
  std::string version;  // installed; empty when it is not
  std::vector<std::string> aliases;  // registry names of this one rule
  std::string rule;        // what --opt takes; empty for a missing library
  // The canonical --opt name `rule` resolves to (the name its records
  // carry), set by census_rules when it resolves; empty when it cannot run.
  std::string opt;
  std::string definition;  // the class and the defaults it is built with
  // The prediction: class (equivariant, basis-dependent, distribution,
  // shape), what it means on the Table-3 model, its one-line reason and
  // the source line it rests on; empty where the predictions have no row
  // (a rule newer than them).
  std::string predicted, table3, reason, decided_by;
  // Why it cannot run here ("not installed", "cannot run here: needs
  // CUDA (…)", "raises at step 1: …"); empty when it can.
  std::string cannot_run;
};

// The rules, library by library in the census's order, aliases of one rule
// together, each that loads resolved (its canonical name in `opt`; one
// that does not resolve says why in cannot_run); only those `select`s
// (each "LIBRARY" or "LIBRARY:NAME", NAME one of the rule's registry names)
// when it is not empty — a library or name the census does not list is a
// one-line error naming what it does. With `probe`, each rule that
// resolves is also trained for two steps on a one-block model (d_model 8,
// 2 heads, mod-11) through the protocol, and one that fails says why in
// cannot_run: the reason conventions.py classifies (needs CUDA,
// second-order gradients, torch.distributed, sparse gradients) or the
// error's first line. Throws a one-line error without Python support.
std::vector<CensusRule> census_rules(
    bool probe, const std::vector<std::string>& select = {});

}  // namespace bridge
