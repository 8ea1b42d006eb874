// An aggregate as Markdown (what a person reads) and as CSV (one figure a
// row, numbers at full precision).
#include <fmt/format.h>

#include <algorithm>

#include "report/aggregate.h"
#include "twins/io.h"

namespace report {

namespace {

std::string csv_number(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : std::string();
}

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) {
    return s;
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') {
      out += '"';
    }
    out += c;
  }
  return out + "\"";
}

// One Markdown table row of `s`: its labels, each figure ("measured
// [paper]" unless the paper has its own column) and the largest pair count.
std::string markdown_row(const Section& s, const Section::Row& r) {
  std::vector<std::string> cells = r.labels;
  int n = 0;
  for (const auto& f : r.figures) {
    n = std::max(n, f.n);
    cells.push_back(s.paper_column || f.paper.text.empty()
                        ? f.text()
                        : fmt::format("{} [{}]", f.text(), f.paper.text));
  }
  if (s.paper_column) {
    std::string p = r.figures.empty() ? "" : r.figures[0].paper.text;
    cells.push_back(p.empty() ? "–" : p);
  }
  cells.push_back(std::to_string(n));
  return "| " + join(cells, " | ") + " |\n";
}

std::string markdown_section(const Section& s) {
  std::string out = fmt::format("## {}\n\n", s.title);
  std::vector<std::string> header = s.label_columns;
  for (const auto& c : s.columns) {
    header.push_back(c);
  }
  if (s.paper_column) {
    header.push_back("paper");
  }
  header.push_back("pairs");
  out += "| " + join(header, " | ") + " |\n";
  out += "|";
  for (size_t i = 0; i < header.size(); ++i) {
    out += "---|";
  }
  out += "\n";
  for (const auto& r : s.rows) {
    out += markdown_row(s, r);
  }
  out += "\n";
  for (const auto& n : s.notes) {
    out += n + "\n\n";
  }
  return out;
}

}  // namespace

std::string to_markdown(const Aggregate& aggregate) {
  std::string out = fmt::format("# {}\n\n", aggregate.title);
  for (const auto& n : aggregate.notes) {
    out += fmt::format("- {}\n", n);
  }
  if (!aggregate.notes.empty()) {
    out += "\n";
  }
  for (const auto& s : aggregate.sections) {
    out += markdown_section(s);
  }
  out += std::string(twins::kSummaryMarkdownLast).substr(1) + "\n```\n" +
         aggregate.pairs_table + "```\n";
  return out;
}

std::string to_csv(const Aggregate& aggregate) {
  std::string out = twins::kSummaryCsvHeader;
  for (const auto& s : aggregate.sections) {
    for (const auto& r : s.rows) {
      for (size_t c = 0; c < s.columns.size(); ++c) {
        const Figure& f = r.figures[c];
        out += fmt::format(
            "{},{},{},{},{},{},{},{},{}\n", s.id, csv_text(join(r.labels, " ")),
            csv_text(s.columns[c]), f.n, f.n ? csv_number(f.lo) : "",
            f.n ? csv_number(f.hi) : "", csv_number(f.paper.lo),
            csv_number(f.paper.hi), csv_text(f.paper.text));
      }
    }
  }
  return out;
}

}  // namespace report
