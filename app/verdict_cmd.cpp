#include "app/verdict_cmd.h"

#include <fmt/format.h>

#include "app/common.h"
#include "app/flags.h"
#include "optim/registry.h"
#include "report/gauges.h"
#include "report/verdict.h"

namespace app {

CLI::App* setup_verdict(CLI::App& parent, VerdictFlags& flags) {
  CLI::App* cmd = parent.add_subcommand(
      "verdict",
      "Judge optimizers: per optimizer the gauge, identity, round-trip, "
      "noise 1e-7 and noise 1e-5 twins, and one line: equivariant, "
      "basis-dependent, did not move, unresolved, undetermined or invalid "
      "(nondeterministic), with what decided it (docs/protocol.md §10)");
  sweep::PlanRequest& p = flags.request.plan;
  add_names(*cmd, "--opt", p.opts,
            "Optimizers to judge, comma-separated (see --list-optimizers; "
            "Python rules: torch:NAME, py:MODULE:NAME, py:FILE.py:NAME)")
      ->required();
  add_opt_args(*cmd, flags.opt_args);
  add_reals(*cmd, "--p", p.adam_ps,
            "Exponents in [0, 1] for a bare adam-p in --opt, comma-separated "
            "[default: 0.5]");
  add_pair_flags(*cmd, p);
  add_names(*cmd, "--twin", p.twins,
            "Gauge twins to judge, one verdict each, comma-separated: gauge "
            "(W_Q/W_K rows), gauge-vo (W_V rows and W_O columns), gauge-all "
            "(both), gauge-full (--rope only: the unrestricted rotation, not "
            "a symmetry) [default: gauge]");
  cmd->add_option_function<uint64_t>(
         "--init-seed", [&p](uint64_t seed) { p.init_seeds = {seed}; },
         "Seed of the base model shared by the five pairs")
      ->default_str(std::to_string(p.init_seeds.front()))
      ->check(seed_number());
  add_engine_flags(*cmd, flags.request,
                   "Results file (JSON lines) [default: a new file "
                   "runs/verdict-<task>-<date>-<time>.jsonl]");
  return cmd;
}

int run_verdict(const VerdictFlags& flags) {
  const sweep::CommandOutcome o =
      sweep::run_command(with_python_rules(flags.request, flags.opt_args));
  for (const auto& v : report::judge_all(o.results())) {
    const auto predicted = report::predicted_for(v.opt, v.gauge);
    fmt::print(
        "{}; predicted {}\n", report::format_verdict_line(v),
        predicted ? optim::to_string(*predicted) : "none for this gauge");
  }
  fmt::print("{}", outcome_line(o));
  return 0;
}

}  // namespace app
