#include "sweep/plan.h"

#include <algorithm>
#include <cmath>

#include "data/task.h"
#include "model/config.h"
#include "optim/registry.h"
#include "twins/defaults.h"

namespace sweep {

using twins::PairSpec;
using twins::TwinKind;

optim::Hparams registry_hparams(const std::string& opt) {
  return optim::find_optimizer(opt).hparams;
}

int64_t planned_steps(const PlanRequest& r) {
  const int64_t steps =
      r.steps != 0 ? r.steps : data::task_defaults(r.task).steps;  // throws
  TORCH_CHECK(steps >= 1, "Invalid --steps: ", r.steps, " (must be >= 1)");
  return steps;
}

namespace {

// The (opt, twin) rows: the Table-3 set when neither list is given; else
// the product of the lists, a missing list meaning adam / gauge.
std::vector<std::pair<std::string, TwinKind>> rows(const PlanRequest& r) {
  if (r.opts.empty() && r.twins.empty() && r.adam_ps.empty()) {
    return twins::table3_rows();
  }
  // Throws for an unknown name; a bare adam-p becomes adam-p<p> per --p.
  const std::vector<std::string> opts = optim::resolve_optimizer_names(
      r.opts.empty() ? std::vector<std::string>{"adam"} : r.opts, r.adam_ps);
  const std::vector<std::string> kinds =
      r.twins.empty() ? std::vector<std::string>{"gauge"} : r.twins;
  std::vector<std::pair<std::string, TwinKind>> out;
  for (const auto& o : opts) {
    for (const auto& k : kinds)
      out.emplace_back(o, twins::parse_twin_kind(k));
  }
  return out;
}

PairSpec base_spec(const PlanRequest& r) {
  const data::TaskDefaults& d = data::task_defaults(r.task);  // throws
  PairSpec s;
  s.task = r.task;
  s.steps = planned_steps(r);
  TORCH_CHECK(r.stop_after >= 0 && r.stop_after <= s.steps,
              "Invalid --stop-after: ", r.stop_after, " (must be within 1..",
              s.steps, ", the last step)");
  s.stop_after = r.stop_after == s.steps ? 0 : r.stop_after;
  s.device = r.device;
  // float64 is the CUDA default (the paper's Table 9), float32 the CPU one.
  s.dtype = !r.dtype.empty()    ? twins::parse_dtype(r.dtype)
            : r.device != "cpu" ? torch::kDouble
                                : torch::kFloat;
  s.protocol = r.protocol.empty() ? twins::default_protocol(
                                        twins::Protocol::kPaperCpu, s.dtype)
                                  : twins::parse_protocol(r.protocol);
  s.depth = r.depth != 0 ? r.depth : d.depth;
  s.d_model = r.d_model != 0 ? r.d_model : d.d_model;
  s.heads = r.heads != 0 ? r.heads : d.heads;
  s.mlp = r.mlp != 0 ? r.mlp : data::default_mlp(s.d_model);
  model::ModelConfig shape;
  shape.depth = s.depth;
  shape.d_model = s.d_model;
  shape.heads = s.heads;
  shape.mlp = s.mlp;
  TORCH_CHECK(r.rope || r.rope_base == 0, "--rope-base ", r.rope_base,
              " given without --rope");
  s.kv_heads = r.kv_heads == s.heads ? 0 : r.kv_heads;
  s.rope = r.rope;
  s.rope_base = r.rope_base != 0 ? r.rope_base : s.rope_base;
  shape.kv_heads = s.kv_heads;
  shape.rope = s.rope;
  shape.rope_base = s.rope_base;
  shape.validate();  // throws e.g. for d_model not divisible by heads
  s.data_seed = r.data_seed;
  s.ctx = r.ctx != 0 ? r.ctx : d.ctx;
  s.batch = r.batch != 0 ? r.batch : d.batch;
  TORCH_CHECK(s.ctx >= 1, "Invalid --ctx: ", r.ctx, " (must be >= 1)");
  TORCH_CHECK(s.batch >= 1, "Invalid --batch: ", r.batch, " (must be >= 1)");
  s.corpus = r.corpus;
  std::vector<int64_t> merge = r.merge_at;
  std::sort(merge.begin(), merge.end());
  merge.erase(std::unique(merge.begin(), merge.end()), merge.end());
  for (int64_t m : merge) {
    TORCH_CHECK(m >= 0 && m <= s.last_step(), "Invalid --merge-at step: ", m,
                " (must be within 0..", s.last_step(), ", the last step)");
  }
  s.merge_at = merge;
  return s;
}

}  // namespace

std::vector<PairSpec> expand(const PlanRequest& r) {
  TORCH_CHECK(r.device == "cpu" || r.device == "cuda" ||
                  r.device.rfind("cuda:", 0) == 0,
              "Unknown device: '", r.device, "' (known: cpu, cuda, cuda:N)");
  const PairSpec base = base_spec(r);
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
    TORCH_CHECK(kind != TwinKind::kGaugeFull || base.rope,
                "--twin gauge-full is the unrestricted rotation under --rope "
                "(its negative control); without --rope it is --twin gauge");
    const double lr = r.lr != 0 ? r.lr : twins::default_lr(opt, r.task);
    const optim::Hparams hparams = registry_hparams(opt);
    const std::vector<uint64_t> seeds =
        kind == TwinKind::kIdentity ? std::vector<uint64_t>{0}
        : !r.twin_seeds.empty()
            ? r.twin_seeds
            : std::vector<uint64_t>{kind == TwinKind::kNoise
                                        ? twins::kDefaultNoiseSeed
                                        : twins::kDefaultGaugeSeed};
    const std::vector<double> scales =
        kind == TwinKind::kNoise ? r.noise_scales : std::vector<double>{0.0};
    for (uint64_t init : r.init_seeds) {
      for (uint64_t seed : seeds) {
        for (double scale : scales) {
          PairSpec s = base;
          s.opt = opt;
          s.hparams = hparams;
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

}  // namespace sweep
