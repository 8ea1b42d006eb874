// The sections and record tests the list of layouts (report/layouts.cpp)
// is made of: the paper's tables in paper_layouts.cpp, the diagnostics
// beyond the paper in diagnostic_layouts.cpp. Each builder reads records
// in canonical order (report::aggregate) and returns its section, or none.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/aggregate.h"

namespace report {

// An empty section with its header: id, title, label and figure columns;
// the paper's value in brackets in each cell.
inline Section section_of(std::string id, std::string title,
                          std::vector<std::string> label_columns,
                          std::vector<std::string> columns) {
  Section s;
  s.id = std::move(id);
  s.title = std::move(title);
  s.label_columns = std::move(label_columns);
  s.columns = std::move(columns);
  return s;
}

// An empty list of statistics, one figure a row under `label`, the paper's
// value in a column of its own.
inline Section statistics_section(std::string id, std::string title,
                                  std::string label) {
  Section s = section_of(std::move(id), std::move(title), {std::move(label)},
                         {"measured"});
  s.paper_column = true;
  return s;
}

// paper_layouts.cpp
std::optional<Section> table3_section(const Inputs& in);
std::optional<Section> table3_extra_section(const Inputs& in);
std::optional<Section> multiseed_section(const Inputs& in);
std::optional<Section> table9_section(const Inputs& in);
bool several_init_seeds(const Records& all);
bool all_float64(const Records& all);

// diagnostic_layouts.cpp
std::optional<Section> zoo_section(const Inputs& in);
std::optional<Section> dial_section(const Inputs& in);
std::optional<Section> merge_section(const Inputs& in);
bool all_adam_p_gauge(const Records& all);
bool all_merged(const Records& all);

}  // namespace report
