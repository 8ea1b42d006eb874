// The paper's named job sets (PROTOCOL §7): Table 3, the D.5 multi-seed
// summary and the four rows of Table 9, each a fixed list of PairSpecs plus
// the layout its aggregation uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "twins/spec.h"

namespace twins {

// How a table's results are summarised (twins/aggregate.h).
enum class Layout {
  kTable3,     // drift at steps 0 / 1 / 100 / last per (optimizer, twin) row
  kMultiSeed,  // D.5: ranges over seeds, structural ratio, Muon chaos metric
  kTable9,     // one row per configuration: onset ratio, equivariant floor
  kZoo,        // issue 6: per optimizer, predicted class against the verdict
  kDial,       // issue 6: Adam-p gauge drift against the exponent p
};
const char* to_string(Layout layout);
// "table3", "multiseed", "table9", "zoo", "dial"; throws naming the value
// otherwise.
Layout parse_layout(const std::string& name);

// What `twin-run table` lets a user change for a quick look. Zero / empty
// means the paper's value.
struct TableOverrides {
  int64_t steps = 0;
  std::string device;  // empty: cpu
  std::string dtype;   // empty: the table's (float32 or float64)
};

struct Table {
  std::string name;  // table3, multiseed, table9-mod47, ...
  Layout layout = Layout::kTable3;
  std::string title;            // one line: what the paper calls it
  std::vector<PairSpec> pairs;  // the job list, in a fixed order
  // Ways this job list differs from the paper's ("steps 50 (paper: 1500)");
  // empty for the paper's configuration.
  std::vector<std::string> deviations;
};

// table3, multiseed, table9-mod47, table9-mod97-4L, table9-mod97-6L,
// table9-charlm, and beyond the paper zoo and dial (twins/verdict.h).
std::vector<std::string> table_names();

// The job list of `name` with `overrides` applied. Throws "Unknown table:
// 'x' (known: ...)" and the one-line errors of twins::expand.
Table make_table(const std::string& name, const TableOverrides& overrides = {});

// The overrides that reproduce `spec`'s steps / device / dtype against
// table `name`'s defaults (to rebuild a table's job list from its records).
TableOverrides overrides_of(const std::string& name, const PairSpec& spec);

}  // namespace twins
