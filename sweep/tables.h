// The named job sets (docs/protocol.md §7): the paper's Table 3, the D.5
// multi-seed summary and the four rows of Table 9, and beyond the paper the
// optimizer zoo, the Adam-p dial and head merging; each one row of a list
// (sweep/tables.cpp) with its model, its job-list builder and the name of
// the layout its aggregation uses (report::parse_layout). Also the job list
// of a verdict, which the zoo is made of.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sweep/optimizer_lists.h"
#include "sweep/plan.h"
#include "twins/census_rule.h"
#include "twins/result.h"  // PairResult
#include "twins/spec.h"

namespace sweep {

// What `twin-run table` lets a user change for a quick look. Zero / empty
// means the paper's value.
struct TableOverrides {
  int64_t steps = 0;
  std::string device;      // empty: cpu
  std::string dtype;       // empty: the table's (float32 or float64)
  int64_t stop_after = 0;  // train through this step of `steps` only
  std::string protocol;    // empty: the table's (paper-cpu or paper-gpu)
  // The census only: its rules of these libraries ("timm") or these rules
  // ("timm:lamb", a library and one of its registry names); empty: every
  // rule. Named in config_name, so a selection has its own results file.
  std::vector<std::string> rules;
  // The census only: each rule at its library's default rate alone, no
  // other rate tried for one that does not train there (a quick census).
  bool default_rates = false;
  // The census's catalogue (census/census.h, handed over by the command):
  // its rows are the census table's rules. Null: the program lists no
  // census table (a twin-run without Python support).
  twins::CensusCatalogue census;
};

struct Table {
  std::string name;                    // table3, multiseed, table9-mod47, ...
  std::string layout;                  // its row in report::layouts()
  std::string title;                   // one line: what the paper calls it
  std::vector<twins::PairSpec> pairs;  // the job list, in a fixed order
  // Ways this job list differs from the paper's ("steps 50 (paper: 1500)");
  // empty for the paper's configuration.
  std::vector<std::string> deviations;
  // A rule that raises while it trains is recorded and the table goes on
  // (sweep::EngineOptions::record_failures): the census, whose rules are
  // other people's.
  bool records_failures = false;
  // The pairs the table adds once `pairs` are recorded, from their records
  // (given the records of any of them: a shard's); null for a table whose
  // job list is `pairs` alone. The census: twins::census_rates() for
  // each rule its library's default did not train (twins::trained).
  std::function<std::vector<twins::PairSpec>(
      const std::vector<twins::PairResult>& records)>
      follow_up;
  // The census's rows its rules were listed from, for the aggregate's
  // section (report::Expected::census); empty for another table.
  std::vector<twins::CensusRule> census;
};

// table3, multiseed, table9-mod47, table9-mod97-4L, table9-mod97-6L,
// table9-charlm, and beyond the paper zoo, zoo-modern, torch-zoo (only
// where Python rules resolve), dial and merge; with `census` (the command
// has the census's catalogue, TableOverrides::census) the census too.
std::vector<std::string> table_names(bool census = false);

// The job list of `name` with `overrides` applied. Throws "Unknown table:
// 'x' (known: ...)" and the one-line errors of expand().
Table make_table(const std::string& name, const TableOverrides& overrides = {});

// The name of a table's configuration:
// <name>[-steps50][-stop1][-twins][-float64][-cuda_0]
// (the overrides that differ from the paper's). The default results file
// of `twin-run table` and the merged aggregate of its shards are named
// after it, so different configurations never share a file.
std::string config_name(const std::string& name,
                        const TableOverrides& overrides);

// The overrides that reproduce `spec`'s steps / stop / protocol / device /
// dtype against
// table `name`'s defaults (to rebuild a table's job list from its records).
TableOverrides overrides_of(const std::string& name,
                            const twins::PairSpec& spec);

// ---------------------------------------------------------------------------
// Verdicts (docs/protocol.md §10)

// Per optimizer of request.opts (adam-p resolved as by expand(): a bare
// adam-p once per --p), in this order: gauge, identity, noise 1e-7, noise
// 1e-5. Every other setting comes from `request`; its twins, twin seeds and
// noise scales are replaced (default seeds: gauge 777, noise 888). Throws
// for an empty optimizer list, an optimizer named twice, more than one init
// seed, or anything expand() rejects.
std::vector<twins::PairSpec> verdict_specs(PlanRequest request);

// Whether a table's job list is enumerated when it runs (the census: from
// the installed libraries, which takes seconds), so that a list of the
// tables shows it without its cost.
bool listed_when_run(const std::string& name);

// The merge steps of a run of `steps` steps when none are given: 1, 100 and
// the last, those within the run (docs/protocol.md §9).
std::vector<int64_t> default_merge_steps(int64_t steps);

}  // namespace sweep
