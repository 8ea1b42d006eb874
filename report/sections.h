// The sections and record tests the list of layouts (report/layouts.cpp)
// is made of: the paper's tables in paper_layouts.cpp, the diagnostics
// beyond the paper in diagnostic_layouts.cpp. Each builder reads records
// in canonical order (report::aggregate) and returns its section, or none.
#pragma once

#include <optional>

#include "report/aggregate.h"

namespace report {

// paper_layouts.cpp
std::optional<Section> table3_section(const Records& all);
std::optional<Section> table3_extra_section(const Records& all);
std::optional<Section> multiseed_section(const Records& all);
std::optional<Section> table9_section(const Records& all);
bool several_init_seeds(const Records& all);
bool all_float64(const Records& all);

// diagnostic_layouts.cpp
std::optional<Section> zoo_section(const Records& all);
std::optional<Section> dial_section(const Records& all);
std::optional<Section> merge_section(const Records& all);
bool all_adam_p_gauge(const Records& all);
bool all_merged(const Records& all);

}  // namespace report
