#include "app/plot_cmd.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "twins/plot.h"
#include "twins/tables.h"

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

std::vector<twins::StoredRecord> read_records(
    const std::vector<std::string>& files) {
  std::vector<twins::ResultsFile> read;
  for (const auto& path : files) {
    read.push_back(twins::read_results(path));
    if (read.back().truncated_tail) {
      fmt::print(stderr,
                 "twin-run: note: {}: ignoring a truncated last line (a "
                 "record interrupted mid-write)\n",
                 path);
    }
  }
  int duplicates = 0;
  std::vector<twins::StoredRecord> records =
      twins::merge_records(read, &duplicates);
  if (duplicates > 0) {
    fmt::print(stderr,
               "twin-run: note: {} record(s) repeat a key already read; "
               "the first of each is used\n",
               duplicates);
  }
  std::string names;
  for (const auto& p : files) {
    names += (names.empty() ? "'" : ", '") + p + "'";
  }
  TORCH_CHECK(!records.empty(), "results file(s) ", names, " hold no records");
  return records;
}

std::string records_title(const std::vector<twins::StoredRecord>& records) {
  std::set<std::string> tables, tasks;
  for (const auto& r : records) {
    tables.insert(r.json.value("table", ""));
    tasks.insert(r.result.spec.task);
  }
  if (tables.size() == 1 && !tables.begin()->empty()) {
    try {
      const std::string& name = *tables.begin();
      const twins::Table t = twins::make_table(
          name, twins::overrides_of(name, records.front().result.spec));
      std::string title = t.title;
      for (const auto& d : t.deviations) {
        title += "; " + d;
      }
      return title;
    } catch (const std::exception&) {
      // a table this build does not know: fall through to the tasks
    }
  }
  std::string t;
  for (const auto& s : tasks) {
    t += (t.empty() ? "" : ", ") + s;
  }
  return "twin-run results: " + t;
}

namespace {

std::vector<twins::PairResult> results_of(
    const std::vector<twins::StoredRecord>& records) {
  std::vector<twins::PairResult> results;
  for (const auto& r : records) {
    results.push_back(r.result);
  }
  return results;
}

// "figures: ...; script ..." on stdout, or why not in one line on stderr.
void say_drawn(const twins::PlotFiles& f, const std::string& what) {
  if (!f.drawn) {
    fmt::print(stderr, "twin-run: {}\n", f.message);
    return;
  }
  fmt::print("{}; script {}\n", what, f.script);
}

}  // namespace

void draw(const std::vector<twins::StoredRecord>& records,
          const std::string& out) {
  const twins::PlotFiles f =
      twins::plot_results(results_of(records), out, records_title(records));
  say_drawn(f, fmt::format("figures: {} (Figure 2), {} (per-head QK drift)",
                           f.drift_figure, f.qk_figure));
}

void draw_dial(const std::vector<twins::StoredRecord>& records,
               const std::string& out) {
  const twins::PlotFiles f =
      twins::plot_dial(results_of(records), out, records_title(records));
  say_drawn(f, fmt::format("figure: {} (drift against p)", f.drift_figure));
}

int run_plot(const PlotFlags& f) {
  const std::vector<twins::StoredRecord> records = read_records(f.files);
  const fs::path first(f.files.front());
  const std::string out =
      !f.out.empty() ? f.out
                     : (first.parent_path() / first.stem()).string() + ".svg";
  draw(records, out);
  return 0;
}

}  // namespace app
