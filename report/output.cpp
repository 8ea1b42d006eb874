#include "report/output.h"

#include <fmt/format.h>

#include "report/plot.h"
#include "twins/io.h"

namespace report {

namespace {

// "figure(s): ... (what they show); script ..." on stdout, or why not in
// one line on stderr.
void say_drawn(const Plot& plot, const PlotFiles& f) {
  if (!f.drawn) {
    fmt::print(stderr, "twin-run: {}\n", f.message);
    return;
  }
  const std::string what =
      plot.qk_caption
          ? fmt::format("figures: {} ({}), {} ({})", f.drift_figure,
                        plot.caption, f.qk_figure, plot.qk_caption)
          : fmt::format("figure: {} ({})", f.drift_figure, plot.caption);
  fmt::print("{}; script {}\n", what, f.script);
}

}  // namespace

void draw_figures(const std::vector<twins::PairResult>& results,
                  const std::string& out, const std::string& title) {
  say_drawn(kDriftPlot, plot_results(results, out, title));
}

void write_outputs(const Aggregate& aggregate,
                   const std::vector<twins::PairResult>& results,
                   const std::string& stem, bool plot,
                   const std::string& title) {
  const std::string md = to_markdown(aggregate);
  fmt::print("{}\n", md);
  twins::write_text_atomically(stem + ".md", md);
  twins::write_text_atomically(stem + ".csv", to_csv(aggregate));
  fmt::print("tables: {}.md, {}.csv\n", stem, stem);
  if (!plot || results.empty())
    return;
  for (const Plot* p : aggregate.layout.plots) {
    say_drawn(*p, p->draw(Inputs{results, aggregate.census},
                           stem + p->suffix, title));
  }
}

}  // namespace report
