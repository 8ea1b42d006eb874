// The list of layouts: every kind of table the tool aggregates, one row
// each. A new kind is a row here (and its sections in paper_layouts.cpp or
// diagnostic_layouts.cpp); sweep/tables.cpp names the row of each table.
#include <fmt/format.h>

#include "report/census.h"
#include "report/gauges.h"
#include "report/plot.h"
#include "report/sections.h"

namespace report {

namespace {

bool any_records(const Records&) {
  return true;
}

}  // namespace

// From the general to the particular: records that name no table get the
// last layout whose test holds (an adam-p float64 set is the dial's, not
// Table 9's; any set is at least Table 3's).
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> kLayouts = {
      {"table3",
       "Table 3 layout",
       {table3_section, table3_extra_section},
       {&kDriftPlot},
       any_records},
      {"multiseed",
       "Appendix D.5 multi-seed summary",
       {multiseed_section},
       {&kDriftPlot},
       several_init_seeds},
      {"table9",
       "Table 9: twin drift at scale and on real text, float64",
       {table9_section},
       {&kDriftPlot},
       all_float64},
      {"zoo",
       "Optimizer zoo: equivariance verdicts",
       {zoo_section},
       {&kDriftPlot},
       nullptr},
      {"gauges",
       "The gauges of the attention people train: verdicts per gauge",
       {gauges_section},
       {&kDriftPlot},
       nullptr},
      {"dial",
       "Adam-p dial inside attention",
       {dial_section},
       {&kDriftPlot, &kDialPlot},
       all_adam_p_gauge},
      {"census",
       "The census: every optimizer of the installed libraries",
       {census_section},
       {&kCensusPlot},
       nullptr},
      // The merge figure only: saved pairs measured again have no curves.
      {"merge",
       "Head merging: loss barriers between the twins",
       {merge_section},
       {&kMergePlot},
       all_merged},
  };
  return kLayouts;
}

const Layout& parse_layout(const std::string& name) {
  std::vector<std::string> known;
  for (const Layout& l : layouts()) {
    if (l.name == name) {
      return l;
    }
    known.push_back(l.name);
  }
  TORCH_CHECK(false, "Unknown table layout: '", name,
              "' (known: ", join(known, ", "), ")");
}

const Layout& infer_layout(const Records& results) {
  const std::vector<Layout>& all = layouts();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->fits && it->fits(results)) {
      return *it;
    }
  }
  return all.front();
}

}  // namespace report
