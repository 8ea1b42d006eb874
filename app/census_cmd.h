// `twin-run census`: the census's rules — every optimizer of the installed
// libraries (census/census.h) with its predicted class and, with --probe,
// whether it runs here.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace app {

struct CensusFlags {
  bool probe = false;  // --probe: train each rule two steps on a tiny model
  std::string library;  // --library: only its rules
};

CLI::App* setup_census(CLI::App& parent, CensusFlags& flags);
int run_census(const CensusFlags& flags);

}  // namespace app
