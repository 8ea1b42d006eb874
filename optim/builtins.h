// The rules this library ships and the name families it resolves on first
// use; the registry (optim/registry.cpp) adds both before its first use.
#pragma once

#include <string>
#include <vector>

#include "optim/registry.h"

namespace optim {

// In the order --list-optimizers prints them.
std::vector<OptimizerInfo> builtin_optimizers();

struct NameFamily {
  std::string prefix;
  Resolver resolve;
};
std::vector<NameFamily> builtin_name_families();

}  // namespace optim
