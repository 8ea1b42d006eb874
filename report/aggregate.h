// From a table's PairResults to the figures the paper reports
// (docs/protocol.md §6 derived statistics, §7 numbers), each with the
// paper's value beside it; written as Markdown (what a person reads) and
// CSV (one figure per row).
//
// A table kind is one row of the list of layouts (report/layouts.cpp): its
// name, its title, the sections it prints and the figures it draws. The
// sections are built in report/paper_layouts.cpp (Table 3, D.5, Table 9)
// and report/diagnostic_layouts.cpp (zoo, dial, merge); aggregate.cpp
// applies a layout to records, render.cpp writes the result.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/figure.h"
#include "twins/census_rule.h"
#include "twins/result.h"

namespace report {

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

struct Plot;  // report/plot.h

using Records = std::vector<twins::PairResult>;

// What a section or a figure is made of: the records, in canonical order,
// and the census's catalogue rows behind them (Expected::census; empty:
// the census shows the rules its records name, nothing predicted).
struct Inputs {
  const Records& records;
  const std::vector<twins::CensusRule>& census;
};

// One section of a layout from its inputs, or none when the records hold
// nothing it could show.
using SectionBuilder = std::optional<Section> (*)(const Inputs&);

// One kind of aggregate: how a table's results are summarised.
struct Layout {
  std::string name;   // table3, ...: what sweep::Table::layout names
  std::string title;  // the aggregate's, unless one job list brings its own
  std::vector<SectionBuilder> sections;  // in the order they are printed
  std::vector<const Plot*> plots;        // what --plot draws, in order
  // Whether records that name no table look like this layout's: the last
  // layout of the list whose test holds is theirs. Null: never inferred.
  bool (*fits)(const Records&) = nullptr;
};

// Every layout, from the general to the particular: table3, multiseed,
// table9, zoo, dial, merge.
const std::vector<Layout>& layouts();

// The layout called `name`; throws naming the value and the known names.
const Layout& parse_layout(const std::string& name);

// The layout of records that name no table: merge records for merging,
// adam-p gauge twins only for the dial, the float64 set for Table 9,
// several init seeds for the multi-seed summary, else Table 3.
const Layout& infer_layout(const Records& results);

// What the results were expected to hold: a job list with its name, title
// and the ways it differs from the paper's configuration.
struct Expected {
  std::string name;                     // "table3", "table3 shard 1/4"
  std::string title;                    // one line
  std::vector<std::string> deviations;  // "steps 50 (paper: 1500)"
  std::vector<twins::PairSpec> pairs;
  // The census's rows its pairs were listed from (the census table's; empty
  // for another table).
  std::vector<twins::CensusRule> census;
};

struct Aggregate {
  Layout layout;
  std::string title;
  std::vector<std::string> notes;  // configuration, missing pairs, ...
  std::vector<Section> sections;
  std::string pairs_table;  // format_drift_table of every pair used
  std::vector<twins::CensusRule> census;  // the expected lists' rows
};

// Aggregates `results` in `layout`. With `expected` job lists, only the
// records whose key one of them lists are used (the others are named in a
// note as left out: another configuration must not enter these
// statistics), and their titles, their deviations from the paper's
// configuration and the pairs still missing become notes. Without, every
// record is used. The output does not depend on the order of `results`
// (job-list order first, then by key).
Aggregate aggregate(const Layout& layout, const Records& results,
                    const std::vector<Expected>& expected = {});

// The figure at (section id, row labels joined by ' ', column), or null.
const Figure* find_figure(const Aggregate& aggregate,
                          const std::string& section, const std::string& row,
                          const std::string& column);

// render.cpp
std::string to_markdown(const Aggregate& aggregate);
// Header: section,row,column,n,measured_min,measured_max,paper_min,
// paper_max,paper (numbers at full precision, empty when absent).
std::string to_csv(const Aggregate& aggregate);

}  // namespace report
