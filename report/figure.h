// One measured figure of an aggregate (a value or a min–max range over
// pairs, with the paper's value beside it), how it is read off PairResults
// and how it is printed: the vocabulary every layout's sections share.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "report/paper.h"
#include "twins/result.h"

namespace report {

// How a figure is printed.
enum class Unit {
  kDrift,     // relative distance: 0, 0.77, 3.6e-3
  kRatio,     // 662x
  kDecades,   // 0.04
  kAccuracy,  // 0.4020
  kLoss,      // 2.531
  kStep,      // 2
};

// One measured figure: a value (lo == hi) or a min–max range over `n` pairs.
struct Figure {
  double lo = std::nan("");
  double hi = std::nan("");
  int n = 0;  // pairs behind it; 0: not measured (missing pairs)
  Unit unit = Unit::kDrift;
  PaperValue paper;
  std::string text() const;  // "–" when not measured
};

// ---------------------------------------------------------------------------
// Reading figures off PairResults

using Results = std::vector<const twins::PairResult*>;

// The min–max of the finite values; n counts them.
Figure range_of(const std::vector<double>& values, Unit unit,
                PaperValue paper = {});
// The largest finite value (lo == hi); n counts the finite values.
Figure max_of(const std::vector<double>& values, Unit unit,
              PaperValue paper = {});
// `v` from `n` pairs; not measured when v is not finite or n is 0.
Figure value(double v, int n, Unit unit, PaperValue paper = {});
// The largest |drift| over every checkpoint of the pairs (the identity
// twin's check); NaN stays visible, n counts pairs.
Figure largest_anywhere(const Results& rs, PaperValue paper);

// The pairs of `opt` and `twin` (and noise `scale`, for noise twins).
Results pick(const std::vector<twins::PairResult>& all, const std::string& opt,
             twins::TwinKind twin, double scale = 0);
// Each pair's logit drift at `step` (NaN where it has no such checkpoint).
std::vector<double> at_step(const Results& rs, int64_t step);
// Each pair's final logit drift.
std::vector<double> finals(const Results& rs);
// |Δ validation accuracy| between each pair's two copies.
std::vector<double> accuracy_gaps(const Results& rs);

// ---------------------------------------------------------------------------
// Formatting

// "Adam", "SGD", "scalar-Adam", "Muon"; other names unchanged.
std::string display_name(const std::string& opt);

// The elements of `v` with `sep` between them.
std::string join(const std::vector<std::string>& parts, const std::string& sep);

}  // namespace report
