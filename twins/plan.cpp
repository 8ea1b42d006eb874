#include "twins/plan.h"

#include <cmath>

#include "data/task.h"
#include "model/config.h"
#include "optim/registry.h"

namespace twins {

std::vector<std::pair<std::string, TwinKind>> table3_rows() {
  return {{"adam", TwinKind::kGauge},        {"adam", TwinKind::kIdentity},
          {"adam", TwinKind::kNoise},        {"sgd", TwinKind::kGauge},
          {"scalar-adam", TwinKind::kGauge}, {"muon", TwinKind::kGauge},
          {"muon", TwinKind::kNoise}};
}

namespace {

// The (opt, twin) rows: the Table-3 set when neither list is given; else
// the product of the lists, a missing list meaning adam / gauge.
std::vector<std::pair<std::string, TwinKind>> rows(const PlanRequest& r) {
  if (r.opts.empty() && r.twins.empty() && r.adam_ps.empty()) {
    return table3_rows();
  }
  // Throws for an unknown name; a bare adam-p becomes adam-p<p> per --p.
  const std::vector<std::string> opts = optim::resolve_optimizer_names(
      r.opts.empty() ? std::vector<std::string>{"adam"} : r.opts, r.adam_ps);
  const std::vector<std::string> kinds =
      r.twins.empty() ? std::vector<std::string>{"gauge"} : r.twins;
  std::vector<std::pair<std::string, TwinKind>> out;
  for (const auto& o : opts) {
    for (const auto& k : kinds) out.emplace_back(o, parse_twin_kind(k));
  }
  return out;
}

PairSpec base_spec(const PlanRequest& r) {
  const std::string family = data::task_family(r.task);  // throws if unknown
  const bool mod = family == "mod";
  PairSpec s;
  s.task = r.task;
  s.steps = r.steps != 0 ? r.steps : (mod ? 1500 : 3000);
  TORCH_CHECK(s.steps >= 1, "Invalid --steps: ", r.steps, " (must be >= 1)");
  s.device = r.device;
  // float64 is the CUDA default (the paper's Table 9), float32 the CPU one.
  s.dtype = !r.dtype.empty()   ? parse_dtype(r.dtype)
            : r.device != "cpu" ? torch::kDouble
                                : torch::kFloat;
  s.depth = r.depth != 0 ? r.depth : (mod ? 2 : 6);
  s.d_model = r.d_model != 0 ? r.d_model : (mod ? 64 : 256);
  s.heads = r.heads != 0 ? r.heads : (mod ? 4 : 8);
  s.mlp = r.mlp != 0 ? r.mlp : 4 * s.d_model;
  model::ModelConfig shape;
  shape.depth = s.depth;
  shape.d_model = s.d_model;
  shape.heads = s.heads;
  shape.mlp = s.mlp;
  shape.validate();  // throws e.g. for d_model not divisible by heads
  s.data_seed = r.data_seed;
  TORCH_CHECK(r.ctx >= 1, "Invalid --ctx: ", r.ctx, " (must be >= 1)");
  TORCH_CHECK(r.batch >= 1, "Invalid --batch: ", r.batch, " (must be >= 1)");
  s.ctx = r.ctx;
  s.batch = r.batch;
  s.corpus = r.corpus;
  return s;
}

}  // namespace

std::vector<PairSpec> expand(const PlanRequest& r) {
  TORCH_CHECK(r.device == "cpu" || r.device == "cuda" ||
                  r.device.rfind("cuda:", 0) == 0,
              "Unknown device: '", r.device, "' (known: cpu, cuda, cuda:N)");
  const PairSpec base = base_spec(r);
  const std::string family = data::task_family(r.task);
  TORCH_CHECK(r.lr == 0 || (r.lr > 0 && std::isfinite(r.lr)),
              "Invalid --lr: ", r.lr, " (must be positive)");
  TORCH_CHECK(!r.init_seeds.empty(), "--init-seed: empty list");
  TORCH_CHECK(!r.noise_scales.empty(), "--noise-scale: empty list");
  for (double s : r.noise_scales) {
    TORCH_CHECK(s >= 0 && std::isfinite(s), "Invalid --noise-scale: ", s,
                " (must be >= 0 and finite)");
  }
  std::vector<PairSpec> out;
  for (const auto& [opt, kind] : rows(r)) {
    const double lr = r.lr != 0 ? r.lr : optim::default_lr(opt, family);
    const std::vector<uint64_t> seeds =
        kind == TwinKind::kIdentity ? std::vector<uint64_t>{0}
        : !r.twin_seeds.empty()     ? r.twin_seeds
        : std::vector<uint64_t>{kind == TwinKind::kNoise ? kDefaultNoiseSeed
                                                         : kDefaultGaugeSeed};
    const std::vector<double> scales =
        kind == TwinKind::kNoise ? r.noise_scales : std::vector<double>{0.0};
    for (uint64_t init : r.init_seeds) {
      for (uint64_t seed : seeds) {
        for (double scale : scales) {
          PairSpec s = base;
          s.opt = opt;
          s.twin = kind;
          s.lr = lr;
          s.init_seed = init;
          s.twin_seed = seed;
          s.noise_scale = scale;
          out.push_back(s);
        }
      }
    }
  }
  return out;
}

}  // namespace twins
