#include "app/table_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "app/plot_cmd.h"
#include "twins/aggregate.h"
#include "twins/device.h"
#include "twins/results.h"
#include "twins/schedule.h"
#include "twins/tables.h"

namespace app {

namespace fs = std::filesystem;

CLI::App* setup_table(CLI::App& parent, TableFlags& f) {
  std::string names;
  for (const auto& n : twins::table_names()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  CLI::App* cmd = parent.add_subcommand(
      "table",
      "Run one of the paper's tables (PROTOCOL §7), or the optimizer zoo or "
      "the Adam-p dial, and aggregate it: "
      "resumable (rerun to continue), parallel (--jobs), shardable "
      "(--shard); or re-aggregate results files (--aggregate)");
  cmd->add_option("name", f.name, "Table: " + names);
  cmd->add_flag("--list", f.list,
                "Print every table with its pair count, steps and estimated "
                "wall time on this machine, then exit");
  cmd->add_option("--aggregate", f.aggregate,
                  "Aggregate these results files (e.g. merged shards) "
                  "without running anything; the table comes from the "
                  "records or from NAME");
  cmd->add_option("--out", f.out,
                  "Results file (JSON lines; rerunning with the same file "
                  "resumes) [default: runs/<name>[-<overrides>][-shard<I>of"
                  "<N>].jsonl]; the .md, .csv and figures go beside it");
  cmd->add_option("--jobs", f.jobs,
                  "Pairs run at once in this process, each on one thread")
      ->capture_default_str();
  cmd->add_option("--shard", f.shard,
                  "Run only shard I of N of the job list (I/N, 1 <= I <= N): "
                  "pairs I, I+N, I+2N, ...; the shards cover the table once");
  cmd->add_option("--steps", f.steps,
                  "Override the training steps (a quick look; the output "
                  "then says it is not the paper's configuration)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", f.device, "cpu, cuda or cuda:N [default: cpu]");
  cmd->add_option("--dtype", f.dtype,
                  "Override the dtype: float32 or float64 [default: the "
                  "table's, float32 for table3/multiseed/zoo/dial, float64 for "
                  "table9-*]");
  cmd->add_flag("--plot", f.plot,
                "Also draw Figure 2 and the per-head QK drift (gnuplot) next "
                "to the results; for dial also drift against p");
  cmd->add_flag("--quiet", f.quiet, "No progress lines");
  return cmd;
}

namespace {

std::string stem_of(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / p.stem()).string();
}

twins::TableOverrides overrides(const TableFlags& f) {
  TORCH_CHECK(f.steps >= 0, "Invalid --steps: ", f.steps, " (must be >= 1)");
  twins::TableOverrides o;
  o.steps = f.steps;
  o.device = f.device;
  o.dtype = f.dtype;
  if (!o.dtype.empty())
    twins::parse_dtype(o.dtype);  // names the value
  return o;
}

// runs/<name>[-steps50][-float64][-cuda][-shard1of4].jsonl: the same
// command always finds its own file again (that is the resume).
std::string default_results_path(const twins::Table& t,
                                 const twins::TableOverrides& o,
                                 const twins::Shard& shard, bool sharded) {
  std::string name = t.name;
  if (o.steps != 0) {
    name += fmt::format("-steps{}", o.steps);
  }
  if (!o.dtype.empty()) {
    name += "-" + o.dtype;
  }
  if (!o.device.empty() && o.device != "cpu") {
    std::string d = o.device;
    for (char& c : d) {
      if (c == ':') {
        c = '_';
      }
    }
    name += "-" + d;
  }
  if (sharded) {
    name += fmt::format("-shard{}of{}", shard.index, shard.count);
  }
  return (fs::path("runs") / (name + ".jsonl")).string();
}

int list_tables(const TableFlags& f) {
  const twins::TableOverrides o = overrides(f);
  const int cores =
      std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  fmt::print("{:<17} {:>5} {:>6} {:<8} {:>14} {:>14}\n", "table", "pairs",
             "steps", "dtype", "est. --jobs 1",
             fmt::format("est. --jobs {}", cores));
  for (const auto& name : twins::table_names()) {
    const twins::Table t = twins::make_table(name, o);
    double total = 0, longest = 0;
    for (const auto& p : t.pairs) {
      const double s = twins::estimate_seconds(p);
      total += s;
      longest = std::max(longest, s);
    }
    const twins::PairSpec& p = t.pairs.front();
    fmt::print("{:<17} {:>5} {:>6} {:<8} {:>14} {:>14}\n", name, t.pairs.size(),
               p.steps, twins::dtype_name(p.dtype),
               twins::format_duration(total),
               twins::format_duration(std::max(total / cores, longest)));
  }
  fmt::print(
      "Estimates: this machine's measured one-thread speed (a Table-3 pair "
      "takes ~70 s), +-50 %; other load on the machine slows them.\n");
  return 0;
}

// Markdown on stdout, .md and .csv at `stem`; figures when asked.
void report(const twins::Aggregate& a,
            const std::vector<twins::StoredRecord>& records,
            const std::string& stem, bool plot) {
  const std::string md = twins::to_markdown(a);
  fmt::print("{}\n", md);
  twins::write_text_atomically(stem + ".md", md);
  twins::write_text_atomically(stem + ".csv", twins::to_csv(a));
  fmt::print("tables: {}.md, {}.csv\n", stem, stem);
  if (plot && !records.empty()) {
    draw(records, stem + ".svg");
    if (a.layout == twins::Layout::kDial) {
      draw_dial(records, stem + "-dial.svg");
    }
  }
}

// The layout of records that name no table: Table 9 is the float64 set,
// the multi-seed summary has several init seeds, else Table 3.
twins::Layout infer_layout(const std::vector<twins::StoredRecord>& records) {
  std::set<uint64_t> inits;
  bool f64 = true;
  for (const auto& r : records) {
    inits.insert(r.result.spec.init_seed);
    f64 = f64 && r.result.spec.dtype == torch::kDouble;
  }
  if (f64) {
    return twins::Layout::kTable9;
  }
  // adam-p gauge twins only: a dial.
  const bool dial = std::all_of(records.begin(), records.end(), [](auto& r) {
    return r.result.spec.opt.rfind("adam-p", 0) == 0 &&
           r.result.spec.twin == twins::TwinKind::kGauge;
  });
  if (dial) {
    return twins::Layout::kDial;
  }
  return inits.size() > 1 ? twins::Layout::kMultiSeed : twins::Layout::kTable3;
}

int aggregate_files(const TableFlags& f) {
  TORCH_CHECK(f.out.empty(),
              "--out names a results file to run into; with --aggregate the "
              "tables go next to the first file");
  const std::vector<twins::StoredRecord> records = read_records(f.aggregate);

  // The tables the records belong to, each rebuilt with the records'
  // steps / dtype / device so that missing pairs can be named.
  std::map<std::string, const twins::PairSpec*> named;
  for (const auto& r : records) {
    const std::string t = !f.name.empty() ? f.name : r.json.value("table", "");
    if (!t.empty() && !named.count(t)) {
      named[t] = &r.result.spec;
    }
  }
  std::vector<twins::Table> tables;
  for (const auto& [name, spec] : named) {
    tables.push_back(twins::make_table(name, twins::overrides_of(name, *spec)));
  }
  twins::Layout layout = infer_layout(records);
  if (!tables.empty()) {
    layout = tables.front().layout;
    for (const auto& t : tables) {
      TORCH_CHECK(t.layout == layout,
                  "the records belong to tables of "
                  "different kinds (",
                  tables.front().name, ", ", t.name,
                  "); aggregate them separately");
    }
  }
  std::vector<twins::PairResult> results;
  for (const auto& r : records) {
    results.push_back(r.result);
  }
  const twins::Aggregate a = twins::aggregate(layout, results, tables);

  const fs::path first(f.aggregate.front());
  std::string stem = stem_of(f.aggregate.front());
  if (f.aggregate.size() > 1) {
    const std::string what =
        tables.size() == 1 ? tables.front().name : twins::to_string(layout);
    stem = (first.parent_path() / (what + "-merged")).string();
  }
  report(a, records, stem, f.plot);
  return 0;
}

}  // namespace

int run_table(const TableFlags& f) {
  if (f.list) {
    return list_tables(f);
  }
  if (!f.aggregate.empty()) {
    return aggregate_files(f);
  }

  std::string names;
  for (const auto& n : twins::table_names()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  TORCH_CHECK(!f.name.empty(), "table: name a table (", names,
              "), or use --list or --aggregate FILE");
  TORCH_CHECK(f.jobs >= 1, "Invalid --jobs: ", f.jobs, " (must be >= 1)");
  const twins::TableOverrides o = overrides(f);
  const bool sharded = !f.shard.empty();
  const twins::Shard shard =
      sharded ? twins::parse_shard(f.shard) : twins::Shard{};
  // Everything is validated before anything is created.
  const twins::Table table = twins::make_table(f.name, o);
  twins::resolve_device(table.pairs.front().device);
  const std::vector<twins::PairSpec> pairs =
      twins::shard_of(table.pairs, shard);
  const std::string path =
      !f.out.empty() ? f.out : default_results_path(table, o, shard, sharded);

  std::string what = fmt::format("{}: {} pairs", table.name, pairs.size());
  if (sharded) {
    what += fmt::format(" (shard {}/{} of {})", shard.index, shard.count,
                        table.pairs.size());
  }
  if (!f.quiet) {
    fmt::print(stderr, "{}, --jobs {}; results in {}\n", what, f.jobs, path);
    if (!table.deviations.empty()) {
      fmt::print(stderr, "NOT the paper's configuration: {}\n", [&] {
        std::string s;
        for (const auto& d : table.deviations) {
          s += (s.empty() ? "" : ", ") + d;
        }
        return s;
      }());
    }
  }

  twins::ResumeOptions ro;
  ro.results_path = path;
  ro.jobs = f.jobs;
  ro.table = table.name;
  ro.quiet = f.quiet;
  const twins::ResumeOutcome run = twins::run_resumable(pairs, ro);

  // Aggregate this job list's records (the file may hold other pairs).
  std::set<std::string> keys;
  for (const auto& p : pairs) {
    keys.insert(p.key());
  }
  std::map<std::string, twins::StoredRecord> by_key;
  for (auto& r : twins::read_results(path, /*missing_ok=*/true).records) {
    if (keys.count(r.key) && !by_key.count(r.key)) {
      by_key[r.key] = r;
    }
  }
  std::vector<twins::StoredRecord> records;
  std::vector<twins::PairResult> results;
  for (const auto& p : pairs) {
    auto it = by_key.find(p.key());
    if (it == by_key.end()) {
      continue;
    }
    records.push_back(it->second);
    results.push_back(it->second.result);
  }
  twins::Table job_list = table;
  job_list.pairs = pairs;
  if (sharded) {
    job_list.name =
        fmt::format("{} shard {}/{}", table.name, shard.index, shard.count);
  }
  twins::Aggregate a = twins::aggregate(table.layout, results, {job_list});
  if (sharded) {
    a.notes.push_back(fmt::format(
        "Shard {}/{}: a part of {}; merge the shard files with `twin-run "
        "table --aggregate <shard files>`.",
        shard.index, shard.count, table.name));
  }
  report(a, records, stem_of(path), f.plot);
  fmt::print(
      "{}: ran {} pair(s) in {:.1f} s with --jobs {}; {} already "
      "recorded; results in {}\n",
      what, run.ran, run.wall_s, f.jobs, run.already, path);
  return 0;
}

}  // namespace app
