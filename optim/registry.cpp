#include "optim/registry.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <deque>
#include <mutex>

#include "optim/adafactor.h"
#include "optim/adam_mini.h"
#include "optim/adam_p.h"
#include "optim/adamuon.h"
#include "optim/cautious.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/muon_torch.h"
#include "optim/normuon.h"
#include "optim/rmsprop.h"
#include "optim/scalar_adam.h"
#include "optim/scion.h"
#include "optim/shampoo.h"
#include "optim/shampoo_graft.h"
#include "optim/signum.h"
#include "optim/soap.h"

namespace optim {

namespace {

struct Registry {
  std::deque<OptimizerInfo> entries;  // registration order; stable refs
  std::deque<OptimizerInfo> adam_ps;  // "adam-p<p>" entries built on use
  std::mutex mutex;
};

constexpr char kAdamPPrefix[] = "adam-p";

OptimizerInfo adam_p_info(const std::string& name, double p,
                          std::string summary) {
  return make_entry(
      name, std::move(summary),
      p == 0 ? Equivariance::kEquivariant : Equivariance::kBasisDependent,
      AdamPOptions().p(p), [](const ParamSplit& s, const AdamPOptions& o) {
        return std::make_unique<AdamP>(s.all(), o);
      });
}

// The built-in rules, in the order --list-optimizers prints them; their
// update rules are docs/protocol.md §5.
void add_builtins(Registry& r) {
  r.entries.push_back(make_entry(
      "adam",
      "Adam, per-coordinate second moment (LibTorch's torch::optim::Adam, "
      "whose arithmetic is the protocol's bias-corrected Adam)",
      Equivariance::kBasisDependent, torch::optim::AdamOptions(),
      [](const ParamSplit& p, const torch::optim::AdamOptions& o) {
        return std::make_unique<torch::optim::Adam>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "sgd",
      "heavy-ball momentum 0.9, undamped: b = 0.9 b + g; p -= lr b "
      "(LibTorch's torch::optim::SGD with dampening 0 computes exactly this)",
      Equivariance::kEquivariant,
      torch::optim::SGDOptions(0).momentum(0.9).dampening(0),
      [](const ParamSplit& p, const torch::optim::SGDOptions& o) {
        return std::make_unique<torch::optim::SGD>(p.all(), o);
      }));
  r.entries.push_back(
      make_entry("scalar-adam",
                 "Adam's moments with one denominator shared by all parameters",
                 Equivariance::kEquivariant, ScalarAdamOptions(),
                 [](const ParamSplit& p, const ScalarAdamOptions& o) {
                   return std::make_unique<ScalarAdam>(p.all(), o);
                 }));
  r.entries.push_back(make_entry(
      "muon",
      "hybrid Muon: NS5 of undamped momentum on hidden matrices, Adam 1e-3 "
      "on the rest",
      Equivariance::kEquivariant, MuonOptions(),
      [](const ParamSplit& p, const MuonOptions& o) {
        return std::make_unique<Muon>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "rmsprop",
      "classical RMSprop: v = 0.99 v + 0.01 g^2, p -= lr g / (sqrt(v) + "
      "eps), no momentum",
      Equivariance::kBasisDependent, RMSpropOptions(),
      [](const ParamSplit& p, const RMSpropOptions& o) {
        return std::make_unique<RMSprop>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "signum", "sign of an EMA momentum: m = 0.9 m + 0.1 g, p -= lr sign(m)",
      Equivariance::kBasisDependent, SignumOptions(),
      [](const ParamSplit& p, const SignumOptions& o) {
        return std::make_unique<Signum>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "lion", "p -= lr sign(0.9 m + 0.1 g), then m = 0.99 m + 0.01 g",
      Equivariance::kBasisDependent, LionOptions(),
      [](const ParamSplit& p, const LionOptions& o) {
        return std::make_unique<Lion>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "adafactor",
      "factored second moment: row/column EMAs (0.999) of g^2, V = R C^T / "
      "mean(R); p -= lr g / (sqrt(V_hat) + eps); 1-D unfactored",
      Equivariance::kBasisDependent, AdafactorOptions(),
      [](const ParamSplit& p, const AdafactorOptions& o) {
        return std::make_unique<Adafactor>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "shampoo",
      "hybrid Shampoo: hidden matrices p -= lr (L+I)^-1/4 G (R+I)^-1/4, "
      "L = sum G G^T, R = sum G^T G, roots every 20 steps; Adam 1e-3 on "
      "the rest",
      Equivariance::kEquivariant, ShampooOptions(),
      [](const ParamSplit& p, const ShampooOptions& o) {
        return std::make_unique<Shampoo>(p.matrices, p.others, o);
      }));
  r.entries.push_back(adam_p_info(
      kAdamPPrefix, kDefaultAdamP,
      fmt::format("Adam-p dial: denominator (sqrt(v_hat)+eps)^p "
                  "(s+eps)^(1-p) + eps; p from --p or the name (adam-p0.25); "
                  "default p {}; p = 1 is adam, p = 0 scalar-adam "
                  "(equivariant)",
                  kDefaultAdamP)));
  // Optimizers in current use, each as its reference implementation with
  // its defaults; where the tool departs from them (dtype, no weight
  // decay, refresh frequency) each header says so (docs/protocol.md §5.3).
  r.entries.push_back(make_entry(
      "soap",
      "SOAP: Adam (betas 0.95) in the eigenbasis of Shampoo's EMA "
      "statistics L, R, bases refreshed every 10 updates, no update at step "
      "1; 1-D parameters plain Adam",
      Equivariance::kEquivariant, SoapOptions(),
      [](const ParamSplit& p, const SoapOptions& o) {
        return std::make_unique<Soap>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "soap-right",
      "SOAP with only the right (column) side preconditioned: Adam on G Q_R "
      "(the control)",
      Equivariance::kBasisDependent, SoapOptions().precondition_left(false),
      [](const ParamSplit& p, const SoapOptions& o) {
        return std::make_unique<Soap>(p.all(), o);
      }));
  r.entries.push_back(make_entry(
      "adam-mini",
      "Adam-mini: Adam's m per entry, one v per block (per head for W_Q, "
      "W_K; per row for other matrices; per tensor otherwise)",
      Equivariance::kEquivariant, AdamMiniOptions(),
      [](const ParamSplit& p, const AdamMiniOptions& o) {
        return std::make_unique<AdamMini>(p.all(), p.qk, p.heads, o);
      }));
  r.entries.push_back(make_entry(
      "normuon",
      "hybrid NorMuon: NS5 of Nesterov momentum 0.95, normalised per row by "
      "an EMA of its mean square, rescaled to its norm; Adam 3e-4 on the "
      "rest (near-equivariant: NS5 is not exactly orthogonal)",
      Equivariance::kBasisDependent, NorMuonOptions(),
      [](const ParamSplit& p, const NorMuonOptions& o) {
        return std::make_unique<NorMuon>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "adamuon",
      "hybrid AdaMuon: NS5 of sign(Nesterov momentum), per-entry EMA of its "
      "square, update RMS 0.2 lr; Adam (betas 0.9, 0.95) at the same lr on "
      "the rest",
      Equivariance::kBasisDependent, AdaMuonOptions(),
      [](const ParamSplit& p, const AdaMuonOptions& o) {
        return std::make_unique<AdaMuon>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "scion-col",
      "hybrid Scion, column-norm LMO of the averaged gradient (alpha 0.1, "
      "scale 3) on hidden matrices; Adam 1e-3 on the rest",
      Equivariance::kEquivariant, ScionOptions().norm(ScionNorm::kColumn),
      [](const ParamSplit& p, const ScionOptions& o) {
        return std::make_unique<Scion>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "scion-row",
      "hybrid Scion, row-norm LMO of the averaged gradient (alpha 0.1, "
      "scale 3) on hidden matrices; Adam 1e-3 on the rest",
      Equivariance::kBasisDependent, ScionOptions().norm(ScionNorm::kRow),
      [](const ParamSplit& p, const ScionOptions& o) {
        return std::make_unique<Scion>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "shampoo-graft",
      "hybrid shampoo with Adam grafting: the shampoo direction at the norm "
      "of Adam's diagonal step (beta2 0.999, eps 1e-10); Adam 1e-3 on the "
      "rest",
      Equivariance::kBasisDependent, ShampooGraftOptions(),
      [](const ParamSplit& p, const ShampooGraftOptions& o) {
        return std::make_unique<ShampooGraft>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "muon-torch",
      "hybrid PyTorch Muon: Nesterov momentum 0.95 (EMA), NS on X/||X||, lr "
      "times sqrt(max(1, rows/cols)); Adam 1e-3 on the rest",
      Equivariance::kEquivariant, MuonTorchOptions(),
      [](const ParamSplit& p, const MuonTorchOptions& o) {
        return std::make_unique<MuonTorch>(p.matrices, p.others, o);
      }));
  r.entries.push_back(make_entry(
      "cautious-sgd",
      "cautious sgd: heavy-ball momentum 0.9 masked by 1[b g > 0], rescaled "
      "by the mask's mean",
      Equivariance::kBasisDependent, CautiousSgdOptions(),
      [](const ParamSplit& p, const CautiousSgdOptions& o) {
        return std::make_unique<CautiousSgd>(p.all(), o);
      }));
  r.entries.push_back(
      make_entry("cautious-adam",
                 "C-AdamW without weight decay: Adam's m masked by 1[m g > 0], "
                 "rescaled by the mask's mean, eps 1e-6",
                 Equivariance::kBasisDependent, CautiousAdamOptions(),
                 [](const ParamSplit& p, const CautiousAdamOptions& o) {
                   return std::make_unique<CautiousAdam>(p.all(), o);
                 }));
}

Registry& registry() {
  static Registry r;
  static std::once_flag once;
  std::call_once(once, [] { add_builtins(r); });
  return r;
}

// A name given to register_optimizer (not an adam-p<p> built on use).
bool is_registered(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& e : r.entries) {
    if (e.name == name)
      return true;
  }
  return false;
}

std::string known_names(const Registry& r) {
  std::string s;
  for (const auto& e : r.entries)
    s += (s.empty() ? "" : ", ") + e.name;
  return s;
}

}  // namespace

std::vector<torch::Tensor> ParamSplit::all() const {
  std::vector<torch::Tensor> out = matrices;
  out.insert(out.end(), others.begin(), others.end());
  return out;
}

Hparams hparams_of(const torch::optim::AdamOptions& o) {
  return {{"beta1", std::get<0>(o.betas())},
          {"beta2", std::get<1>(o.betas())},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"amsgrad", o.amsgrad() ? 1.0 : 0.0}};
}

Hparams hparams_of(const torch::optim::SGDOptions& o) {
  return {{"momentum", o.momentum()},
          {"dampening", o.dampening()},
          {"nesterov", o.nesterov() ? 1.0 : 0.0},
          {"weight_decay", o.weight_decay()}};
}

const char* to_string(Equivariance e) {
  return e == Equivariance::kEquivariant ? "equivariant" : "basis-dependent";
}

bool register_optimizer(OptimizerInfo info) {
  TORCH_CHECK(!info.name.empty(), "register_optimizer: empty name");
  TORCH_CHECK(info.make, "register_optimizer: '", info.name,
              "' has no factory");
  bool in_family = false;
  try {
    in_family = info.name != kAdamPPrefix && adam_p_exponent(info.name);
  } catch (const c10::Error&) {
  }
  TORCH_CHECK(!in_family, "register_optimizer: '", info.name,
              "' is reserved for the Adam-p dial");
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
  if (is_registered(name))
    return true;
  try {
    return adam_p_exponent(name).has_value();
  } catch (const c10::Error&) {
    return false;  // a malformed adam-p name
  }
}

const OptimizerInfo& find_optimizer(const std::string& name) {
  auto& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& e : r.entries) {
      if (e.name == name)
        return e;
    }
  }
  const std::optional<double> p = adam_p_exponent(name);  // may throw
  std::lock_guard<std::mutex> lock(r.mutex);
  TORCH_CHECK(p.has_value(), "Unknown optimizer: '", name,
              "' (known: ", known_names(r), ")");
  for (const auto& e : r.adam_ps) {
    if (e.name == name)
      return e;
  }
  r.adam_ps.push_back(
      adam_p_info(name, *p, fmt::format("Adam-p dial at p = {}", *p)));
  return r.adam_ps.back();
}

std::string adam_p_name(double p) {
  check_adam_p_exponent(p);
  return fmt::format("{}{}", kAdamPPrefix, p);
}

std::optional<double> adam_p_exponent(const std::string& name) {
  const std::string prefix = kAdamPPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  if (name == prefix)
    return kDefaultAdamP;
  // A plain decimal number: digits, '.', and an exponent (adam-p1e-3); no
  // sign, space, nan, inf or hex.
  const std::string digits = name.substr(prefix.size());
  bool ok =
      std::isdigit(static_cast<unsigned char>(digits[0])) || digits[0] == '.';
  for (char c : digits) {
    ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
                c == 'e' || c == 'E' || c == '-' || c == '+');
  }
  size_t used = 0;
  double p = 0;
  if (ok) {
    try {
      p = std::stod(digits, &used);
    } catch (const std::exception&) {
      used = 0;
    }
  }
  TORCH_CHECK(ok && used == digits.size(), "Malformed optimizer name: '", name,
              "' (the Adam-p dial is adam-p<p> with p in [0, 1], e.g. "
              "adam-p0.5)");
  TORCH_CHECK(p >= 0 && p <= 1, "Invalid Adam-p exponent: ", digits, " in '",
              name, "' (must be in [0, 1])");
  return p;
}

std::vector<std::string> resolve_optimizer_names(
    const std::vector<std::string>& names, const std::vector<double>& ps) {
  for (double p : ps)
    check_adam_p_exponent(p);
  std::vector<std::string> out;
  bool bare = false;
  for (const auto& name : names) {
    if (name == kAdamPPrefix) {
      bare = true;
      if (ps.empty())
        out.push_back(adam_p_name(kDefaultAdamP));
      for (double p : ps)
        out.push_back(adam_p_name(p));
    } else if (is_registered(name)) {
      out.push_back(name);
    } else {
      find_optimizer(name);  // throws for an unknown or malformed name
      out.push_back(adam_p_name(*adam_p_exponent(name)));
    }
  }
  TORCH_CHECK(ps.empty() || bare,
              "--p applies to a bare 'adam-p' in the "
              "optimizer list, and there is none (give --opt adam-p, or name "
              "the exponent as adam-p0.5)");
  return out;
}

std::vector<std::string> optimizer_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& e : r.entries)
    out.push_back(e.name);
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& name, const ParamSplit& params, double lr) {
  TORCH_CHECK(lr > 0 && std::isfinite(lr), "Invalid learning rate: ", lr,
              " (must be positive and finite)");
  return find_optimizer(name).make(params, lr);
}

}  // namespace optim
