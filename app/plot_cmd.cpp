#include "app/plot_cmd.h"

#include <filesystem>
#include <set>

#include "app/common.h"
#include "report/output.h"
#include "sweep/results.h"

namespace app {

namespace fs = std::filesystem;

CLI::App* setup_plot(CLI::App& parent, PlotFlags& f) {
  CLI::App* cmd = parent.add_subcommand(
      "plot",
      "Draw the paper's Figure 2 (relative logit drift against step, log "
      "axes; one colour per optimizer, gauge twins solid, noise twins "
      "dotted) and the final per-head QK drift per optimizer from results "
      "files, with gnuplot");
  cmd->add_option("files", f.files,
                  "Results files (JSON lines); several are merged")
      ->required();
  cmd->add_option("-o,--out", f.out,
                  "Figure file, .svg or .png; the QK figure goes to "
                  "OUT-qk.svg, the gnuplot script and data beside it "
                  "[default: FILE.svg next to the first file]");
  return cmd;
}

int run_plot(const PlotFlags& f) {
  const std::vector<sweep::StoredRecord> records = sweep::read_records(f.files);
  const fs::path first(f.files.front());
  const std::string out =
      !f.out.empty() ? f.out
                     : (first.parent_path() / first.stem()).string() + ".svg";
  std::set<std::string> tasks;
  for (const auto& r : records)
    tasks.insert(r.result.spec.task);
  std::string title = "twin-run results:";
  for (const auto& t : tasks)
    title += " " + t;
  report::draw_figures(results_of(records), out, title);
  return 0;
}

}  // namespace app
