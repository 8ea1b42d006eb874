#include "app/plot_cmd.h"

#include <set>

#include "app/flags.h"
#include "report/output.h"
#include "sweep/results.h"
#include "twins/io.h"

namespace app {

CLI::App* setup_plot(CLI::App& parent, PlotFlags& flags) {
  CLI::App* cmd = parent.add_subcommand(
      "plot",
      "Draw the paper's Figure 2 (relative logit drift against step, log "
      "axes; one colour per optimizer, gauge twins solid, noise twins "
      "dotted) and the final per-head QK drift per optimizer from results "
      "files, with gnuplot");
  cmd->add_option("files", flags.files,
                  "Results files (JSON lines); several are merged")
      ->required()
      ->check(non_empty());
  cmd->add_option("-o,--out", flags.out,
                  "Figure file, .svg or .png; the QK figure goes to "
                  "OUT-qk.svg, the gnuplot script and data beside it "
                  "[default: FILE.svg next to the first file]");
  add_allow_mixed_env_flag(*cmd, flags.allow_mixed_env);
  return cmd;
}

int run_plot(const PlotFlags& flags) {
  std::vector<twins::PairResult> results;
  std::set<std::string> tasks;
  for (const auto& r :
       sweep::read_records(flags.files, flags.allow_mixed_env)) {
    results.push_back(r.result);
    tasks.insert(r.result.spec.task);
  }
  const std::string out =
      !flags.out.empty() ? flags.out
                         : twins::summary_stem(flags.files.front()) + ".svg";
  std::string title = "twin-run results:";
  for (const auto& t : tasks)
    title += " " + t;
  report::draw_figures(results, out, title);
  return 0;
}

}  // namespace app
