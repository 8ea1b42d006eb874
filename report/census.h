// The census's aggregate (docs/results.md, "The census"): one row per rule
// of the installed optimizer libraries — its library and version, its
// registry names, the class predicted for it before any measurement and
// the verdict measured on its five twins (report/verdict.h), the onset
// ratios at steps 1, 10 and the last, the identity twin, whether it
// trained and at which rate — or why it cannot run here; then the counts
// per verdict, per library and per reason.
//
// The rules and their predictions are the census's catalogue rows
// (census/census.h), which a command hands over with the census table's
// job list (Expected::census); records aggregated without them are shown
// with what the records hold.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/aggregate.h"

namespace report {

// The census section: one row per rule of `in.census` (of the rules its
// records name when it has none).
std::optional<Section> census_section(const Inputs& in);

// One judged rule of the census figure (report/plot.h, plot_census).
struct CensusPoint {
  std::string library;  // "timm 1.0.31"
  std::string rule;     // its first registry name
  std::string verdict;  // equivariant, basis-dependent, or another label
  std::string predicted;  // on the Table-3 model; empty when unknown
  double separation = 0;  // the verdict's: gauge / round trip
  std::string dtype;      // the records' ("float32", "float64")
};

// Every rule the records judge (failed ones left out), in the order of
// `census`'s rows (of the records when it has none).
std::vector<CensusPoint> census_points(
    const Records& all, const std::vector<twins::CensusRule>& census);

}  // namespace report
