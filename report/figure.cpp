#include "report/figure.h"

#include <fmt/format.h>

#include <algorithm>

namespace report {

using twins::PairResult;
using twins::TwinKind;

// ===========================================================================
// Reading figures off PairResults

Figure range_of(const std::vector<double>& values, Unit unit,
                PaperValue paper) {
  Figure f;
  f.unit = unit;
  f.paper = std::move(paper);
  for (double v : values) {
    if (!std::isfinite(v)) {
      continue;
    }
    f.lo = f.n == 0 ? v : std::min(f.lo, v);
    f.hi = f.n == 0 ? v : std::max(f.hi, v);
    ++f.n;
  }
  return f;
}

Figure max_of(const std::vector<double>& values, Unit unit, PaperValue paper) {
  Figure f = range_of(values, unit, std::move(paper));
  f.lo = f.hi;
  return f;
}

Figure value(double v, int n, Unit unit, PaperValue paper) {
  Figure f;
  f.unit = unit;
  f.paper = std::move(paper);
  if (std::isfinite(v) && n > 0) {
    f.lo = f.hi = v;
    f.n = n;
  }
  return f;
}

Figure largest_anywhere(const Results& rs, PaperValue paper) {
  Figure f;
  f.unit = Unit::kDrift;
  f.paper = std::move(paper);
  for (const auto* r : rs) {
    const double v = twins::largest_drift(*r);  // NaN stays visible
    f.lo = f.hi = f.n == 0 || std::isnan(v) ? v : std::max(f.hi, v);
    ++f.n;
  }
  return f;
}

Results pick(const std::vector<PairResult>& all, const std::string& opt,
             TwinKind twin, double scale) {
  Results out;
  for (const auto& r : all) {
    if (r.spec.opt != opt || r.spec.twin != twin) {
      continue;
    }
    if (twin == TwinKind::kNoise && r.spec.noise_scale != scale) {
      continue;
    }
    out.push_back(&r);
  }
  return out;
}

std::vector<double> at_step(const Results& rs, int64_t step) {
  std::vector<double> v;
  for (const auto* r : rs) {
    v.push_back(twins::drift_at(*r, step));
  }
  return v;
}

std::vector<double> finals(const Results& rs) {
  std::vector<double> v;
  for (const auto* r : rs) {
    v.push_back(twins::final_drift(*r));
  }
  return v;
}

std::vector<double> accuracy_gaps(const Results& rs) {
  std::vector<double> v;
  for (const auto* r : rs) {
    v.push_back(std::fabs(r->val_acc[0] - r->val_acc[1]));
  }
  return v;
}

// ===========================================================================
// Formatting

namespace {

// 3.9e-3 rather than 3.9e-03.
std::string sci(double v) {
  std::string s = fmt::format("{:.1e}", v);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  const bool neg = exp[0] == '-';
  exp = exp.substr(1);
  while (exp.size() > 1 && exp[0] == '0') {
    exp.erase(0, 1);
  }
  return mant + "e" + (neg ? "-" : "") + exp;
}

// 0.77 rather than 7.7e-1, but 2.3e-2 rather than 0.02, as the paper writes.
bool plain(double v) {
  return v == 0 || (std::fabs(v) >= 0.1 && std::fabs(v) < 1000);
}

std::string format_one(double v, Unit unit) {
  if (std::isnan(v)) {
    return "nan";
  }
  switch (unit) {
    case Unit::kDrift:
      if (v == 0) {
        return "0";
      }
      return plain(v) ? fmt::format("{:.2f}", v) : sci(v);
    case Unit::kRatio:
      return std::fabs(v) >= 10 ? fmt::format("{:.0f}x", v)
                                : fmt::format("{:.2g}x", v);
    case Unit::kDecades:
      return fmt::format("{:.2f}", v);
    case Unit::kAccuracy:
      return fmt::format("{:.4f}", v);
    case Unit::kLoss:
      return fmt::format("{:.3f}", v);
    case Unit::kStep:
      return fmt::format("{:.0f}", v);
  }
  return "?";
}

}  // namespace

std::string Figure::text() const {
  if (n == 0) {
    return "–";
  }
  if (lo == hi) {
    return format_one(lo, unit);
  }
  if (unit == Unit::kDrift && !plain(lo) && !plain(hi)) {
    // 3.4–5.4e-3 when both ends share the exponent, as the paper writes.
    const std::string a = sci(lo), b = sci(hi);
    const std::string ea = a.substr(a.find('e')), eb = b.substr(b.find('e'));
    if (ea == eb) {
      return a.substr(0, a.find('e')) + "–" + b;
    }
  }
  return format_one(lo, unit) + "–" + format_one(hi, unit);
}

std::string display_name(const std::string& opt) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"adam", "Adam"},
      {"sgd", "SGD"},
      {"scalar-adam", "scalar-Adam"},
      {"muon", "Muon"},
  };
  for (const auto& [name, shown] : kNames) {
    if (opt == name) {
      return shown;
    }
  }
  return opt;
}

std::string join(const std::vector<std::string>& parts,
                 const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i ? sep : "") + parts[i];
  }
  return out;
}

}  // namespace report
