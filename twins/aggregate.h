// From a table's PairResults to the figures the paper reports (PROTOCOL §6
// derived statistics, §7 numbers), each with the paper's value beside it;
// written as Markdown (what a person reads) and CSV (one figure per row).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "twins/pair.h"
#include "twins/tables.h"

namespace twins {

// How a figure is printed.
enum class Unit {
  kDrift,     // relative distance: 0, 0.77, 3.6e-3
  kRatio,     // 662x
  kDecades,   // 0.04
  kAccuracy,  // 0.4020
};

// The paper's value: one number (lo == hi), a range, or a bound; `text` is
// how the paper states it ("3.4–5.4e-3", "≤ 3.7e-4", "662x (claim > 600x)").
struct PaperValue {
  double lo = std::nan("");
  double hi = std::nan("");
  std::string text;  // empty: the paper has no such figure
};

// One measured figure: a value (lo == hi) or a min–max range over `n` pairs.
struct Figure {
  double lo = std::nan("");
  double hi = std::nan("");
  int n = 0;  // pairs behind it; 0: not measured (missing pairs)
  Unit unit = Unit::kDrift;
  PaperValue paper;
  std::string text() const;  // "–" when not measured
};

struct Section {
  struct Row {
    std::vector<std::string> labels;  // one per label column
    std::vector<Figure> figures;      // one per figure column
  };
  std::string id;  // table3, table3-extra, ...
  std::string title;
  std::vector<std::string> label_columns;  // e.g. optimizer, twin
  std::vector<std::string> columns;        // e.g. step 0, step 1, ...
  std::vector<Row> rows;
  // true: the paper's values get their own column (one figure column);
  // false: "measured [paper]" in each cell.
  bool paper_column = false;
  std::vector<std::string> notes;
};

struct Aggregate {
  Layout layout = Layout::kTable3;
  std::string title;
  std::vector<std::string> notes;  // configuration, missing pairs, ...
  std::vector<Section> sections;
  std::string pairs_table;  // format_drift_table of every pair
};

// Aggregates `results` in `layout`. `tables`, when given, are the job lists
// the results belong to: their titles, their deviations from the paper's
// configuration and the pairs the results still lack become notes. The
// output does not depend on the order of `results` (job-list order first,
// then by key).
Aggregate aggregate(Layout layout, const std::vector<PairResult>& results,
                    const std::vector<Table>& tables = {});

// The figure at (section id, row labels joined by ' ', column), or null.
const Figure* find_figure(const Aggregate& a, const std::string& section,
                          const std::string& row, const std::string& column);

std::string to_markdown(const Aggregate& a);
// Header: section,row,column,n,measured_min,measured_max,paper_min,
// paper_max,paper (numbers at full precision, empty when absent).
std::string to_csv(const Aggregate& a);

// "Adam", "SGD", "scalar-Adam", "Muon"; other names unchanged.
std::string display_name(const std::string& opt);

// A noise scale as the paper writes it: 1e-7, 3e-6, 0.001.
std::string format_scale(double scale);

}  // namespace twins
