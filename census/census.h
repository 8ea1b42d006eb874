// The census (docs/results.md, "The census"): every optimizer the installed
// libraries register — torch.optim, pytorch-optimizer, timm, heavyball,
// torch-optimizer and the single-rule packages — read from each library's
// own registry when the census runs (census/census.py, in the bridge's
// interpreter), each with the class predicted for it before any
// measurement (bridge/predictions.tsv), resolved to the --opt name its
// records carry and, when probed, whether it runs here. A command hands
// catalogue() to the rooms that need it (twins/census_rule.h); nothing here is
// set from outside.
#pragma once

#include <string>
#include <vector>

#include "twins/census_rule.h"

namespace census {

// The rules, library by library in the census's order, aliases of one rule
// together, each that loads resolved (its canonical name in `opt`; one
// that does not resolve says why in cannot_run); only those `select`s
// (each "LIBRARY" or "LIBRARY:NAME", NAME one of the rule's registry names)
// when it is not empty — a library or name the census does not list, or
// one named twice, is a one-line error naming it. With `probe`, each rule
// that resolves is also trained for two steps on a one-block model
// (d_model 8, 2 heads, mod-11) through the protocol, and one that fails
// says why in cannot_run: the reason the bridge's conventions classify
// (needs CUDA, second-order gradients, torch.distributed, sparse
// gradients) or the error's first line. Listings and resolutions are kept
// for the process. Throws a one-line error without Python support.
std::vector<twins::CensusRule> rules(
    bool probe, const std::vector<std::string>& select = {});

// rules(false, select) as a catalogue for sweep's and report's requests;
// null in a program without Python support, which lists no census.
twins::CensusCatalogue catalogue();

}  // namespace census
