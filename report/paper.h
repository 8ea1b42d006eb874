// The paper's numbers (docs/protocol.md §7), one entry per figure a table
// reports, with the words the paper states them in.
#pragma once

#include <cmath>
#include <string>

namespace report {

// The paper's value: one number (lo == hi), a range, or a bound; `text` is
// how the paper states it ("3.4–5.4e-3", "≤ 3.7e-4", "662x (claim > 600x)").
struct PaperValue {
  double lo = std::nan("");
  double hi = std::nan("");
  std::string text;  // empty: the paper has no such figure
};

// The value of figure `id` ("table3/adam/gauge/1",
// "multiseed/structural-ratio", "table9/mod47-2L-d64/onset", ...); empty
// when the paper has none.
PaperValue paper(const std::string& id);

}  // namespace report
