#include "report/plot.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "report/aggregate.h"
#include "report/census.h"
#include "report/summary.h"
#include "twins/io.h"

namespace report {

namespace fs = std::filesystem;
using twins::PairResult;
using twins::PairSpec;
using twins::shell_quoted;
using twins::TwinKind;
using twins::write_text_atomically;

namespace {

// Okabe–Ito colours; the paper draws Adam in vermilion.
const std::map<std::string, const char*> kOptimizerColours = {
    {"adam", "#D55E00"},
    {"sgd", "#0072B2"},
    {"scalar-adam", "#009E73"},
    {"muon", "#CC79A7"},
};
const char* const kMoreColours[] = {"#E69F00", "#56B4E9", "#000000", "#999999",
                                    "#F0E442"};

// Values at or below this are drawn at it on the log colour scale.
constexpr double kLogFloor = 1e-17;

std::string gp_string(const std::string& s) {  // a gnuplot string literal
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += c;
  }
  return out + "\"";
}

// Curves that share a colour, a dash pattern and one legend entry.
struct Group {
  std::string opt;
  TwinKind twin;
  double scale;
  std::vector<const PairResult*> pairs;
};

std::vector<Group> group_pairs(const std::vector<PairResult>& results) {
  std::vector<Group> groups;
  for (const auto& r : results) {
    const double scale =
        r.spec.twin == TwinKind::kNoise ? r.spec.noise_scale : 0.0;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.opt == r.spec.opt && g.twin == r.spec.twin && g.scale == scale;
    });
    if (it == groups.end()) {
      groups.push_back({r.spec.opt, r.spec.twin, scale, {}});
      it = groups.end() - 1;
    }
    it->pairs.push_back(&r);
  }
  return groups;
}

std::string terminal(const std::string& ext, int width, int height) {
  if (ext == ".png") {
    return fmt::format(
        "set terminal pngcairo size {},{} font \"sans,11\" noenhanced", width,
        height);
  }
  return fmt::format(
      "set terminal svg size {},{} font \"sans,12\" background \"#ffffff\" "
      "noenhanced",
      width, height);
}

// ---------------------------------------------------------------------------
// Figure 2: drift against step

// Writes one data block per pair (steps >= 1 with a positive drift: a log
// axis has no 0) and returns the plot clauses.
std::vector<std::string> drift_plot(
    const std::vector<Group>& groups, const std::string& data_name,
    std::ostream& data, std::map<std::string, std::string>& colour) {
  std::vector<std::string> clauses;
  int block = 0;
  for (const auto& g : groups) {
    const std::string label = fmt::format(
        "{} {}{}", display_name(g.opt),
        twins::twin_label(g.pairs.front()->spec),
        g.pairs.size() > 1 ? fmt::format(" ({} pairs)", g.pairs.size())
                           : std::string());
    bool titled = false;
    bool all_zero = true;
    for (const auto* r : g.pairs) {
      std::vector<std::pair<int64_t, double>> points;
      for (const auto& c : r->curve) {
        if (c.logit_drift != 0) {
          all_zero = false;
        }
        if (c.step >= 1 && c.logit_drift > 0 && std::isfinite(c.logit_drift)) {
          points.emplace_back(c.step, c.logit_drift);
        }
      }
      if (points.empty()) {
        continue;
      }
      data << "# " << pair_label(r->spec) << "\n# step logit_drift\n";
      for (const auto& [s, v] : points) {
        data << fmt::format("{} {:.6e}\n", s, v);
      }
      data << "\n\n";
      const char* dash = g.twin == TwinKind::kGauge   ? "1"
                         : g.twin == TwinKind::kNoise ? "3"
                                                      : "4";
      clauses.push_back(fmt::format(
          "{} index {} using 1:2 with linespoints pt 7 ps 0.4 lw {} dt {} "
          "lc rgb {} {}",
          gp_string(data_name), block++, g.twin == TwinKind::kNoise ? 2.5 : 2,
          dash, gp_string(colour[g.opt]),
          titled
              ? "notitle"
              : "title " + gp_string(g.twin == TwinKind::kIdentity
                                         ? label + ": NOT 0 (determinism bug)"
                                         : label)));
      titled = true;
    }
    if (!titled && all_zero) {
      // Exactly 0 at every checkpoint: nothing to draw on log axes, so the
      // legend says it.
      clauses.push_back(
          fmt::format("keyentry with points pt -1 lc rgb {} title {}",
                      gp_string(colour[g.opt]),
                      gp_string(label + ": exactly 0 at every step")));
    }
  }
  return clauses;
}

// ---------------------------------------------------------------------------
// Per-head QK drift (layers x heads) per optimizer

struct Heatmap {
  std::string opt;
  int64_t layers = 0, heads = 0;
  std::vector<double> values;  // layer-major, mean over the gauge pairs
  size_t pairs = 0;
};

std::vector<Heatmap> qk_heatmaps(const std::vector<PairResult>& results) {
  std::vector<Heatmap> maps;
  const PairSpec* shape = nullptr;
  for (const auto& r : results) {
    if (r.spec.twin != TwinKind::kGauge || r.qk_per_head.empty()) {
      continue;
    }
    if (!shape) {
      shape = &r.spec;
    }
    if (r.spec.depth != shape->depth || r.spec.heads != shape->heads ||
        static_cast<int64_t>(r.qk_per_head.size()) !=
            shape->depth * shape->heads) {
      continue;  // one shape per figure: the first gauge pair's
    }
    auto it = std::find_if(maps.begin(), maps.end(), [&](const Heatmap& m) {
      return m.opt == r.spec.opt;
    });
    if (it == maps.end()) {
      maps.push_back({r.spec.opt, shape->depth, shape->heads,
                      std::vector<double>(r.qk_per_head.size(), 0.0), 0});
      it = maps.end() - 1;
    }
    for (size_t i = 0; i < r.qk_per_head.size(); ++i) {
      it->values[i] += r.qk_per_head[i];
    }
    ++it->pairs;
  }
  for (auto& m : maps) {
    for (auto& v : m.values) {
      v /= double(m.pairs);
    }
  }
  return maps;
}

std::string stem_of(const std::string& out) {
  return (fs::path(out).parent_path() / fs::path(out).stem()).string();
}

// Runs gnuplot on `script` in its directory; throws with gnuplot's first
// error line when it fails.
void run_gnuplot(const std::string& gnuplot, const std::string& script) {
  const fs::path dir = fs::absolute(script).parent_path();
  const std::string err =
      (dir / (fs::path(script).filename().string() + ".log")).string();
  const std::string cmd = fmt::format(
      "cd {} && {} {} 2>{}", shell_quoted(dir.string()), shell_quoted(gnuplot),
      shell_quoted(fs::path(script).filename().string()), shell_quoted(err));
  const int status = std::system(cmd.c_str());
  std::string first;
  {
    std::ifstream in(err);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t^") != std::string::npos) {
        first = line;
        break;
      }
    }
  }
  const bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) {
    std::remove(err.c_str());
  }
  TORCH_CHECK(ok, "gnuplot failed on '", script,
              "': ", first.empty() ? "no message" : first, " (log: ", err, ")");
}

std::string file_name(const std::string& path) {
  return fs::path(path).filename().string();
}

// Whether the script at f.script is one twin-run wrote for these figures:
// it says so on its first line and sets its output to f.drift_figure. Its
// figures, data and log are then twin-run's too; a user's own fig2.gp (or
// a fig2.svg, fig2.dat with no such script beside it) is not.
bool own_script(const PlotFiles& f) {
  std::ifstream in(f.script, std::ios::binary);
  if (!in)
    return false;
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  return text.rfind("# Drawn by twin-run", 0) == 0 &&
         text.find("set output " + gp_string(file_name(f.drift_figure))) !=
             std::string::npos;
}

// Every file of `f` (figures, script, its log, data) checked before the
// first is written: none may be an input, a device, a directory or a link,
// and one that is there must be twin-run's (own_script): a file of the
// user's is never replaced.
void check_files(const PlotFiles& f) {
  const std::string log = f.script + ".log";
  const bool own = own_script(f);
  for (const std::string* path : {&f.drift_figure, &f.qk_figure, &f.script,
                                  &f.drift_data, &f.qk_data, &log}) {
    if (path->empty())
      continue;
    twins::check_output_file(*path, path == &log ? "gnuplot log" : "plot file");
    std::error_code ec;
    TORCH_CHECK(own || !fs::exists(*path, ec), "Cannot write plot file '",
                *path, "': a file of that name is there and twin-run did not "
                "write it (no script '", f.script, "' of twin-run's draws it); "
                "nothing was changed: move it, or plot to another name");
  }
}

void prepare_directory(const std::string& out) {
  twins::make_directories(fs::path(out).parent_path().string());
}

// Runs gnuplot on f.script when there is one on PATH and checks that the
// figures (f.drift_figure, and f.qk_figure when set) were written; without
// gnuplot, f.message says how to draw them later.
void draw_files(PlotFiles& f) {
  const std::string gnuplot = find_on_path("gnuplot");
  const std::string script = fs::path(f.script).filename().string();
  if (gnuplot.empty()) {
    f.message = fmt::format(
        "gnuplot not found on PATH: wrote {} and its data; draw with "
        "`cd {} && gnuplot {}` (Debian: apt-get install gnuplot-nox)",
        f.script, fs::absolute(f.script).parent_path().string(), script);
    return;
  }
  // Old figures out of the way, so that "drawn" means drawn now.
  std::error_code ec;
  fs::remove(f.drift_figure, ec);
  if (!f.qk_figure.empty())
    fs::remove(f.qk_figure, ec);
  run_gnuplot(gnuplot, f.script);
  f.drawn = fs::exists(f.drift_figure) &&
            (f.qk_figure.empty() || fs::exists(f.qk_figure));
  TORCH_CHECK(f.drawn, "gnuplot ran but did not write ", f.drift_figure,
              f.qk_figure.empty() ? "" : " and " + f.qk_figure);
}

// The extension of figure `out`: .svg or .png; throws for any other.
std::string figure_extension(const std::string& out) {
  const std::string ext = fs::path(out).extension().string();
  TORCH_CHECK(ext == ".svg" || ext == ".png", "Unknown figure format: '", out,
              "' (the name must end in .svg or .png)");
  return ext;
}

// The files of a plot that draws one figure at `out`: OUT.gp and OUT.dat.
PlotFiles one_figure_files(const std::string& out) {
  PlotFiles f;
  f.drift_figure = out;
  f.script = stem_of(out) + ".gp";
  f.drift_data = stem_of(out) + ".dat";
  check_files(f);
  prepare_directory(out);
  return f;
}

// `clauses` as one gnuplot plot command, one clause a line.
std::string plot_command(const std::vector<std::string>& clauses) {
  std::string s = "plot ";
  for (size_t i = 0; i < clauses.size(); ++i) {
    s += (i ? ", \\\n     " : "") + clauses[i];
  }
  return s + "\n";
}

// ---------------------------------------------------------------------------
// Figure 2 and the per-head QK drift: the two figures of plot_results

// The paper's colour of each optimizer where it has one, then the other
// Okabe–Ito colours in first-seen order.
std::map<std::string, std::string> colours_of(
    const std::vector<Group>& groups) {
  std::map<std::string, std::string> colour;
  size_t more = 0;
  for (const auto& g : groups) {
    if (colour.count(g.opt)) {
      continue;
    }
    auto it = kOptimizerColours.find(g.opt);
    colour[g.opt] = it != kOptimizerColours.end()
                        ? it->second
                        : kMoreColours[more++ % std::size(kMoreColours)];
  }
  return colour;
}

// Figure 2: writes f.drift_data and returns the script that draws
// f.drift_figure.
std::string drift_figure_script(const std::vector<PairResult>& results,
                                const PlotFiles& f, const std::string& ext,
                                const std::string& title) {
  const std::vector<Group> groups = group_pairs(results);
  std::map<std::string, std::string> colour = colours_of(groups);
  int64_t last_step = 1;
  for (const auto& r : results) {
    last_step = std::max(last_step, r.spec.steps);
  }
  std::ostringstream data;
  data << "# " << title << "\n# relative logit drift per pair; "
       << "one block (gnuplot index) per pair\n";
  const std::vector<std::string> clauses =
      drift_plot(groups, file_name(f.drift_data), data, colour);
  write_text_atomically(f.drift_data, data.str());

  std::string gp = fmt::format(
      "# Drawn by twin-run plot; rerun with: gnuplot {}\n"
      "# Figure 2 (paper): relative logit drift between twins against step.\n"
      "set encoding utf8\n{}\nset output {}\n"
      "set label 1 {} at screen 0.01, 0.96 left\n"
      "set label 2 \"Figure 2: relative logit drift between the twins; gauge "
      "twins solid, noise twins dotted\" at screen 0.01, 0.92 left\n"
      "set tmargin 5\nset logscale xy\nset format y \"1e%T\"\n"
      "set xlabel \"training step\"\n"
      "set ylabel \"relative logit drift ‖Z − Z′‖ / mean ‖Z‖\"\n"
      "set grid\nset key outside right top\nset xrange [1:{}]\n",
      file_name(f.script), terminal(ext, 1100, 620),
      gp_string(file_name(f.drift_figure)), gp_string(title),
      std::max<int64_t>(last_step, 2));
  gp += clauses.empty() ? "plot NaN notitle\n" : plot_command(clauses);
  return gp + "unset output\nreset\n\n";
}

// The heatmaps as gnuplot matrices, one block per optimizer, each value
// floored at kLogFloor; [lo, hi] gets the range of the log colour scale.
std::string qk_data_text(const std::vector<Heatmap>& maps, double& lo,
                         double& hi) {
  std::ostringstream data;
  lo = 1, hi = 0;
  for (const auto& m : maps) {
    data << fmt::format(
        "# {} gauge: final QK drift, mean of {} pair(s); rows = layers, "
        "columns = heads\n",
        display_name(m.opt), m.pairs);
    for (int64_t l = 0; l < m.layers; ++l) {
      for (int64_t h = 0; h < m.heads; ++h) {
        const double v = std::max(m.values[l * m.heads + h], kLogFloor);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        data << fmt::format("{}{:.6e}", h ? " " : "", v);
      }
      data << "\n";
    }
    data << "\n\n";
  }
  if (hi <= lo) {
    hi = lo * 10;
  }
  return data.str();
}

// One heatmap panel, block `i` of `data`; labels at or above `dark` on
// the log colour scale are white.
std::string qk_panel(const Heatmap& m, size_t i, const std::string& data,
                     double dark) {
  return fmt::format(
      "set title {}\nset xrange [-0.5:{}.5]\nset yrange [-0.5:{}.5] "
      "reverse\nset xtics 1\nset ytics 1\n"
      "plot {} index {} matrix with image notitle, \\\n"
      "     '' index {} matrix using 1:2:($3 < {:.3e} ? sprintf(\"%.1e\", "
      "$3) : \"\") with labels font \",8\" tc rgb \"#000000\" notitle, "
      "\\\n"
      "     '' index {} matrix using 1:2:($3 >= {:.3e} ? sprintf(\"%.1e\", "
      "$3) : \"\") with labels font \",8\" tc rgb \"#ffffff\" "
      "notitle\n",
      gp_string(fmt::format("{} (mean of {} pair{})", display_name(m.opt),
                            m.pairs, m.pairs == 1 ? "" : "s")),
      m.heads - 1, m.layers - 1, gp_string(data), i, i, dark, i, dark);
}

// The per-head QK drift, one panel per optimizer on a shared log colour
// scale: writes f.qk_data and returns the script that draws f.qk_figure.
std::string qk_figure_script(const std::vector<PairResult>& results,
                             const PlotFiles& f, const std::string& ext,
                             const std::string& title) {
  const std::vector<Heatmap> maps = qk_heatmaps(results);
  double lo = 1, hi = 0;
  write_text_atomically(f.qk_data, qk_data_text(maps, lo, hi));
  // Labels on the darker half of the log colour scale are white.
  const double dark =
      std::pow(10.0, std::log10(lo) + 0.6 * (std::log10(hi) - std::log10(lo)));
  const size_t panels = std::max<size_t>(maps.size(), 1);
  const size_t cols = std::min<size_t>(panels, 4);
  const size_t rows = (panels + cols - 1) / cols;
  std::string gp = fmt::format(
      "# Final per-head QK drift ‖P − P′‖ / mean ‖P‖, P = W_Q,h^T W_K,h, of "
      "the gauge twins.\n{}\nset output {}\n"
      "set multiplot layout {},{} title {}\n"
      "set logscale cb\nset cbrange [{:.3e}:{:.3e}]\nset format cb \"1e%T\"\n"
      "set palette defined (0 \"#fff7bc\", 1 \"#fe9929\", 2 \"#cc4c02\", "
      "3 \"#662506\")\n"
      "set xlabel \"head\"\nset ylabel \"layer\"\nset yrange [] reverse\n",
      terminal(ext, static_cast<int>(300 + 330 * cols),
               static_cast<int>(120 + 300 * rows)),
      gp_string(file_name(f.qk_figure)), rows, cols,
      gp_string(title + ": final per-head QK drift of the gauge twins"), lo,
      hi);
  if (maps.empty()) {
    gp += "set title \"no gauge pairs\"\nplot NaN notitle\n";
  }
  for (size_t i = 0; i < maps.size(); ++i) {
    gp += qk_panel(maps[i], i, file_name(f.qk_data), dark);
  }
  return gp + "unset multiplot\nunset output\n";
}

// ---------------------------------------------------------------------------
// The dial figure

std::string dial_data_text(const std::vector<DialPoint>& points,
                           const std::string& title) {
  std::string data = fmt::format(
      "# {}\n# Adam-p gauge twins: relative logit drift against p ('?': "
      "none)\n# p init step0 step1 step100 final\n",
      title);
  auto cell = [](double v) {
    return v > 0 && std::isfinite(v) ? fmt::format("{:.6e}", v)
                                     : std::string("?");
  };
  for (const auto& d : points) {
    data +=
        fmt::format("{:g} {} {} {} {} {}\n", d.p, d.init_seed, cell(d.step0),
                    cell(d.step1), cell(d.step100), cell(d.final));
  }
  return data;
}

std::string dial_script(const PlotFiles& f, const std::string& ext,
                        const std::string& title) {
  return fmt::format(
      "# Drawn by twin-run table dial --plot; rerun with: gnuplot {}\n"
      "set encoding utf8\n{}\nset output {}\n"
      "set label 1 {} at screen 0.01, 0.96 left\nset tmargin 4\n"
      "set datafile missing \"?\"\n"
      "set logscale y\nset format y \"1e%T\"\nset xrange [-0.05:1.05]\n"
      "set xlabel \"Adam-p exponent p (0: scalar-Adam, equivariant; 1: "
      "Adam)\"\n"
      "set ylabel \"relative logit drift of the gauge twin\"\n"
      "set grid\nset key outside right top\n"
      "plot {} using 1:4 with linespoints lw 2 pt 7 lc rgb \"#D55E00\" "
      "title \"step 1\", \\\n"
      "     '' using 1:5 with linespoints lw 2 pt 5 lc rgb \"#0072B2\" "
      "title \"step 100\", \\\n"
      "     '' using 1:6 with linespoints lw 2 pt 9 lc rgb \"#009E73\" "
      "title \"final\", \\\n"
      "     '' using 1:3 with linespoints dt 2 lc rgb \"#999999\" "
      "title \"step 0 (float floor)\"\n"
      "unset output\n",
      file_name(f.script), terminal(ext, 1040, 560),
      gp_string(file_name(f.drift_figure)), gp_string(title),
      gp_string(file_name(f.drift_data)));
}

// ---------------------------------------------------------------------------
// The head-merging figure

// One panel: each pair's loss along lambda at its last merge step, naive
// dashed and aligned solid in one colour per pair. Appends the pairs' data
// blocks to `data`, numbered from `block` on, and returns the panel's
// script.
std::string merge_panel(const std::string& opt,
                        const std::vector<const PairResult*>& pairs,
                        const std::string& dat, int& block, std::string& data) {
  const char* const twin_colours[] = {"#D55E00", "#0072B2", "#009E73",
                                      "#CC79A7", "#E69F00", "#56B4E9"};
  auto cell = [](double v) {
    return std::isfinite(v) ? fmt::format("{:.9g}", v) : std::string("?");
  };
  std::vector<std::string> clauses;
  int colour = 0;
  for (const PairResult* r : pairs) {
    const twins::MergePoint& m = r->merges.back();
    data += fmt::format("# {} step {}\n", twins::pair_label(r->spec), m.step);
    for (size_t i = 0; i < m.lambdas.size(); ++i) {
      data += fmt::format("{} {} {}\n", m.lambdas[i], cell(m.naive.loss[i]),
                          cell(m.aligned.loss[i]));
    }
    data += "\n\n";
    const char* c = twin_colours[colour++ % 6];
    const std::string label = twins::twin_label(r->spec);
    clauses.push_back(fmt::format(
        "{} index {} using 1:2 with linespoints dt 2 pt 6 lc rgb \"{}\" "
        "notitle",
        dat, block, c));
    clauses.push_back(fmt::format(
        "{} index {} using 1:3 with linespoints lw 2 pt 7 lc rgb \"{}\" "
        "title {}",
        dat, block, c, gp_string(fmt::format("{} (step {})", label, m.step))));
    ++block;
  }
  return fmt::format("set title {}\n", gp_string(display_name(opt))) +
         plot_command(clauses);
}

}  // namespace

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) {
    return "";
  }
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) {
      dir = ".";
    }
    const std::string candidate = dir + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

PlotFiles plot_results(const std::vector<PairResult>& results,
                       const std::string& out, const std::string& title) {
  const std::string ext = figure_extension(out);
  TORCH_CHECK(!results.empty(), "No pairs to plot");
  const std::string stem = stem_of(out);
  PlotFiles f;
  f.drift_figure = out;
  f.qk_figure = stem + "-qk" + ext;
  f.script = stem + ".gp";
  f.drift_data = stem + "-drift.dat";
  f.qk_data = stem + "-qk.dat";
  check_files(f);
  prepare_directory(out);
  const std::string gp = drift_figure_script(results, f, ext, title) +
                         qk_figure_script(results, f, ext, title);
  write_text_atomically(f.script, gp);
  draw_files(f);
  return f;
}

PlotFiles plot_dial(const std::vector<PairResult>& results,
                    const std::string& out, const std::string& title) {
  const std::string ext = figure_extension(out);
  const std::vector<DialPoint> points = dial_points(results);
  TORCH_CHECK(!points.empty(), "No adam-p gauge pairs to plot");
  PlotFiles f = one_figure_files(out);
  write_text_atomically(f.drift_data, dial_data_text(points, title));
  write_text_atomically(f.script, dial_script(f, ext, title));
  draw_files(f);
  return f;
}

PlotFiles plot_merge(const std::vector<PairResult>& results,
                     const std::string& out, const std::string& title) {
  const std::string ext = figure_extension(out);
  // Panels in first-seen optimizer order; in each, one pair per line.
  std::vector<std::string> opts;
  std::map<std::string, std::vector<const PairResult*>> by_opt;
  for (const auto& r : results) {
    if (r.merges.empty())
      continue;
    if (!by_opt.count(r.spec.opt))
      opts.push_back(r.spec.opt);
    by_opt[r.spec.opt].push_back(&r);
  }
  TORCH_CHECK(!opts.empty(), "No pairs with merge measurements to plot");
  PlotFiles f = one_figure_files(out);
  std::string data = fmt::format(
      "# {}\n# validation loss along lambda at the last merge step: lambda "
      "naive aligned, one block per pair\n",
      title);
  const size_t cols = std::min<size_t>(3, opts.size());
  const size_t rows = (opts.size() + cols - 1) / cols;
  std::string gp = fmt::format(
      "# Drawn by twin-run --plot; rerun with: gnuplot {}\n"
      "set encoding utf8\n{}\nset output {}\n"
      "set multiplot layout {},{} title {}\n"
      "set datafile missing \"?\"\nset grid\nset key top center font \",9\"\n"
      "set xlabel \"lambda (0: copy 1, 1: copy 2)\"\n"
      "set ylabel \"validation loss\"\n",
      file_name(f.script), terminal(ext, int(420 * cols), int(340 * rows)),
      gp_string(file_name(out)), rows, cols,
      gp_string(title + " (dashed: naive, solid: aligned)"));
  const std::string dat = gp_string(file_name(f.drift_data));
  int block = 0;
  for (const auto& opt : opts) {
    gp += merge_panel(opt, by_opt[opt], dat, block, data);
  }
  gp += "unset multiplot\nunset output\n";
  write_text_atomically(f.drift_data, data);
  write_text_atomically(f.script, gp);
  draw_files(f);
  return f;
}

// `title` as a gnuplot string on two lines where it is longer than a
// figure is wide: cut at the ", " nearest its middle (gnuplot's "\n").
std::string two_line_title(const std::string& title) {
  if (title.size() <= 100)
    return gp_string(title);
  const size_t middle = title.size() / 2;
  const size_t before = title.rfind(", ", middle);
  const size_t after = title.find(", ", middle);
  const size_t cut =
      before == std::string::npos ? after
      : after == std::string::npos || middle - before <= after - middle
          ? before
          : after;
  if (cut == std::string::npos)
    return gp_string(title);
  const std::string first = gp_string(title.substr(0, cut + 1));
  return first.substr(0, first.size() - 1) + "\\n" +
         gp_string(title.substr(cut + 2)).substr(1);
}

namespace {

// The census figure's colours: the predicted class.
constexpr int kEquivariantColour = 0x1f77b4, kDependentColour = 0xd62728,
              kUnknownColour = 0x7f7f7f;

// One panel of the census figure: its data blocks (from index `first` of
// the data file on) and its plot command.
struct CensusPanel {
  std::string data;
  std::string plot;
  size_t blocks = 0;
};

// Columns: equivariant 0, basis-dependent 1, anything else 2; each point
// spread across its column by its place in the census (deterministic).
// The colour is the predicted class, the point type the library; a rule
// measured in the other class than predicted is named beside its point.
CensusPanel census_panel(const std::vector<CensusPoint>& points,
                         const std::string& dat, size_t first) {
  std::vector<std::string> libraries;
  std::map<std::string, std::string> blocks;
  std::map<std::string, size_t> seen;
  std::string named;
  for (const CensusPoint& p : points) {
    if (!blocks.count(p.library))
      libraries.push_back(p.library);
    const double column = p.verdict == "equivariant"       ? 0
                          : p.verdict == "basis-dependent" ? 1
                                                           : 2;
    const size_t n = seen[p.verdict]++;
    const double x = column - 0.35 + 0.7 * double((n * 37) % 101) / 100.0;
    const double y = std::isfinite(p.separation) && p.separation > 0
                         ? p.separation
                         : 1e-3;  // an exact zero, drawn at the floor
    const int colour = p.predicted == "equivariant"       ? kEquivariantColour
                       : p.predicted == "basis-dependent" ? kDependentColour
                                                          : kUnknownColour;
    blocks[p.library] +=
        fmt::format("{:.4f} {:.6e} {} {}\n", x, y, colour, gp_string(p.rule));
    if (column < 2 && !p.predicted.empty() && p.predicted != p.verdict)
      named += fmt::format("{:.4f} {:.6e} {}\n", x, y, gp_string(p.rule));
  }
  CensusPanel panel;
  std::vector<std::string> clauses;
  constexpr int kPointTypes[] = {7, 5, 9, 11, 13, 15, 1, 2, 3, 4, 6, 8};
  for (size_t i = 0; i < libraries.size(); ++i) {
    panel.data += blocks[libraries[i]] + "\n\n";
    clauses.push_back(fmt::format(
        "{} index {} using 1:2:3 with points pt {} ps 0.9 lc rgb variable "
        "title {}",
        i == 0 ? dat : "''", first + i,
        kPointTypes[i % std::size(kPointTypes)], gp_string(libraries[i])));
  }
  panel.blocks = libraries.size();
  if (!named.empty()) {
    panel.data += named + "\n\n";
    clauses.push_back(fmt::format(
        "'' index {} using 1:2:3 with labels left offset 0.6,0 font \",7\" "
        "notitle",
        first + panel.blocks));
    ++panel.blocks;
  }
  clauses.push_back(fmt::format(
      "NaN with points pt 7 lc rgb \"#{:06x}\" title \"predicted "
      "equivariant\"",
      kEquivariantColour));
  clauses.push_back(fmt::format(
      "NaN with points pt 7 lc rgb \"#{:06x}\" title \"predicted "
      "basis-dependent\"",
      kDependentColour));
  clauses.push_back("10 with lines dt 2 lc rgb \"#666666\" title \"10x\"");
  panel.plot = fmt::format(
      "set ylabel \"separation, {} (gauge / round trip)\"\n{}\n",
      points.front().dtype, plot_command(clauses));
  return panel;
}

}  // namespace

PlotFiles plot_census(const std::vector<PairResult>& results,
                      const std::vector<twins::CensusRule>& census,
                      const std::string& out, const std::string& title) {
  const std::string ext = figure_extension(out);
  // One panel per dtype (a census run in both precisions), each judged on
  // its own records: float32 above float64.
  std::map<std::string, std::vector<PairResult>> by_dtype;
  for (const PairResult& r : results)
    by_dtype[twins::dtype_name(r.spec.dtype)].push_back(r);
  PlotFiles f = one_figure_files(out);
  const std::string dat = gp_string(file_name(f.drift_data));
  std::string data = fmt::format(
      "# {}\n# census: x (verdict column) separation colour rule, one "
      "block per library, then the rules not as predicted; one panel per "
      "dtype\n",
      title);
  std::vector<CensusPanel> panels;
  size_t blocks = 0;
  for (const auto& [dtype, records] : by_dtype) {
    const std::vector<CensusPoint> points = census_points(records, census);
    if (points.empty())
      continue;
    panels.push_back(census_panel(points, dat, blocks));
    blocks += panels.back().blocks;
    data += panels.back().data;
  }
  TORCH_CHECK(!panels.empty(), "No judged census rule to plot");
  const int rows = static_cast<int>(panels.size());
  std::string plots;
  if (rows > 1) {
    plots += fmt::format("set multiplot layout {},1 title {}\n", rows,
                         two_line_title(title));
  } else {
    plots += fmt::format("set title {}\n", two_line_title(title));
  }
  for (const CensusPanel& p : panels)
    plots += p.plot;
  if (rows > 1)
    plots += "unset multiplot\n";
  const std::string gp = fmt::format(
      "# Drawn by twin-run table census --plot; rerun with: gnuplot {}\n"
      "set encoding utf8\n{}\nset output {}\n"
      "set logscale y\nset format y \"1e%T\"\n"
      "set xrange [-0.6:2.9]\nset xtics (\"measured equivariant\" 0, "
      "\"measured basis-dependent\" 1, \"other\" 2)\n"
      "set grid ytics\nset key outside right top font \",9\"\n{}"
      "unset output\n",
      file_name(f.script), terminal(ext, 1200, 50 + 600 * rows),
      gp_string(file_name(out)), plots);
  write_text_atomically(f.drift_data, data);
  write_text_atomically(f.script, gp);
  draw_files(f);
  return f;
}

namespace {

// A figure of the records alone, as a layout draws it.
template <PlotFiles (*draw)(const std::vector<PairResult>&, const std::string&,
                            const std::string&)>
PlotFiles of_records(const Inputs& in, const std::string& out,
                     const std::string& title) {
  return draw(in.records, out, title);
}

PlotFiles census_figure(const Inputs& in, const std::string& out,
                        const std::string& title) {
  return plot_census(in.records, in.census, out, title);
}

}  // namespace

// The figures the layouts draw (report/layouts.cpp).
const Plot kDriftPlot = {".svg", of_records<plot_results>, "Figure 2",
                         "per-head QK drift"};
const Plot kDialPlot = {"-dial.svg", of_records<plot_dial>, "drift against p",
                        nullptr};
const Plot kMergePlot = {"-merge.svg", of_records<plot_merge>,
                         "loss along lambda", nullptr};
const Plot kCensusPlot = {"-census.svg", census_figure,
                          "separation per rule", nullptr};

}  // namespace report
