#include "sweep/command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "sweep/estimate.h"
#include "sweep/reaggregate.h"
#include "twins/corpus.h"
#include "twins/defaults.h"
#include "twins/device.h"
#include "twins/io.h"
#include "twins/setup.h"
#include "twins/snapshot.h"
#include "twins/trained.h"

namespace sweep {

namespace fs = std::filesystem;
using twins::PairSpec;

namespace {

// A command resolved: its job list, the engine's options with the results
// file, and the outcome's description of where everything goes. Nothing
// has been read or written yet.
struct Prepared {
  std::vector<PairSpec> pairs;
  EngineOptions engine;
  CommandOutcome outcome;
  std::unique_ptr<SavedPairs> saved;  // merge --models; null: train
  std::vector<std::string> lines;  // said on the log before the run
  // The pairs the table adds once these are recorded (Table::follow_up).
  std::function<std::vector<PairSpec>(const std::vector<twins::PairResult>&)>
      follow_up;
};

std::string results_path(const CommandRequest& request,
                         const std::string& stem) {
  return !request.engine.results_path.empty()
             ? request.engine.results_path
             : twins::fresh_path("runs", stem, ".jsonl");
}

// Where a pair's learning rate came from, as an error names it: --lr, or
// the optimizer's own default (a Python rule's "lr" in its name, the rate
// table) when the rate is that default.
std::string rate_text(const PairSpec& pair) {
  double fallback = 0;
  try {
    fallback = twins::default_lr(pair.opt, pair.task);
  } catch (const c10::Error&) {  // none: the rate was given
  }
  return fallback == pair.lr
             ? fmt::format("the default learning rate {} of '{}'", pair.lr,
                           pair.opt)
             : fmt::format("--lr {}", pair.lr);
}

// A pair's numbers must be numbers of its dtype: the learning rate a
// positive normal value, the noise scale 0 or such that its square (the
// order of the perturbed attention scores W_Q W_K^T) is finite. Checked
// before any step, naming the flag and the range.
void check_ranges(const std::vector<PairSpec>& pairs) {
  for (const auto& pair : pairs) {
    const bool f32 = pair.dtype == torch::kFloat;
    const double lo = f32 ? std::numeric_limits<float>::min()
                          : std::numeric_limits<double>::min();
    const double hi = f32 ? std::numeric_limits<float>::max()
                          : std::numeric_limits<double>::max();
    const std::string dtype = twins::dtype_name(pair.dtype);
    TORCH_CHECK(pair.lr >= lo && pair.lr <= hi, rate_text(pair),
                " is out of range for ", dtype,
                " (a learning rate is from ", lo, " to ", hi, ")");
    const double most = std::sqrt(hi);
    TORCH_CHECK(pair.noise_scale == 0 ||
                    (pair.noise_scale >= lo && pair.noise_scale <= most),
                "--noise-scale ", pair.noise_scale, " is out of range for ",
                dtype, " (0, or from ", lo, " to ", most,
                ": its square must be a finite ", dtype, ")");
  }
}

// The text a record carries of a pair's flags — the --data path, the
// --opt name with a rule's file path — must be UTF-8, as JSON's strings
// are: a path in another encoding would train every step and then fail
// the record's write. Refused before, naming the flag and the value (its
// bad bytes shown as U+FFFD).
void check_utf8(const std::vector<PairSpec>& pairs) {
  for (const PairSpec& pair : pairs) {
    const std::pair<const char*, const std::string*> texts[] = {
        {"--data", &pair.corpus}, {"--opt", &pair.opt}};
    for (const auto& [flag, text] : texts) {
      try {
        (void)nlohmann::json(*text).dump();
      } catch (const nlohmann::json::type_error&) {
        const std::string quoted = nlohmann::json(*text).dump(
            -1, ' ', false, nlohmann::json::error_handler_t::replace);
        TORCH_CHECK(false, flag, " '", quoted.substr(1, quoted.size() - 2),
                    "' is not UTF-8 text, and the records (JSON) hold only "
                    "UTF-8: rename it");
      }
    }
  }
}

// The engine's own checks, then the task's (it reads the corpus once,
// early): the memory estimate comes before a missing corpus. A char-LM
// pair's key then names its corpus's content (twins::bind_corpus).
void check_pairs(std::vector<PairSpec>& pairs, const EngineOptions& engine) {
  check_utf8(pairs);
  check_ranges(pairs);
  check_run(pairs, engine);
  twins::check_task(pairs.front());
  twins::bind_corpus(pairs);
}

// What a results file may not be called: the extensions of the files the
// tool writes beside it (summaries, figures, gnuplot scripts and data).
bool summary_extension(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  for (const char* e : {".md", ".csv", ".svg", ".png", ".gp", ".dat"}) {
    if (ext == e)
      return true;
  }
  return false;
}

// Every output of a command that runs pairs, before its first step: the
// results file (appended to), its summaries, the --save-models folder.
void check_outputs(const Prepared& prepared) {
  const std::string& results = prepared.engine.results_path;
  TORCH_CHECK(!summary_extension(results), "--out '", results,
              "': a results file is JSON lines (name it .jsonl); ",
              fs::path(results).extension().string(),
              " is what the summaries and figures written beside it end in");
  twins::check_output_file(results, "results file", twins::OutputKind::kAppend);
  twins::protect_input(results, "the results file");
  check_summaries(prepared.outcome.summary_stem, results);
  if (!prepared.engine.save_models.empty())
    twins::check_output_directory(prepared.engine.save_models, "--save-models");
}

// Flags given that the plan would not use, refused rather than ignored:
// the char-LM flags on a mod<p> task, --twin without --opt (which would
// quietly mean adam).
void check_applies(const PlanRequest& plan, CommandKind kind) {
  if (plan.task != "charlm") {
    const std::pair<const char*, bool> lm_only[] = {
        {"--data", !plan.corpus.empty()},
        {"--ctx", plan.ctx != 0},
        {"--batch", plan.batch != 0}};
    for (const auto& [flag, given] : lm_only) {
      TORCH_CHECK(!given, flag, " applies to --task charlm only (this run: "
                  "--task ", plan.task, ")");
    }
  }
  if (kind != CommandKind::kVerdict && !plan.twins.empty()) {
    const std::string twins_given = fmt::format("{}", fmt::join(plan.twins, ","));
    bool seeded = false, noise = false;  // a twin drawn from a seed; a noise twin
    for (const std::string& name : plan.twins) {
      const twins::TwinKind k = twins::parse_twin_kind(name);
      seeded = seeded || k != twins::TwinKind::kIdentity;
      noise = noise || k == twins::TwinKind::kNoise;
    }
    TORCH_CHECK(seeded || plan.twin_seeds.empty(), "--twin-seed applies to "
                "the twins drawn from a seed (gauge, noise, ...); --twin ",
                twins_given, " has none");
    TORCH_CHECK(noise || plan.noise_scales == std::vector<double>{
                                                 twins::kTripletNoiseScale},
                "--noise-scale applies to --twin noise; --twin ", twins_given,
                " has no noise twin");
  }
  TORCH_CHECK(kind == CommandKind::kVerdict || plan.twins.empty() ||
                  !plan.opts.empty(),
              "--twin ", fmt::format("{}", fmt::join(plan.twins, ",")),
              " without --opt: name the optimizers (e.g. --opt adam); only "
              "the seven Table-3 pairs need neither flag");
}

// Sets --jobs / --threads of the job list `prepared->pairs`
// (resolve_parallelism) on prepared->engine, before the memory check reads
// them.
Parallelism set_parallelism(const CommandRequest& request, Prepared* prepared) {
  const Parallelism par = resolve_parallelism(
      request.engine.jobs, request.jobs_given, request.engine.threads,
      request.threads_given,
      group_pairs(prepared->pairs, prepared->engine.share).size());
  prepared->engine.jobs = par.jobs;
  prepared->engine.threads = par.threads;
  return par;
}

// ---------------------------------------------------------------------------
// Resolve: one function per kind

// The job list `pairs` of `plan` prepared to run into the results file
// `request` names (default: runs/<prefix><task>-*.jsonl): the flags that
// do not apply refused, the device resolved, --jobs / --threads set, the
// pairs checked.
Prepared prepare_pairs(const CommandRequest& request, const PlanRequest& plan,
                       std::vector<PairSpec> pairs, const char* prefix) {
  Prepared prepared;
  prepared.engine = request.engine;
  prepared.pairs = std::move(pairs);
  check_applies(plan, request.kind);  // after expand: it names unknown values
  twins::resolve_device(plan.device);
  const Parallelism parallel = set_parallelism(request, &prepared);
  if (parallel.from_slurm)
    prepared.lines.push_back(
        fmt::format("{} pairs, {}", prepared.pairs.size(), parallel.said));
  check_pairs(prepared.pairs, prepared.engine);
  prepared.engine.results_path = results_path(request, prefix + plan.task);
  return prepared;
}

// run: the pairs of the plan (the Table-3 set by default).
Prepared resolve_run(const CommandRequest& request) {
  twins::configure_determinism();  // before any CUDA call
  return prepare_pairs(request, request.plan, expand(request.plan), "");
}

// verdict: the diagnostic twins of each optimizer (verdict_specs).
Prepared resolve_verdict(const CommandRequest& request) {
  twins::configure_determinism();
  return prepare_pairs(request, request.plan, verdict_specs(request.plan),
                       "verdict-");
}

// merge: the pairs of the plan, merged at plan.merge_at (default: 1, 100
// and the last step), aggregated as the merge table.
Prepared resolve_merge(const CommandRequest& request) {
  twins::configure_determinism();
  PlanRequest plan = request.plan;
  if (plan.merge_at.empty())
    plan.merge_at = default_merge_steps(planned_steps(plan));
  Prepared prepared = prepare_pairs(request, plan, expand(plan), "merge-");
  Table job_list;
  job_list.name = job_list.layout = "merge";
  job_list.title = "Head merging";
  job_list.pairs = prepared.pairs;
  prepared.outcome.layout = job_list.layout;
  prepared.outcome.expected = {job_list};
  prepared.outcome.summary_stem =
      twins::summary_stem(prepared.engine.results_path);
  return prepared;
}

// The lines a table says before it runs: what, where, and how it differs
// from the paper's configuration.
std::vector<std::string> table_banner(const Table& table, size_t pairs,
                                      const Shard* shard,
                                      const Parallelism& parallel,
                                      const EngineOptions& engine) {
  std::string what = fmt::format("{}: {} pairs", table.name, pairs);
  if (shard) {
    what += fmt::format(" (shard {}/{} of {})", shard->index, shard->count,
                        table.pairs.size());
  }
  std::vector<std::string> lines = {fmt::format(
      "{}, {}; results in {}", what, parallel.said, engine.results_path)};
  if (!table.deviations.empty()) {
    lines.push_back(fmt::format("NOT the paper's configuration: {}",
                                fmt::join(table.deviations, ", ")));
  }
  return lines;
}

Prepared resolve_table(const CommandRequest& request) {
  TORCH_CHECK(!request.table.empty(), "table: name a table (",
              fmt::format("{}", fmt::join(table_names(static_cast<bool>(
                                                   request.overrides.census)),
                                               ", ")),
              "), or use --list or --aggregate FILE");
  check_overrides(request.overrides);
  const bool sharded = !request.shard.empty();
  const Shard shard = sharded ? parse_shard(request.shard) : Shard{};
  twins::configure_determinism();  // before any CUDA call
  const Table table = make_table(request.table, request.overrides);
  twins::resolve_device(table.pairs.front().device);
  Prepared prepared;
  prepared.engine = request.engine;
  prepared.engine.table = table.name;
  prepared.engine.record_failures = table.records_failures;
  prepared.engine.listed_rates_only = request.overrides.default_rates;
  prepared.pairs = shard_of(table.pairs, shard, prepared.engine.share);
  if (sharded) {
    const size_t groups =
        group_pairs(table.pairs, prepared.engine.share).size();
    TORCH_CHECK(!prepared.pairs.empty(), "--shard ", request.shard, ": ",
                table.name, " has ", groups, " group(s) of pairs, so shard ",
                shard.index, " of ", shard.count,
                " would be empty; use at most ", groups, " shards");
  }
  const Parallelism parallel = set_parallelism(request, &prepared);
  check_pairs(prepared.pairs, prepared.engine);
  std::string name = config_name(table.name, request.overrides);
  if (sharded)
    name += fmt::format("-shard{}of{}", shard.index, shard.count);
  prepared.engine.results_path =
      !request.engine.results_path.empty()
          ? request.engine.results_path
          : (fs::path("runs") / (name + ".jsonl")).string();
  prepared.lines =
      table_banner(table, prepared.pairs.size(), sharded ? &shard : nullptr,
                   parallel, prepared.engine);
  // This job list's records are aggregated (the file may hold other pairs).
  Table job_list = table;
  job_list.pairs = prepared.pairs;
  if (sharded) {
    job_list.name =
        fmt::format("{} shard {}/{}", table.name, shard.index, shard.count);
    prepared.outcome.notes.push_back(fmt::format(
        "Shard {}/{}: a part of {}; merge the shard files with `twin-run "
        "table --aggregate <shard files>`.",
        shard.index, shard.count, table.name));
  }
  prepared.outcome.layout = table.layout;
  prepared.outcome.expected = {job_list};
  prepared.follow_up = table.follow_up;
  prepared.outcome.summary_stem =
      twins::summary_stem(prepared.engine.results_path);
  return prepared;
}

// merge --models: every saved pair loaded and checked before anything is
// written; the engine then measures them instead of training (run_sweep's
// `saved`).
Prepared resolve_saved(const CommandRequest& request) {
  TORCH_CHECK(fs::is_directory(request.models), "--models: '", request.models,
              "' is not a directory");
  const std::vector<std::string> dirs = twins::find_saved_pairs(request.models);
  TORCH_CHECK(!dirs.empty(), "--models: no saved pairs in '", request.models,
              "' (each is a directory with ", twins::kSnapshotSpecFile, ", ",
              twins::kSnapshotModelFiles[0], " and ",
              twins::kSnapshotModelFiles[1], ", written by --save-models)");
  twins::configure_determinism();  // before any CUDA call
  const torch::Device device = twins::resolve_device(request.plan.device);
  Prepared prepared;
  prepared.saved = std::make_unique<SavedPairs>();
  for (const auto& d : dirs) {
    twins::SavedPair s = twins::load_pair(d, device);
    prepared.pairs.push_back(twins::saved_spec(s));
    prepared.saved->emplace(prepared.pairs.back().key(), std::move(s));
  }
  std::vector<PairSpec> bound = prepared.pairs;
  twins::bind_corpus(bound);  // throws when a corpus changed since
  prepared.engine = request.engine;
  prepared.engine.quiet = true;  // nothing trains: no progress to show
  set_parallelism(request, &prepared);
  prepared.engine.results_path = results_path(request, "merge-models");
  prepared.outcome.layout = "merge";
  prepared.outcome.summary_stem =
      twins::summary_stem(prepared.engine.results_path);
  return prepared;
}

// A table's second part (the census's other rates): the pairs its records
// call for, run into the same file, their records and counts added to the
// first part's.
void run_follow_up(const Prepared& prepared, CommandOutcome& out) {
  const std::vector<PairSpec> more = prepared.follow_up(out.results());
  if (more.empty())
    return;
  if (!prepared.engine.quiet) {
    fmt::print(prepared.engine.log,
               "{} more pairs: the rules that did not train at their "
               "default rate, at the rates {}\n",
               more.size(), fmt::join(twins::census_rates(), ", "));
  }
  EngineOutcome next = run_sweep(more, prepared.engine, nullptr);
  EngineOutcome& run = out.run;
  run.already += next.already;
  run.ran += next.ran;
  run.groups += next.groups;
  run.models += next.models;
  run.dropped_truncated = run.dropped_truncated || next.dropped_truncated;
  run.wall_s += next.wall_s;
  for (StoredRecord& record : next.records)
    run.records.push_back(std::move(record));
  Table& job_list = out.expected.front();
  job_list.pairs.insert(job_list.pairs.end(), more.begin(), more.end());
}

// The resolver of each kind that runs something (an aggregate runs
// nothing: resolve_aggregate).
Prepared resolve(const CommandRequest& request) {
  switch (request.kind) {
    case CommandKind::kRun:
      return resolve_run(request);
    case CommandKind::kVerdict:
      return resolve_verdict(request);
    case CommandKind::kMerge:
      return resolve_merge(request);
    case CommandKind::kTable:
      return resolve_table(request);
    case CommandKind::kMergeSaved:
      return resolve_saved(request);
    case CommandKind::kAggregate:
      break;
  }
  TORCH_CHECK(false, "resolve: an aggregate runs nothing");
}

}  // namespace

std::vector<twins::PairResult> CommandOutcome::results() const {
  std::vector<twins::PairResult> out;
  for (const auto& r : run.records)
    out.push_back(r.result);
  return out;
}

void check_overrides(const TableOverrides& overrides) {
  if (!overrides.dtype.empty())
    twins::parse_dtype(overrides.dtype);  // names the value
  if (!overrides.protocol.empty())
    twins::parse_protocol(overrides.protocol);
}

int default_threads(CommandKind kind) {
  return kind == CommandKind::kTable ? 1 : 2;
}

CommandOutcome run_command(const CommandRequest& request) {
  if (request.kind == CommandKind::kAggregate)
    return resolve_aggregate(request);
  Prepared prepared = resolve(request);
  check_outputs(prepared);
  if (!prepared.engine.quiet) {
    for (const auto& line : prepared.lines)
      fmt::print(prepared.engine.log, "{}\n", line);
  }
  CommandOutcome out = std::move(prepared.outcome);
  out.kind = request.kind;
  out.results_path = prepared.engine.results_path;
  out.run = run_sweep(prepared.pairs, prepared.engine, prepared.saved.get());
  if (prepared.follow_up)
    run_follow_up(prepared, out);
  return out;
}

}  // namespace sweep
