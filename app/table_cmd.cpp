#include "app/table_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include "app/common.h"
#include "report/output.h"
#include "sweep/estimate.h"
#include "twins/device.h"
#include "twins/pair.h"

namespace app {

namespace fs = std::filesystem;

CLI::App* setup_table(CLI::App& parent, TableFlags& f) {
  std::string names;
  for (const auto& n : sweep::table_names()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  CLI::App* cmd = parent.add_subcommand(
      "table",
      "Run one of the paper's tables (docs/protocol.md §7), the optimizer "
      "zoo, the Adam-p dial or the head-merging table, and aggregate it: "
      "resumable (rerun to continue), parallel (--jobs), shardable "
      "(--shard); or re-aggregate results files (--aggregate)");
  cmd->add_option("name", f.name, "Table: " + names);
  cmd->add_flag("--list", f.list,
                "Print every table with its pair and model counts, steps and "
                "estimated wall time on this machine, then exit");
  cmd->add_option("--aggregate", f.aggregate,
                  "Aggregate these results files (e.g. merged shards) "
                  "without running anything; the table comes from the "
                  "records or from NAME, and only records of its job list "
                  "are used");
  add_engine_flags(*cmd, f.engine,
                   "Results file (JSON lines) [default: runs/<name>[-<"
                   "overrides>][-shard<I>of<N>].jsonl]; the .md, .csv and "
                   "figures go beside it",
                   1);
  cmd->add_option("--shard", f.shard,
                  "Run only shard I of N (I/N, 1 <= I <= N): groups I, I+N, "
                  "I+2N, ... of the job list; the shards cover the table "
                  "once when all run with the same --no-share");
  cmd->add_option("--steps", f.steps,
                  "Override the training steps (a quick look; the output "
                  "then says it is not the paper's configuration)")
      ->check(whole_number(1, kMaxSteps));
  cmd->add_option("--device", f.device, "cpu, cuda or cuda:N [default: cpu]");
  cmd->add_option("--dtype", f.dtype,
                  "Override the dtype: float32 or float64 [default: the "
                  "table's, float32 for table3/multiseed/zoo/dial/merge, "
                  "float64 for table9-*]");
  cmd->add_flag("--plot", f.plot,
                "Also draw Figure 2 and the per-head QK drift (gnuplot) next "
                "to the results; for dial also drift against p");
  return cmd;
}

namespace {

std::string stem_of(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / p.stem()).string();
}

sweep::TableOverrides overrides(const TableFlags& f) {
  sweep::TableOverrides o;
  o.steps = f.steps;
  o.device = f.device;
  o.dtype = f.dtype;
  if (!o.dtype.empty())
    twins::parse_dtype(o.dtype);  // names the value
  return o;
}

int list_tables(const TableFlags& f) {
  const sweep::TableOverrides o = overrides(f);
  const int cores =
      std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  fmt::print("{:<17} {:>5} {:>6} {:>6} {:<8} {:>14} {:>14}\n", "table", "pairs",
             "models", "steps", "dtype", "est. --jobs 1",
             fmt::format("est. --jobs {}", cores));
  for (const auto& name : sweep::table_names()) {
    const sweep::Table t = sweep::make_table(name, o);
    // Each group trains its copy 1 once: the cost is in distinct models.
    double total = 0, longest = 0;
    size_t models = 0;
    for (const auto& g : sweep::group_pairs(t.pairs, !f.engine.no_share)) {
      const int k = static_cast<int>(g.size()) + 1;
      const double s = sweep::estimate_seconds(g.front(), k);
      total += s;
      longest = std::max(longest, s);
      models += k;
    }
    const twins::PairSpec& p = t.pairs.front();
    fmt::print("{:<17} {:>5} {:>6} {:>6} {:<8} {:>14} {:>14}\n", name,
               t.pairs.size(), models, p.steps, twins::dtype_name(p.dtype),
               sweep::format_duration(total),
               sweep::format_duration(std::max(total / cores, longest)));
  }
  fmt::print(
      "Estimates: the models' matrix-multiply FLOPs at this machine's "
      "measured one-thread rate (docs/performance.md), +-50 %; models "
      "counts each copy 1 once per group of pairs that share it{}; other "
      "load on the machine slows them.\n",
      f.engine.no_share ? " (here: once per pair, --no-share)" : "");
  return 0;
}

int aggregate_files(const TableFlags& f) {
  TORCH_CHECK(f.engine.out.empty(),
              "--out names a results file to run into; with --aggregate the "
              "tables go next to the first file");
  const std::vector<sweep::StoredRecord> records =
      sweep::read_records(f.aggregate);

  // The job lists the records belong to: one per table and configuration
  // (steps / dtype / device), each rebuilt so that missing pairs can be
  // named and other configurations' records left out.
  std::map<std::string, sweep::Table> tables;  // by configuration name
  for (const auto& r : records) {
    const std::string t = !f.name.empty() ? f.name : r.json.value("table", "");
    if (t.empty())
      continue;
    const sweep::TableOverrides o = sweep::overrides_of(t, r.result.spec);
    const std::string config = sweep::config_name(t, o);
    if (!tables.count(config))
      tables.emplace(config, sweep::make_table(t, o));
  }
  std::vector<report::Expected> expected;
  std::string configs;
  for (const auto& [config, t] : tables) {
    TORCH_CHECK(t.layout == tables.begin()->second.layout,
                "the records belong to tables of different kinds (",
                tables.begin()->second.name, ", ", t.name,
                "); aggregate them separately");
    expected.push_back(expected_of(t));
    configs += (configs.empty() ? "" : "+") + config;
  }
  const std::vector<twins::PairResult> results = results_of(records);
  const report::Layout& layout =
      tables.empty() ? report::infer_layout(results)
                     : report::parse_layout(tables.begin()->second.layout);
  const report::Aggregate a = report::aggregate(layout, results, expected);

  // One file: its own name. Several: named after their configurations, so
  // that merging the shards of another configuration writes elsewhere.
  std::string stem = stem_of(f.aggregate.front());
  if (f.aggregate.size() > 1) {
    const std::string what =
        !configs.empty() ? configs : layout.name;
    stem = (fs::path(f.aggregate.front()).parent_path() / (what + "-merged"))
               .string();
  }
  report::write_outputs(a, results, stem, f.plot, a.title);
  return 0;
}

}  // namespace

int run_table(const TableFlags& f) {
  if (f.list)
    return list_tables(f);
  if (!f.aggregate.empty())
    return aggregate_files(f);

  std::string names;
  for (const auto& n : sweep::table_names()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  TORCH_CHECK(!f.name.empty(), "table: name a table (", names,
              "), or use --list or --aggregate FILE");
  const sweep::TableOverrides o = overrides(f);
  const bool sharded = !f.shard.empty();
  const sweep::Shard shard =
      sharded ? sweep::parse_shard(f.shard) : sweep::Shard{};
  // Everything is validated before anything is created.
  twins::configure_determinism();  // before any CUDA call
  const sweep::Table table = sweep::make_table(f.name, o);
  twins::resolve_device(table.pairs.front().device);
  const std::vector<twins::PairSpec> pairs =
      sweep::shard_of(table.pairs, shard, !f.engine.no_share);
  sweep::check_run(pairs, engine_options(f.engine, "", 1));
  twins::check_task(table.pairs.front());
  std::string name = sweep::config_name(table.name, o);
  if (sharded)
    name += fmt::format("-shard{}of{}", shard.index, shard.count);
  const std::string path =
      !f.engine.out.empty() ? f.engine.out
                            : (fs::path("runs") / (name + ".jsonl")).string();

  std::string what = fmt::format("{}: {} pairs", table.name, pairs.size());
  if (sharded) {
    what += fmt::format(" (shard {}/{} of {})", shard.index, shard.count,
                        table.pairs.size());
  }
  if (!f.engine.quiet) {
    fmt::print(stderr, "{}, --jobs {}; results in {}\n", what, f.engine.jobs,
               path);
    if (!table.deviations.empty()) {
      std::string s;
      for (const auto& d : table.deviations)
        s += (s.empty() ? "" : ", ") + d;
      fmt::print(stderr, "NOT the paper's configuration: {}\n", s);
    }
  }
  sweep::EngineOptions eo = engine_options(f.engine, path, 1);
  eo.table = table.name;
  const sweep::EngineOutcome run = sweep::run_sweep(pairs, eo);

  // Aggregate this job list's records (the file may hold other pairs).
  sweep::Table job_list = table;
  job_list.pairs = pairs;
  if (sharded) {
    job_list.name =
        fmt::format("{} shard {}/{}", table.name, shard.index, shard.count);
  }
  const std::vector<twins::PairResult> results = results_of(run.records);
  report::Aggregate a = report::aggregate(report::parse_layout(table.layout),
                                          results, {expected_of(job_list)});
  if (sharded) {
    a.notes.push_back(fmt::format(
        "Shard {}/{}: a part of {}; merge the shard files with `twin-run "
        "table --aggregate <shard files>`.",
        shard.index, shard.count, table.name));
  }
  report::write_outputs(a, results, stem_of(path), f.plot, a.title);
  print_outcome(run, path);
  return 0;
}

}  // namespace app
