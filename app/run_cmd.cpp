#include "app/run_cmd.h"

#include <fmt/format.h>

#include "app/common.h"
#include "optim/registry.h"
#include "report/summary.h"
#include "twins/defaults.h"
#include "twins/device.h"
#include "twins/io.h"
#include "twins/pair.h"

namespace app {

void add_pair_list_flags(CLI::App& app, RunFlags& f,
                         const std::string& out_help) {
  app.add_option("--opt", f.opts,
                 "Optimizers, comma-separated (see --list-optimizers). "
                 "Without --opt and --twin: the seven Table-3 pairs");
  app.add_option("--twin", f.twins,
                 "Twin kinds, comma-separated: gauge (per-head orthogonal "
                 "A_h on W_Q/W_K rows), identity (A_h = I, must stay "
                 "exactly 0), noise (W_Q, W_K + scale N(0,1)). Default "
                 "gauge when --opt is given");
  app.add_option("--init-seed", f.init_seeds,
                 "Seeds of the base model's initialisation "
                 "(torch::manual_seed before the build), comma-separated")
      ->capture_default_str();
  app.add_option("--twin-seed", f.twin_seeds,
                 "Seeds of the gauge / noise draws, comma-separated "
                 "[default: 777 for gauge twins, 888 for noise twins]");
  app.add_option("--noise-scale", f.noise_scales,
                 "Std of the W_Q/W_K perturbation of noise twins, "
                 "comma-separated")
      ->capture_default_str();
  app.add_option("--p", f.adam_ps,
                 "Exponents in [0, 1] of the Adam-p dial for a bare adam-p "
                 "in --opt, comma-separated (one pair set per p; adam-p0.5 "
                 "names one directly) [default: 0.5]");
  add_pair_flags(app, f.plan);
  add_engine_flags(app, f.engine, out_help, 2);
}

void setup_run(CLI::App& app, RunFlags& f) {
  add_pair_list_flags(app, f,
                      "Results file (JSON lines) [default: a new file "
                      "runs/<task>-<date>-<time>.jsonl]");
  app.add_flag("--list-optimizers", f.list_optimizers,
               "Print every registered optimizer with its predicted class "
               "and default learning rates, then exit");
}

sweep::PlanRequest plan_request(const RunFlags& f) {
  sweep::PlanRequest p = f.plan;
  if (!f.opts.empty())
    p.opts = split_list("--opt", f.opts);
  if (!f.twins.empty())
    p.twins = split_list("--twin", f.twins);
  p.init_seeds = parse_seeds("--init-seed", f.init_seeds);
  if (!f.twin_seeds.empty()) {
    p.twin_seeds = parse_seeds("--twin-seed", f.twin_seeds);
  }
  p.noise_scales = parse_reals("--noise-scale", f.noise_scales);
  if (!f.adam_ps.empty())
    p.adam_ps = parse_reals("--p", f.adam_ps);
  return p;
}

namespace {

void print_optimizers() {
  auto rate = [](const std::string& name, const char* task) {
    try {
      return fmt::format("{:g}", twins::default_lr(name, task));
    } catch (const c10::Error&) {
      return std::string("-");
    }
  };
  fmt::print("{:<14} {:<16} {:>9} {:>9}  {}\n", "name", "predicted", "lr mod",
             "lr charlm", "rule");
  for (const auto& name : optim::optimizer_names()) {
    const auto& info = optim::find_optimizer(name);
    fmt::print("{:<14} {:<16} {:>9} {:>9}  {}\n", info.name,
               optim::to_string(info.predicted), rate(name, "mod47"),
               rate(name, "charlm"), info.summary);
  }
}

}  // namespace

int run_run(const RunFlags& f) {
  if (f.list_optimizers) {
    print_optimizers();
    return 0;
  }
  // Everything is validated before the results file exists.
  const sweep::PlanRequest request = plan_request(f);
  twins::configure_determinism();  // before any CUDA call
  const std::vector<twins::PairSpec> specs = sweep::expand(request);
  twins::resolve_device(request.device);
  const int threads = 2;  // the copies of a pair side by side
  sweep::check_run(specs, engine_options(f.engine, "", threads));
  twins::check_task(specs.front());  // reads the corpus once, early
  const std::string path =
      !f.engine.out.empty() ? f.engine.out
                            : twins::fresh_path("runs", request.task, ".jsonl");
  const sweep::EngineOutcome run =
      sweep::run_sweep(specs, engine_options(f.engine, path, threads));
  fmt::print("{}", report::format_drift_table(results_of(run.records)));
  print_outcome(run, path);
  return 0;
}

}  // namespace app
