#include "report/paper.h"

namespace report {

namespace {

struct PaperEntry {
  const char* id;
  double lo, hi;
  const char* text;
};

constexpr double kNoBound = 0;  // lower end of a "≤ x" bound

const PaperEntry kPaper[] = {
    // Table 3: drift at step 0 / 1 / 100 / 1500 (mod-47, CPU float32).
    {"table3/adam/gauge/0", 1.8e-7, 1.8e-7, "1.8e-7"},
    {"table3/adam/gauge/1", 3.6e-3, 3.6e-3, "3.6e-3"},
    {"table3/adam/gauge/100", 0.65, 0.65, "0.65"},
    {"table3/adam/gauge/last", 0.77, 0.77, "0.77"},
    {"table3/adam/identity/0", 0, 0, "0"},
    {"table3/adam/identity/1", 0, 0, "0"},
    {"table3/adam/identity/100", 0, 0, "0"},
    {"table3/adam/identity/last", 0, 0, "0"},
    {"table3/adam/noise/0", 2.6e-7, 2.6e-7, "2.6e-7"},
    {"table3/adam/noise/1", 2.9e-7, 2.9e-7, "2.9e-7"},
    {"table3/adam/noise/100", 1.7e-5, 1.7e-5, "1.7e-5"},
    {"table3/adam/noise/last", 1.6e-5, 1.6e-5, "1.6e-5"},
    {"table3/sgd/gauge/0", 1.8e-7, 1.8e-7, "1.8e-7"},
    {"table3/sgd/gauge/1", 2.9e-7, 2.9e-7, "2.9e-7"},
    {"table3/sgd/gauge/100", 3.7e-5, 3.7e-5, "3.7e-5"},
    {"table3/sgd/gauge/last", 2.0e-5, 2.0e-5, "2.0e-5"},
    {"table3/scalar-adam/gauge/0", 1.8e-7, 1.8e-7, "1.8e-7"},
    {"table3/scalar-adam/gauge/1", 1.6e-7, 1.6e-7, "1.6e-7"},
    {"table3/scalar-adam/gauge/100", 4.1e-6, 4.1e-6, "4.1e-6"},
    {"table3/scalar-adam/gauge/last", 4.3e-6, 4.3e-6, "4.3e-6"},
    {"table3/muon/gauge/0", 1.8e-7, 1.8e-7, "1.8e-7"},
    {"table3/muon/gauge/1", 2.2e-7, 2.2e-7, "2.2e-7"},
    {"table3/muon/gauge/100", 2.3e-2, 2.3e-2, "2.3e-2"},
    {"table3/muon/gauge/last", 0.85, 0.85, "0.85"},
    {"table3/muon/noise/0", 2.6e-7, 2.6e-7, "2.6e-7"},
    {"table3/muon/noise/1", 2.9e-7, 2.9e-7, "2.9e-7"},
    {"table3/muon/noise/100", 4.0e-2, 4.0e-2, "4.0e-2"},
    {"table3/muon/noise/last", 0.87, 0.87, "0.87"},
    {"table3/adam-qk-final", 0.56, 0.56, "0.56"},
    {"table3/adam-val-acc", 0.40, 0.40, "≈ 0.40"},
    {"table3/adam-dacc", kNoBound, 0.0023, "≤ 0.0023"},
    // Appendix D.5 (mod-47, CPU float32, several seeds).
    {"multiseed/adam-gauge-step1", 3.4e-3, 5.4e-3, "3.4–5.4e-3"},
    {"multiseed/adam-gauge-final", 0.69, 0.80, "0.69–0.80"},
    {"multiseed/adam-dacc", kNoBound, 0.0023, "≤ 0.0023"},
    {"multiseed/adam-noise-1e-7-final", 1.4e-5, 1.4e-5, "1.4e-5"},
    {"multiseed/adam-noise-1e-5-final", 1.0e-3, 1.0e-3, "1.0e-3"},
    {"multiseed/structural-ratio", 662, 662, "662x (claim: > 600x)"},
    {"multiseed/sgd-final-max", kNoBound, 3.7e-4, "≤ 3.7e-4"},
    {"multiseed/scalar-adam-final-max", kNoBound, 4.3e-6, "≤ 4.3e-6"},
    {"multiseed/muon-chaos-42", 0.04, 0.04, "0.04"},
    {"multiseed/muon-chaos-123", 0.01, 0.01, "0.01"},
    {"multiseed/adam-identity", 0, 0, "0"},
    // Table 9 (float64): Adam gauge step 1, worst equivariant step 1, Adam
    // final, onset ratio; the identity twin is exactly 0 everywhere.
    {"table9/mod47-2L-d64/adam-step1", 4.0e-3, 5.7e-3, "4.0–5.7e-3"},
    {"table9/mod47-2L-d64/eq-step1", 5.4e-16, 5.4e-16, "5.4e-16"},
    {"table9/mod47-2L-d64/adam-final", 0.69, 0.78, "0.69–0.78"},
    {"table9/mod47-2L-d64/onset", 93, 93, "93x"},
    {"table9/mod97-4L-d128/adam-step1", 8.2e-3, 11e-3, "8.2–11e-3"},
    {"table9/mod97-4L-d128/eq-step1", 7.3e-16, 7.3e-16, "7.3e-16"},
    {"table9/mod97-4L-d128/adam-final", 0.66, 0.75, "0.66–0.75"},
    {"table9/mod97-4L-d128/onset", 158, 158, "158x"},
    {"table9/mod97-6L-d256/adam-step1", 6.5e-3, 7.2e-3, "6.5–7.2e-3"},
    {"table9/mod97-6L-d256/eq-step1", 1.1e-15, 1.1e-15, "1.1e-15"},
    {"table9/mod97-6L-d256/adam-final", 0.61, 0.64, "0.61–0.64"},
    {"table9/mod97-6L-d256/onset", 94, 94, "94x"},
    {"table9/charlm-6L-d256/adam-step1", 2.2e-3, 2.4e-3, "2.2–2.4e-3"},
    {"table9/charlm-6L-d256/eq-step1", 8.0e-16, 8.0e-16, "8.0e-16"},
    {"table9/charlm-6L-d256/adam-final", 0.36, 0.37, "0.36–0.37"},
    {"table9/charlm-6L-d256/onset", 39, 39, "39x"},
    {"table9/identity", 0, 0, "0"},
};

}  // namespace

PaperValue paper(const std::string& id) {
  for (const auto& e : kPaper) {
    if (id == e.id) {
      return PaperValue{e.lo, e.hi, e.text};
    }
  }
  return {};
}

}  // namespace report
