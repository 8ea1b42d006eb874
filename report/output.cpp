#include "report/output.h"

#include <fmt/format.h>

#include "report/plot.h"
#include "twins/io.h"

namespace report {

namespace {

// "figures: ...; script ..." on stdout, or why not in one line on stderr.
void say_drawn(const PlotFiles& f, const std::string& what) {
  if (!f.drawn) {
    fmt::print(stderr, "twin-run: {}\n", f.message);
    return;
  }
  fmt::print("{}; script {}\n", what, f.script);
}

}  // namespace

void draw_figures(const std::vector<twins::PairResult>& results,
                  const std::string& out, const std::string& title) {
  const PlotFiles f = plot_results(results, out, title);
  say_drawn(f, fmt::format("figures: {} (Figure 2), {} (per-head QK drift)",
                           f.drift_figure, f.qk_figure));
}

void write_outputs(const Aggregate& a,
                   const std::vector<twins::PairResult>& results,
                   const std::string& stem, bool plot,
                   const std::string& title) {
  const std::string md = to_markdown(a);
  fmt::print("{}\n", md);
  twins::write_text_atomically(stem + ".md", md);
  twins::write_text_atomically(stem + ".csv", to_csv(a));
  fmt::print("tables: {}.md, {}.csv\n", stem, stem);
  if (!plot || results.empty())
    return;
  if (a.layout == Layout::kMerge) {
    // The merge figure only: saved pairs measured again have no curves.
    const PlotFiles f = plot_merge(results, stem + "-merge.svg", title);
    say_drawn(f, fmt::format("figure: {} (loss along lambda)", f.drift_figure));
    return;
  }
  draw_figures(results, stem + ".svg", title);
  if (a.layout == Layout::kDial) {
    const PlotFiles f = plot_dial(results, stem + "-dial.svg", title);
    say_drawn(f, fmt::format("figure: {} (drift against p)", f.drift_figure));
  }
}

}  // namespace report
