#include "app/verdict_cmd.h"

#include "app/cli.h"

#include <fmt/format.h>

#include <chrono>

#include "optim/registry.h"
#include "twins/device.h"
#include "twins/pair.h"
#include "twins/report.h"
#include "twins/run.h"
#include "twins/sink.h"
#include "twins/verdict.h"

namespace app {

void setup_verdict(CLI::App& app, VerdictFlags& f) {
  auto& p = f.plan;
  app.add_option("--opt", f.opts,
                 "Optimizers to judge, comma-separated (see "
                 "--list-optimizers)")
      ->required()
      ->delimiter(',');
  app.add_option("--p", f.adam_ps,
                 "Exponents in [0, 1] for a bare adam-p in --opt, "
                 "comma-separated [default: 0.5]")
      ->delimiter(',');
  add_pair_flags(app, p);
  app.add_option("--init-seed", f.init_seed,
                 "Seed of the base model shared by the four pairs")
      ->capture_default_str();
  app.add_option("--out", f.out,
                 "Results file (JSON lines, appended) [default: a new file "
                 "runs/verdict-<task>-<date>-<time>.jsonl]");
  app.add_option("--threads", f.threads,
                 "CPU threads: with 2 or more the two copies of a pair train "
                 "concurrently (as for a run); records do not depend on it")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--quiet", f.quiet, "No progress lines");
}

int run_verdict(const VerdictFlags& f) {
  twins::PlanRequest request = f.plan;
  request.opts = f.opts;
  request.adam_ps = f.adam_ps;
  request.init_seeds = {f.init_seed};
  // Everything is validated before the results file exists.
  twins::configure_determinism();  // before any CUDA call
  const std::vector<twins::PairSpec> specs = twins::verdict_specs(request);
  twins::resolve_device(request.device);
  twins::check_task(specs.front());  // reads the corpus once, early
  const bool concurrent = f.threads >= 2;
  twins::set_threads(concurrent ? f.threads / 2 : 1);

  twins::JsonlSink sink(f.out.empty() ? twins::fresh_results_path(
                                            "runs", "verdict-" + request.task)
                                      : f.out);
  twins::ProgressPrinter progress(f.quiet);
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = twins::run_pairs(specs, sink, progress, concurrent);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  for (const auto& v : twins::judge_all(results)) {
    fmt::print("{}; predicted {}\n", twins::format_verdict_line(v),
               optim::to_string(optim::find_optimizer(v.opt).predicted));
  }
  fmt::print("{} pair(s) in {:.1f} s; records in {}\n", results.size(), wall,
             sink.path());
  return 0;
}

}  // namespace app
