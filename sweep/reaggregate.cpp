// `table --aggregate FILES`: the records of results files with the job lists
// they belong to, nothing run (sweep/reaggregate.h).
#include "sweep/reaggregate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "sweep/results.h"
#include "twins/io.h"

namespace sweep {

namespace fs = std::filesystem;
using twins::PairSpec;

namespace {

// Records of no table must share one setting (task, steps, dtype, device,
// shape, data): their figures share cells.
void check_one_setting(const std::vector<StoredRecord>& records) {
  auto setting = [](const PairSpec& spec) {
    return fmt::format(
        "--task {} --steps {} --dtype {} --device {} --depth {} "
        "--d-model {} --heads {} --kv-heads {}{} --mlp {} --data-seed {}",
        spec.task, spec.steps, twins::dtype_name(spec.dtype), spec.device,
        spec.depth, spec.d_model, spec.heads, spec.kv_head_count(),
        spec.rope ? fmt::format(" --rope --rope-base {}", spec.rope_base) : "",
        spec.mlp, spec.data_seed);
  };
  const std::string first = setting(records.front().result.spec);
  for (const auto& rec : records) {
    const std::string here = setting(rec.result.spec);
    TORCH_CHECK(here == first, "results file '", rec.file, "', line ",
                rec.line, ": a record of another setting (", here,
                ") than the first (", first,
                "); aggregate records of one setting at a time");
  }
}

// table --aggregate: the records of the files, and the job lists they
// belong to, one per table and configuration (steps / dtype / device),
// each rebuilt so that missing pairs can be named and other
// configurations' records left out.
// `table NAME --aggregate FILES` where no record is one of NAME's pairs
// would write an empty table: refused, naming the table and the files.
void check_records_belong(const CommandOutcome& out,
                          const CommandRequest& request) {
  std::set<std::string> keys;
  for (const Table& table : out.expected) {
    for (const PairSpec& pair : table.pairs)
      keys.insert(pair.key());
  }
  const bool any = std::any_of(
      out.run.records.begin(), out.run.records.end(),
      [&](const StoredRecord& record) { return keys.count(record.key) > 0; });
  TORCH_CHECK(any, "--aggregate: no record of ",
              fmt::format("{}", fmt::join(request.inputs, ", ")),
              " is a pair of table ", request.table,
              " (at the records' settings): nothing to aggregate");
}

// The job lists the records of `out` belong to, one per table and
// configuration (steps / dtype / device), the census's second part
// included: each rebuilt as its configuration would run it.
std::map<std::string, Table> tables_of_records(const CommandOutcome& out,
                                               const CommandRequest& request) {
  std::map<std::string, Table> tables;  // by configuration name
  for (const auto& rec : out.run.records) {
    const std::string t =
        !request.table.empty() ? request.table : rec.json.value("table", "");
    if (t.empty())
      continue;
    TableOverrides o = overrides_of(t, rec.result.spec);
    // What the records do not hold: the census's selection of rules and
    // whether it tried other rates, as the command line says.
    o.rules = request.overrides.rules;
    o.default_rates = request.overrides.default_rates;
    o.census = request.overrides.census;
    const std::string config = config_name(t, o);
    if (!tables.count(config))
      tables.emplace(config, make_table(t, o));
  }
  for (auto& [config, table] : tables) {
    if (table.follow_up) {
      const std::vector<PairSpec> more = table.follow_up(out.results());
      table.pairs.insert(table.pairs.end(), more.begin(), more.end());
    }
  }
  return tables;
}

// Where the aggregate of `request.inputs` goes: one file, its own name;
// several, named after their configurations (`configs`, else the layout),
// so that merging the shards of another configuration writes elsewhere.
std::string aggregate_stem(const CommandRequest& request,
                           const std::vector<std::string>& configs,
                           const std::string& layout) {
  if (request.inputs.size() == 1)
    return twins::summary_stem(request.inputs.front());
  const std::string what =
      !configs.empty() ? fmt::format("{}", fmt::join(configs, "+")) : layout;
  return (fs::path(request.inputs.front()).parent_path() / (what + "-merged"))
      .string();
}

}  // namespace

CommandOutcome resolve_aggregate(const CommandRequest& request) {
  TORCH_CHECK(request.engine.results_path.empty(),
              "--out names a results file to run into; with --aggregate the "
              "tables go next to the first file");
  CommandOutcome out;
  out.kind = request.kind;
  out.results_path = request.inputs.front();
  out.run.records =
      read_records(request.inputs, request.engine.allow_mixed_env);
  const std::map<std::string, Table> tables = tables_of_records(out, request);
  std::vector<std::string> configs;
  std::map<std::string, std::string> config_of;  // table name -> its config
  for (const auto& [config, t] : tables) {
    const Table& first = tables.begin()->second;
    TORCH_CHECK(t.layout == first.layout,
                "the records belong to tables of different kinds (",
                first.name, ", ", t.name, "); aggregate them separately");
    // One table at two settings would share its cells.
    const auto [it, fresh] = config_of.emplace(t.name, config);
    TORCH_CHECK(fresh, "the records hold ", t.name, " at two settings (",
                it->second, ", ", config, "); aggregate them separately");
    out.expected.push_back(t);
    configs.push_back(config);
  }
  if (tables.empty()) {
    TORCH_CHECK(request.layout_of,
                "aggregate: no way to name the records' layout");
    check_one_setting(out.run.records);
    out.layout = request.layout_of(out.results());
    out.notes.push_back(
        "These records name no table (a plain run): their layout is "
        "inferred from their pairs, and the paper's figures beside them are "
        "for the paper's configuration, not necessarily theirs.");
  } else {
    out.layout = tables.begin()->second.layout;
    if (!request.table.empty())
      check_records_belong(out, request);
  }
  out.summary_stem = aggregate_stem(request, configs, out.layout);
  // read_records marked the inputs: no summary may replace one.
  check_summaries(out.summary_stem, request.inputs.front());
  return out;
}

}  // namespace sweep
