// The names of the Adam-p dial (paper §7, optim/adam_p.h): "adam-p<p>" names
// the dial at p in [0, 1] (adam-p0.5, adam-p0.125, adam-p1e-3); the registry
// builds such an entry on first use (a resolver for the prefix "adam-p",
// optim/builtins.cpp), predicted equivariant only at p = 0. The bare
// "adam-p" is the listed entry and runs at kDefaultAdamP.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace optim {

constexpr char kAdamPPrefix[] = "adam-p";
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
