#include "app/run_cmd.h"

#include <fmt/format.h>

#include "app/common.h"
#include "app/flags.h"
#include "bridge/bridge.h"
#include "optim/registry.h"
#include "report/summary.h"
#include "twins/defaults.h"

namespace app {

void setup_run(CLI::App& app, RunFlags& flags) {
  add_pair_list_flags(app, flags.request, flags.opt_args,
                      "Results file (JSON lines) [default: a new file "
                      "runs/<task>-<date>-<time>.jsonl]");
  app.add_flag("--list-optimizers", flags.list_optimizers,
               "Print every registered optimizer with its predicted class "
               "and default learning rates, then exit");
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
  fmt::print("Python rules ({}): torch:NAME (torch.optim.NAME), "
             "py:MODULE:NAME, py:FILE.py:NAME, arguments as JSON "
             "(--opt-args); "
             "docs/extending.md\n",
             bridge::available() ? "this build runs them"
                                 : "not in this build");
}

}  // namespace

int run_run(const RunFlags& flags) {
  if (flags.list_optimizers) {
    print_optimizers();
    return 0;
  }
  const sweep::CommandOutcome o =
      sweep::run_command(with_python_rules(flags.request, flags.opt_args));
  fmt::print("{}{}", report::format_drift_table(o.results()), outcome_line(o));
  return 0;
}

}  // namespace app
