// What a person reads: the Table-3 shaped summary and run progress.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "twins/pair.h"

namespace twins {

// Drift at steps 0 / 1 / 100 / last per pair (the paper's Table 3 layout),
// with the final QK drift, both copies' validation accuracy (mod) or loss
// (char-LM) and the status.
std::string format_drift_table(const std::vector<PairResult>& results);

// "0" for exact zero, else two significant digits in e-notation.
std::string format_drift(double v);

// Progress on stderr: one rewritten line on a terminal, plain lines at each
// tenth of a pair otherwise; nothing when quiet.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet, std::FILE* out = stderr);
  void begin_pair(size_t index, size_t count, const PairSpec& spec);
  void step(int64_t t);
  void end_pair(const PairResult& r);

 private:
  bool quiet_;
  bool tty_;
  std::FILE* out_;
  std::string label_;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point last_;
};

// A short human label of a pair: "adam gauge (init 42, seed 777)".
std::string pair_label(const PairSpec& spec);

}  // namespace twins
