#include "app/verdict_cmd.h"

#include <fmt/format.h>

#include "app/common.h"
#include "optim/registry.h"
#include "report/verdict.h"
#include "twins/device.h"
#include "twins/io.h"
#include "twins/pair.h"

namespace app {

void setup_verdict(CLI::App& app, VerdictFlags& f) {
  app.add_option("--opt", f.opts,
                 "Optimizers to judge, comma-separated (see "
                 "--list-optimizers)")
      ->required()
      ->delimiter(',');
  app.add_option("--p", f.adam_ps,
                 "Exponents in [0, 1] for a bare adam-p in --opt, "
                 "comma-separated [default: 0.5]")
      ->delimiter(',');
  add_pair_flags(app, f.plan);
  app.add_option("--init-seed", f.init_seed,
                 "Seed of the base model shared by the four pairs")
      ->capture_default_str();
  add_engine_flags(app, f.engine,
                   "Results file (JSON lines) [default: a new file "
                   "runs/verdict-<task>-<date>-<time>.jsonl]",
                   2);
}

int run_verdict(const VerdictFlags& f) {
  sweep::PlanRequest request = f.plan;
  request.opts = f.opts;
  request.adam_ps = f.adam_ps;
  request.init_seeds = {f.init_seed};
  // Everything is validated before the results file exists.
  twins::configure_determinism();  // before any CUDA call
  const std::vector<twins::PairSpec> specs = sweep::verdict_specs(request);
  twins::resolve_device(request.device);
  const int threads = 2;  // the copies of a pair side by side
  sweep::check_run(specs, engine_options(f.engine, "", threads));
  twins::check_task(specs.front());  // reads the corpus once, early
  const std::string path =
      !f.engine.out.empty()
          ? f.engine.out
          : twins::fresh_path("runs", "verdict-" + request.task, ".jsonl");
  const sweep::EngineOutcome run =
      sweep::run_sweep(specs, engine_options(f.engine, path, threads));
  for (const auto& v : report::judge_all(results_of(run.records))) {
    fmt::print("{}; predicted {}\n", report::format_verdict_line(v),
               optim::to_string(optim::find_optimizer(v.opt).predicted));
  }
  print_outcome(run, path);
  return 0;
}

}  // namespace app
