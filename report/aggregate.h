// From a table's PairResults to the figures the paper reports
// (docs/protocol.md §6 derived statistics, §7 numbers), each with the
// paper's value beside it; written as Markdown (what a person reads) and
// CSV (one figure per row).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "report/paper.h"
#include "twins/result.h"

namespace report {

// How a table's results are summarised.
enum class Layout {
  kTable3,     // drift at steps 0 / 1 / 100 / last per (optimizer, twin) row
  kMultiSeed,  // D.5: ranges over seeds, structural ratio, Muon chaos metric
  kTable9,     // one row per configuration: onset ratio, equivariant floor
  kZoo,        // per optimizer, predicted class against the verdict
  kDial,       // Adam-p gauge drift against the exponent p
  kMerge,      // head merging: barriers naive / aligned per checkpoint
};
const char* to_string(Layout layout);
// "table3", "multiseed", "table9", "zoo", "dial", "merge"; throws naming
// the value otherwise.
Layout parse_layout(const std::string& name);

// The layout of records that name no table: merge records for merging,
// adam-p gauge twins only for the dial, the float64 set for Table 9,
// several init seeds for the multi-seed summary, else Table 3.
Layout infer_layout(const std::vector<twins::PairResult>& results);

// What the results were expected to hold: a job list with its name, title
// and the ways it differs from the paper's configuration.
struct Expected {
  std::string name;                     // "table3", "table3 shard 1/4"
  std::string title;                    // one line
  std::vector<std::string> deviations;  // "steps 50 (paper: 1500)"
  std::vector<twins::PairSpec> pairs;
};

// How a figure is printed.
enum class Unit {
  kDrift,     // relative distance: 0, 0.77, 3.6e-3
  kRatio,     // 662x
  kDecades,   // 0.04
  kAccuracy,  // 0.4020
  kLoss,      // 2.531
  kStep,      // 2
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
  std::string pairs_table;  // format_drift_table of every pair used
};

// Aggregates `results` in `layout`. With `expected` job lists, only the
// records whose key one of them lists are used (the others are named in a
// note as left out: another configuration must not enter these
// statistics), and their titles, their deviations from the paper's
// configuration and the pairs still missing become notes. Without, every
// record is used. The output does not depend on the order of `results`
// (job-list order first, then by key).
Aggregate aggregate(Layout layout,
                    const std::vector<twins::PairResult>& results,
                    const std::vector<Expected>& expected = {});

// The figure at (section id, row labels joined by ' ', column), or null.
const Figure* find_figure(const Aggregate& a, const std::string& section,
                          const std::string& row, const std::string& column);

std::string to_markdown(const Aggregate& a);
// Header: section,row,column,n,measured_min,measured_max,paper_min,
// paper_max,paper (numbers at full precision, empty when absent).
std::string to_csv(const Aggregate& a);

// "Adam", "SGD", "scalar-Adam", "Muon"; other names unchanged.
std::string display_name(const std::string& opt);

}  // namespace report
