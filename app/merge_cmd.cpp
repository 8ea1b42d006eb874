#include "app/merge_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "app/common.h"
#include "report/output.h"
#include "sweep/results.h"
#include "sweep/tables.h"
#include "twins/device.h"
#include "twins/io.h"
#include "twins/merge.h"
#include "twins/metrics.h"
#include "twins/pair.h"
#include "twins/record.h"
#include "twins/snapshot.h"

namespace app {

namespace fs = std::filesystem;

CLI::App* setup_merge(CLI::App& parent, MergeFlags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "merge",
      "Head merging (docs/protocol.md §9): train pairs and, at each "
      "--merge-at step, measure the validation loss along the straight line "
      "between the two copies and its barrier, naive and after aligning copy "
      "2's heads to copy 1's by orthogonal Procrustes; or measure pairs saved "
      "by --save-models (--models)");
  add_pair_list_flags(*cmd, f.run,
                      "Results file (JSON lines) [default: a new file "
                      "runs/merge-<task>-<date>-<time>.jsonl]");
  cmd->add_option("--merge-at", f.merge_at,
                  "Steps at which to merge, comma-separated [default: 1, 100 "
                  "and the last step]");
  cmd->add_option("--models", f.models,
                  "A directory of pairs saved by --save-models (or one saved "
                  "pair): measure them as saved, without training");
  cmd->add_flag("--plot", f.plot,
                "Also draw the loss along lambda (gnuplot), one panel per "
                "optimizer, naive dashed and aligned solid");
  return cmd;
}

namespace {

std::string stem_of(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / p.stem()).string();
}

// The saved pairs under `dir`: `dir` itself when it holds one, else every
// subdirectory that does, in name order.
std::vector<std::string> saved_pairs(const std::string& dir) {
  TORCH_CHECK(fs::is_directory(dir), "--models: '", dir,
              "' is not a directory");
  if (fs::exists(fs::path(dir) / twins::kSnapshotSpecFile))
    return {dir};
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && fs::exists(e.path() / twins::kSnapshotSpecFile)) {
      out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  TORCH_CHECK(!out.empty(), "--models: no saved pairs in '", dir,
              "' (each is a directory with ", twins::kSnapshotSpecFile, ", ",
              twins::kSnapshotModelFiles[0], " and ",
              twins::kSnapshotModelFiles[1], ", written by --save-models)");
  return out;
}

// Measures the saved pairs of f.models at their saved step and appends one
// record each (skipping those the results file holds).
int merge_saved(const MergeFlags& f) {
  const std::vector<std::string> dirs = saved_pairs(f.models);
  twins::configure_determinism();
  // Load and check every pair before anything is written.
  std::vector<twins::SavedPair> pairs;
  for (const auto& d : dirs) {
    pairs.push_back(
        twins::load_pair(d, twins::resolve_device(f.run.plan.device)));
  }
  const std::string path =
      !f.run.engine.out.empty()
          ? f.run.engine.out
          : twins::fresh_path("runs", "merge-models", ".jsonl");
  sweep::FileLock lock(path);
  std::set<std::string> recorded;
  for (const auto& r : sweep::read_results(path, true).records) {
    recorded.insert(r.key);
  }
  sweep::JsonlSink sink(path);
  for (auto& s : pairs) {
    twins::PairResult r;
    r.spec = s.spec;
    r.spec.merge_at = {s.step};
    r.torch_version = TORCH_VERSION;
    if (!recorded.count(r.spec.key())) {
      // The pair as saved: its drift, invariant drift and validation
      // figures at the saved step (train losses unknown: NaN), then the
      // merge.
      const twins::Evaluation e1 = twins::evaluate(s.m1, *s.task);
      const twins::Evaluation e2 = twins::evaluate(s.m2, *s.task);
      twins::CurvePoint c = twins::compare(e1, s.m1, e2, s.m2, s.step);
      c.train_loss = {std::nan(""), std::nan("")};
      r.curve.push_back(c);
      r.qk_per_head = twins::qk_drift_per_head(s.m1, s.m2);
      r.val_acc = c.val_acc;
      r.val_loss = c.val_loss;
      r.train_loss = c.train_loss;
      const twins::HeadMatrices gauge = twins::twin_gauge(s.spec);
      r.merges.push_back(twins::measure_merge(
          s.m1, s.m2, *s.task, s.step, gauge.empty() ? nullptr : &gauge));
      sink.append(twins::to_json(r));
    }
  }
  const auto records = sweep::read_records({path});
  const auto all = results_of(records);
  const report::Aggregate a =
      report::aggregate(report::parse_layout("merge"), all);
  report::write_outputs(a, all, stem_of(path), f.plot, a.title);
  fmt::print("{} saved pair(s) measured; records in {}\n", pairs.size(), path);
  return 0;
}

}  // namespace

int run_merge(const MergeFlags& f) {
  if (!f.models.empty())
    return merge_saved(f);
  sweep::PlanRequest request = plan_request(f.run);
  twins::configure_determinism();  // before any CUDA call
  if (!f.merge_at.empty()) {
    request.merge_at = parse_steps("--merge-at", f.merge_at);
  } else {
    request.merge_at =
        sweep::default_merge_steps(sweep::expand(request).front().steps);
  }
  const std::vector<twins::PairSpec> specs = sweep::expand(request);
  twins::resolve_device(request.device);
  const int threads = 2;
  sweep::check_run(specs, engine_options(f.run.engine, "", threads));
  twins::check_task(specs.front());
  const std::string path =
      !f.run.engine.out.empty()
          ? f.run.engine.out
          : twins::fresh_path("runs", "merge-" + request.task, ".jsonl");
  const sweep::EngineOutcome run =
      sweep::run_sweep(specs, engine_options(f.run.engine, path, threads));
  const std::vector<twins::PairResult> results = results_of(run.records);
  const report::Aggregate a =
      report::aggregate(report::parse_layout("merge"), results,
                        {{"merge", "Head merging", {}, specs}});
  report::write_outputs(a, results, stem_of(path), f.plot, a.title);
  print_outcome(run, path);
  return 0;
}

}  // namespace app
