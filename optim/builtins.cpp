#include "optim/builtins.h"

#include <fmt/format.h>

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

// The dial at p; equivariant only at p = 0 (docs/protocol.md §5.1).
OptimizerInfo adam_p_entry(const std::string& name, double p,
                           std::string summary) {
  return make_entry(
      name, std::move(summary),
      p == 0 ? Equivariance::kEquivariant : Equivariance::kBasisDependent,
      AdamPOptions().p(p),
      [](const ParamSplit& s, const AdamPOptions& options) {
        return std::make_unique<AdamP>(s.all(), options);
      });
}

}  // namespace

// Their update rules are docs/protocol.md §5.
std::vector<OptimizerInfo> builtin_optimizers() {
  std::vector<OptimizerInfo> r;

  r.push_back(make_entry(
      "adam",
      "Adam, per-coordinate second moment (LibTorch's torch::optim::Adam, "
      "whose arithmetic is the protocol's bias-corrected Adam)",
      Equivariance::kBasisDependent, torch::optim::AdamOptions(),
      [](const ParamSplit& p, const torch::optim::AdamOptions& o) {
        return std::make_unique<torch::optim::Adam>(p.all(), o);
      }));
  r.push_back(make_entry(
      "sgd",
      "heavy-ball momentum 0.9, undamped: b = 0.9 b + g; p -= lr b "
      "(LibTorch's torch::optim::SGD with dampening 0 computes exactly this)",
      Equivariance::kEquivariant,
      torch::optim::SGDOptions(0).momentum(0.9).dampening(0),
      [](const ParamSplit& p, const torch::optim::SGDOptions& o) {
        return std::make_unique<torch::optim::SGD>(p.all(), o);
      }));
  r.push_back(
      make_entry("scalar-adam",
                 "Adam's moments with one denominator shared by all parameters",
                 Equivariance::kEquivariant, ScalarAdamOptions(),
                 [](const ParamSplit& p, const ScalarAdamOptions& options) {
                   return std::make_unique<ScalarAdam>(p.all(), options);
                 }));
  r.push_back(make_entry(
      "muon",
      "hybrid Muon: NS5 of undamped momentum on hidden matrices, Adam 1e-3 "
      "on the rest",
      Equivariance::kEquivariant, MuonOptions(),
      [](const ParamSplit& p, const MuonOptions& options) {
        return std::make_unique<Muon>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "rmsprop",
      "classical RMSprop: v = 0.99 v + 0.01 g^2, p -= lr g / (sqrt(v) + "
      "eps), no momentum",
      Equivariance::kBasisDependent, RMSpropOptions(),
      [](const ParamSplit& p, const RMSpropOptions& options) {
        return std::make_unique<RMSprop>(p.all(), options);
      }));
  r.push_back(make_entry(
      "signum", "sign of an EMA momentum: m = 0.9 m + 0.1 g, p -= lr sign(m)",
      Equivariance::kBasisDependent, SignumOptions(),
      [](const ParamSplit& p, const SignumOptions& options) {
        return std::make_unique<Signum>(p.all(), options);
      }));
  r.push_back(make_entry(
      "lion", "p -= lr sign(0.9 m + 0.1 g), then m = 0.99 m + 0.01 g",
      Equivariance::kBasisDependent, LionOptions(),
      [](const ParamSplit& p, const LionOptions& options) {
        return std::make_unique<Lion>(p.all(), options);
      }));
  r.push_back(make_entry(
      "adafactor",
      "factored second moment: row/column EMAs (0.999) of g^2, V = R C^T / "
      "mean(R); p -= lr g / (sqrt(V_hat) + eps); 1-D unfactored",
      Equivariance::kBasisDependent, AdafactorOptions(),
      [](const ParamSplit& p, const AdafactorOptions& options) {
        return std::make_unique<Adafactor>(p.all(), options);
      }));
  r.push_back(make_entry(
      "shampoo",
      "hybrid Shampoo: hidden matrices p -= lr (L+I)^-1/4 G (R+I)^-1/4, "
      "L = sum G G^T, R = sum G^T G, roots every 20 steps; Adam 1e-3 on "
      "the rest",
      Equivariance::kEquivariant, ShampooOptions(),
      [](const ParamSplit& p, const ShampooOptions& options) {
        return std::make_unique<Shampoo>(p.matrices, p.others, options);
      }));
  r.push_back(adam_p_entry(
      kAdamPPrefix, kDefaultAdamP,
      fmt::format("Adam-p dial: denominator (sqrt(v_hat)+eps)^p "
                  "(s+eps)^(1-p) + eps; p from --p or the name (adam-p0.25); "
                  "default p {}; p = 1 is adam, p = 0 scalar-adam "
                  "(equivariant)",
                  kDefaultAdamP)));
  // Optimizers in current use, each as its reference implementation with
  // its defaults; where the tool departs from them (dtype, no weight
  // decay, refresh frequency) each header says so (docs/protocol.md §5.3).
  r.push_back(make_entry(
      "soap",
      "SOAP: Adam (betas 0.95) in the eigenbasis of Shampoo's EMA "
      "statistics L, R, bases refreshed every 10 updates, no update at step "
      "1; 1-D parameters plain Adam",
      Equivariance::kEquivariant, SoapOptions(),
      [](const ParamSplit& p, const SoapOptions& options) {
        return std::make_unique<Soap>(p.all(), options);
      }));
  r.push_back(make_entry(
      "soap-right",
      "SOAP with only the right (column) side preconditioned: Adam on G Q_R "
      "(the control)",
      Equivariance::kBasisDependent, SoapOptions().precondition_left(false),
      [](const ParamSplit& p, const SoapOptions& options) {
        return std::make_unique<Soap>(p.all(), options);
      }));
  r.push_back(make_entry(
      "adam-mini",
      "Adam-mini: Adam's m per entry, one v per block (per head for W_Q, "
      "W_K; per row for other matrices; per tensor otherwise)",
      Equivariance::kEquivariant, AdamMiniOptions(),
      [](const ParamSplit& p, const AdamMiniOptions& options) {
        return std::make_unique<AdamMini>(p.all(), p.qk, p.heads, options);
      }));
  r.push_back(make_entry(
      "normuon",
      "hybrid NorMuon: NS5 of Nesterov momentum 0.95, normalised per row by "
      "an EMA of its mean square, rescaled to its norm; Adam 3e-4 on the "
      "rest (near-equivariant: NS5 is not exactly orthogonal)",
      Equivariance::kBasisDependent, NorMuonOptions(),
      [](const ParamSplit& p, const NorMuonOptions& options) {
        return std::make_unique<NorMuon>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "adamuon",
      "hybrid AdaMuon: NS5 of sign(Nesterov momentum), per-entry EMA of its "
      "square, update RMS 0.2 lr; Adam (betas 0.9, 0.95) at the same lr on "
      "the rest",
      Equivariance::kBasisDependent, AdaMuonOptions(),
      [](const ParamSplit& p, const AdaMuonOptions& options) {
        return std::make_unique<AdaMuon>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "scion-col",
      "hybrid Scion, column-norm LMO of the averaged gradient (alpha 0.1, "
      "scale 3) on hidden matrices; Adam 1e-3 on the rest",
      Equivariance::kEquivariant, ScionOptions().norm(ScionNorm::kColumn),
      [](const ParamSplit& p, const ScionOptions& options) {
        return std::make_unique<Scion>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "scion-row",
      "hybrid Scion, row-norm LMO of the averaged gradient (alpha 0.1, "
      "scale 3) on hidden matrices; Adam 1e-3 on the rest",
      Equivariance::kBasisDependent, ScionOptions().norm(ScionNorm::kRow),
      [](const ParamSplit& p, const ScionOptions& options) {
        return std::make_unique<Scion>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "shampoo-graft",
      "hybrid shampoo with Adam grafting: the shampoo direction at the norm "
      "of Adam's diagonal step (beta2 0.999, eps 1e-10); Adam 1e-3 on the "
      "rest",
      Equivariance::kBasisDependent, ShampooGraftOptions(),
      [](const ParamSplit& p, const ShampooGraftOptions& options) {
        return std::make_unique<ShampooGraft>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "muon-torch",
      "hybrid PyTorch Muon: Nesterov momentum 0.95 (EMA), NS on X/||X||, lr "
      "times sqrt(max(1, rows/cols)); Adam 1e-3 on the rest",
      Equivariance::kEquivariant, MuonTorchOptions(),
      [](const ParamSplit& p, const MuonTorchOptions& options) {
        return std::make_unique<MuonTorch>(p.matrices, p.others, options);
      }));
  r.push_back(make_entry(
      "cautious-sgd",
      "cautious sgd: heavy-ball momentum 0.9 masked by 1[b g > 0], rescaled "
      "by the mask's mean",
      Equivariance::kBasisDependent, CautiousSgdOptions(),
      [](const ParamSplit& p, const CautiousSgdOptions& options) {
        return std::make_unique<CautiousSgd>(p.all(), options);
      }));
  r.push_back(
      make_entry("cautious-adam",
                 "C-AdamW without weight decay: Adam's m masked by 1[m g > 0], "
                 "rescaled by the mask's mean, eps 1e-6",
                 Equivariance::kBasisDependent, CautiousAdamOptions(),
                 [](const ParamSplit& p, const CautiousAdamOptions& options) {
                   return std::make_unique<CautiousAdam>(p.all(), options);
                 }));
  return r;
}

// "adam-p<p>": the dial at p, built on first use.
std::vector<NameFamily> builtin_name_families() {
  return {{kAdamPPrefix, [](const std::string& name) {
             const double p = *adam_p_exponent(name);  // throws if malformed
             return std::optional<OptimizerInfo>(adam_p_entry(
                 name, p, fmt::format("Adam-p dial at p = {}", p)));
           }}};
}

}  // namespace optim
