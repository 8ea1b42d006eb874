#include "optim/registry.h"

#include <cmath>
#include <deque>
#include <mutex>

#include "optim/muon.h"
#include "optim/scalar_adam.h"

namespace optim {

namespace {

struct Registry {
  std::deque<OptimizerInfo> entries;  // registration order; stable refs
  std::mutex mutex;
};

void add_builtins(Registry& r) {
  // Learning rates: PROTOCOL §5 (the paper's Appendix C).
  r.entries.push_back(
      {"adam",
       "Adam, per-coordinate second moment (LibTorch's torch::optim::Adam, "
       "whose arithmetic is PROTOCOL §5's bias-corrected Adam)",
       Equivariance::kBasisDependent, 1e-3, 1e-3,
       [](const ParamSplit& p, double lr) {
         return std::make_unique<torch::optim::Adam>(
             p.all(), torch::optim::AdamOptions(lr));
       }});
  r.entries.push_back(
      {"sgd",
       "heavy-ball momentum 0.9, undamped: b = 0.9 b + g; p -= lr b "
       "(LibTorch's torch::optim::SGD with dampening 0 computes exactly this)",
       Equivariance::kEquivariant, 0.5, 0.1,
       [](const ParamSplit& p, double lr) {
         return std::make_unique<torch::optim::SGD>(
             p.all(),
             torch::optim::SGDOptions(lr).momentum(0.9).dampening(0));
       }});
  r.entries.push_back(
      {"scalar-adam",
       "Adam's moments with one denominator shared by all parameters",
       Equivariance::kEquivariant, 3e-3, 3e-3,
       [](const ParamSplit& p, double lr) {
         return std::make_unique<ScalarAdam>(p.all(), ScalarAdamOptions(lr));
       }});
  r.entries.push_back(
      {"muon",
       "hybrid Muon: NS5 of undamped momentum on hidden matrices, Adam 1e-3 "
       "on the rest",
       Equivariance::kEquivariant, 0.02, 0.02,
       [](const ParamSplit& p, double lr) {
         return std::make_unique<Muon>(p.matrices, p.others, MuonOptions(lr));
       }});
}

Registry& registry() {
  static Registry r;
  static std::once_flag once;
  std::call_once(once, [] { add_builtins(r); });
  return r;
}

std::string known_names(const Registry& r) {
  std::string s;
  for (const auto& e : r.entries) s += (s.empty() ? "" : ", ") + e.name;
  return s;
}

}  // namespace

std::vector<torch::Tensor> ParamSplit::all() const {
  std::vector<torch::Tensor> out = matrices;
  out.insert(out.end(), others.begin(), others.end());
  return out;
}

const char* to_string(Equivariance e) {
  return e == Equivariance::kEquivariant ? "equivariant" : "basis-dependent";
}

bool register_optimizer(OptimizerInfo info) {
  TORCH_CHECK(!info.name.empty(), "register_optimizer: empty name");
  TORCH_CHECK(info.make, "register_optimizer: '", info.name,
              "' has no factory");
  TORCH_CHECK(info.lr_mod > 0 && info.lr_charlm > 0,
              "register_optimizer: '", info.name,
              "' needs positive default learning rates");
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& e : r.entries) {
    TORCH_CHECK(e.name != info.name, "register_optimizer: '", info.name,
                "' is already registered");
  }
  r.entries.push_back(std::move(info));
  return true;
}

bool has_optimizer(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& e : r.entries) {
    if (e.name == name) return true;
  }
  return false;
}

const OptimizerInfo& find_optimizer(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& e : r.entries) {
    if (e.name == name) return e;
  }
  TORCH_CHECK(false, "Unknown optimizer: '", name, "' (known: ",
              known_names(r), ")");
}

std::vector<std::string> optimizer_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& e : r.entries) out.push_back(e.name);
  return out;
}

double default_lr(const std::string& name, const std::string& family) {
  const auto& info = find_optimizer(name);
  TORCH_CHECK(family == "mod" || family == "charlm",
              "Unknown task family: '", family, "'");
  return family == "mod" ? info.lr_mod : info.lr_charlm;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& name, const ParamSplit& params, double lr) {
  TORCH_CHECK(lr > 0 && std::isfinite(lr), "Invalid learning rate: ", lr,
              " (must be positive and finite)");
  return find_optimizer(name).make(params, lr);
}

}  // namespace optim
