// The census's aggregate (docs/results.md, "The census"): one row per rule
// of the installed optimizer libraries — its library and version, its
// registry names, the class predicted for it before any measurement and
// the verdict measured on its five twins (report/verdict.h), the onset
// ratios at steps 1, 10 and the last, the identity twin, whether it
// trained and at which rate — or why it cannot run here; then the counts
// per verdict, per library and per reason.
//
// The rules and their predictions come from Python (bridge/census.h),
// which registers them here; records aggregated without it (a twin-run
// without Python support) are shown with what the records hold.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "report/aggregate.h"

namespace report {

// One rule of the census, as the bridge lists it.
struct CensusEntry {
  std::string library;               // the distribution ("timm")
  std::string version;               // installed
  std::vector<std::string> aliases;  // its registry names
  std::string opt;  // the canonical --opt name its records carry
  // The predicted class (equivariant, basis-dependent, shape,
  // distribution), what it means on the Table-3 model (equivariant or
  // basis-dependent) and the one-line reason; empty for a rule newer than
  // the predictions.
  std::string predicted, table3, reason;
  // Why it cannot be run here ("cannot run here: needs CUDA (…)", "does not
  // load (…)", "not installed"); empty when it is in the job list.
  std::string cannot_run;
};

using CensusSource = std::function<std::vector<CensusEntry>()>;

// The census's rules for the section below (the bridge, when a program
// runs Python rules).
void set_census_source(CensusSource source);

// The census section: records in canonical order.
std::optional<Section> census_section(const Records& all);

// One judged rule of the census figure (report/plot.h, plot_census).
struct CensusPoint {
  std::string library;  // "timm 1.0.31"
  std::string rule;     // its first registry name
  std::string verdict;  // equivariant, basis-dependent, or another label
  std::string predicted;  // on the Table-3 model; empty when unknown
  double separation = 0;  // the verdict's: gauge / round trip
  std::string dtype;      // the records' ("float32", "float64")
};

// Every rule the records judge (failed ones left out), in the census's
// order.
std::vector<CensusPoint> census_points(const Records& all);

}  // namespace report
