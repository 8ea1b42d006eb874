// `twin-run verdict`: for each optimizer the diagnostic triplet (gauge,
// identity, noise 1e-7) plus a 1e-5 noise twin, and one verdict line each
// (report/verdict.h has the rules).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "app/flags.h"

namespace app {

struct VerdictFlags {
  sweep::PlanRequest plan;        // task, steps, lr, dtype, device, shape
  std::vector<std::string> opts;  // --opt, comma-separated
  std::vector<double> adam_ps;    // --p: exponents of a bare adam-p
  uint64_t init_seed = 42;        // one base model per verdict
  EngineFlags engine;
};

void setup_verdict(CLI::App& app, VerdictFlags& flags);
int run_verdict(const VerdictFlags& flags);

}  // namespace app
