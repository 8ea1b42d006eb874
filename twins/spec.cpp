#include "twins/spec.h"

#include <fmt/format.h>

namespace twins {

const char* to_string(TwinKind kind) {
  switch (kind) {
    case TwinKind::kGauge:
      return "gauge";
    case TwinKind::kIdentity:
      return "identity";
    case TwinKind::kNoise:
      return "noise";
  }
  return "?";
}

TwinKind parse_twin_kind(const std::string& name) {
  if (name == "gauge") return TwinKind::kGauge;
  if (name == "identity") return TwinKind::kIdentity;
  if (name == "noise") return TwinKind::kNoise;
  TORCH_CHECK(false, "Unknown twin kind: '", name,
              "' (known: gauge, identity, noise)");
}

torch::Dtype parse_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "float64") return torch::kDouble;
  TORCH_CHECK(false, "Unknown dtype: '", name,
              "' (known: float32, float64)");
}

std::string dtype_name(torch::Dtype dtype) {
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kDouble,
              "Unsupported dtype: ", dtype);
  return dtype == torch::kFloat ? "float32" : "float64";
}

std::string PairSpec::key() const {
  std::string k = fmt::format(
      "{}|{}|{}|init={}|twin_seed={}|noise={}|steps={}|lr={}|{}|{}|"
      "L{}-d{}-h{}-m{}|data={}",
      task, opt, to_string(twin), init_seed,
      uses_twin_seed() ? fmt::format("{}", twin_seed) : "-",
      uses_noise_scale() ? fmt::format("{}", noise_scale) : "-", steps, lr,
      dtype_name(dtype), device, depth, d_model, heads, mlp, data_seed);
  if (task == "charlm") {
    k += fmt::format("|ctx={}|batch={}|corpus={}", ctx, batch,
                     corpus.empty() ? "tinyshakespeare" : corpus);
  }
  return k;
}

}  // namespace twins
