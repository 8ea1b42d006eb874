#include "optim/soap.h"

#include <cmath>
#include <string>

namespace optim {

namespace {

void check_soap_options(const SoapOptions& options) {
  check_adam_options(options.lr(), options.betas(), options.eps());
  TORCH_CHECK(options.shampoo_beta() < 1.0,
              "Invalid shampoo_beta value: ", options.shampoo_beta());
  TORCH_CHECK(
      options.precondition_frequency() >= 1,
      "Invalid precondition frequency: ", options.precondition_frequency());
  TORCH_CHECK(options.max_precond_dim() >= 1,
              "Invalid max_precond_dim: ", options.max_precond_dim());
}

// All dimensions of a tensor with `dims` dimensions but k.
std::vector<int64_t> all_but(int64_t dims, int64_t k) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < dims; ++i) {
    if (i != k)
      out.push_back(i);
  }
  return out;
}

}  // namespace

Hparams SoapOptions::hparams() const {
  return {{"beta1", std::get<0>(betas())},
          {"beta2", std::get<1>(betas())},
          {"shampoo_beta", gram_beta()},
          {"eps", eps()},
          {"precondition_frequency", double(precondition_frequency())},
          {"max_precond_dim", double(max_precond_dim())},
          {"precondition_left", double(precondition_left())},
          {"correct_bias", double(correct_bias())},
          {"weight_decay", 0.0}};
}

double SoapOptions::gram_beta() const {
  return shampoo_beta() >= 0 ? shampoo_beta() : std::get<1>(betas());
}

torch::Tensor soap_project(const torch::Tensor& g,
                           const std::vector<torch::Tensor>& bases) {
  TORCH_CHECK(static_cast<int64_t>(bases.size()) == g.dim(),
              "soap_project: ", bases.size(), " bases for a tensor of shape ",
              g.sizes());
  // Each contraction consumes dimension 0 and appends the result last, so
  // after one pass the dimensions are back in order.
  torch::Tensor x = g;
  for (const auto& q : bases) {
    x = q.defined() ? torch::tensordot(x, q, {0}, {0}) : x.movedim(0, -1);
  }
  return x;
}

torch::Tensor soap_project_back(const torch::Tensor& g,
                                const std::vector<torch::Tensor>& bases) {
  TORCH_CHECK(static_cast<int64_t>(bases.size()) == g.dim(),
              "soap_project_back: ", bases.size(),
              " bases for a tensor of shape ", g.sizes());
  torch::Tensor x = g;
  for (const auto& q : bases) {
    x = q.defined() ? torch::tensordot(x, q, {0}, {1}) : x.movedim(0, -1);
  }
  return x;
}

void soap_accumulate_(const std::vector<torch::Tensor>& stats,
                      const torch::Tensor& grad, double beta) {
  for (int64_t k = 0; k < static_cast<int64_t>(stats.size()); ++k) {
    if (!stats[k].defined())
      continue;
    const auto others = all_but(grad.dim(), k);
    stats[k].lerp_(torch::tensordot(grad, grad, others, others), 1 - beta);
  }
}

torch::Tensor soap_eigenbasis(const torch::Tensor& stat) {
  torch::Tensor vectors = std::get<1>(torch::linalg_eigh(stat, "L"));
  return vectors.flip({1});  // eigh sorts ascending
}

torch::Tensor soap_refresh_basis(const torch::Tensor& stat,
                                 const torch::Tensor& basis,
                                 torch::Tensor& exp_avg_sq, int64_t dim) {
  const torch::Tensor rayleigh = torch::diag(basis.t().mm(stat).mm(basis));
  const torch::Tensor order = torch::argsort(rayleigh, 0, /*descending=*/true);
  exp_avg_sq = exp_avg_sq.index_select(dim, order);
  return std::get<0>(torch::linalg_qr(stat.mm(basis.index_select(1, order))));
}

namespace {

// The per-dimension buffers "stat_k" (GG_k) and "basis_k" (Q_k) of a state,
// as a vector over the dimensions, undefined where a dimension has none.
constexpr char kStat[] = "stat_", kBasis[] = "basis_";

std::vector<torch::Tensor> per_dim(const ParamState& state, const char* name,
                                   int64_t dims) {
  std::vector<torch::Tensor> out(dims);
  for (int64_t k = 0; k < dims; ++k) {
    const std::string key = name + std::to_string(k);
    if (state.has(key))
      out[k] = state.at(key);
  }
  return out;
}

// The first call: statistics and their eigenbases, no update.
void soap_start_(const torch::Tensor& grad, ParamState& state,
                 const SoapOptions& options) {
  std::vector<torch::Tensor> stats(grad.dim());
  for (int64_t k = 0; k < grad.dim(); ++k) {
    const int64_t n = grad.size(k);
    const bool on = grad.dim() >= 2 && n <= options.max_precond_dim() &&
                    (k > 0 || options.precondition_left());
    if (on)
      stats[k] = torch::zeros({n, n}, grad.options());
  }
  soap_accumulate_(stats, grad, options.gram_beta());
  for (int64_t k = 0; k < grad.dim(); ++k) {
    if (stats[k].defined()) {
      state.set(kStat + std::to_string(k), stats[k]);
      state.set(kBasis + std::to_string(k), soap_eigenbasis(stats[k]));
    }
  }
}

// Every precondition_frequency updates: new bases from the statistics, v
// reordered with them, m moved into the new basis.
void soap_refresh_(ParamState& state, const std::vector<torch::Tensor>& bases) {
  const auto dims = static_cast<int64_t>(bases.size());
  const std::vector<torch::Tensor> stats = per_dim(state, kStat, dims);
  const torch::Tensor m = soap_project_back(state.at("exp_avg"), bases);
  std::vector<torch::Tensor> fresh = bases;
  torch::Tensor v = state.at("exp_avg_sq");
  for (int64_t k = 0; k < dims; ++k) {
    if (fresh[k].defined()) {
      fresh[k] = soap_refresh_basis(stats[k], fresh[k], v, k);
      state.set(kBasis + std::to_string(k), fresh[k]);
    }
  }
  state.set("exp_avg_sq", v);
  state.set("exp_avg", soap_project(m, fresh).contiguous());
}

}  // namespace

void soap_step_(const torch::Tensor& p, const torch::Tensor& grad,
                ParamState& state, const SoapOptions& options) {
  state.step += 1;
  if (state.step == 1) {
    soap_start_(grad, state, options);
    return;
  }
  const int64_t t = state.step - 1;  // updates, this one included
  const auto [beta1, beta2] = options.betas();
  const std::vector<torch::Tensor> bases = per_dim(state, kBasis, grad.dim());
  const torch::Tensor projected = soap_project(grad, bases);
  torch::Tensor& m = state.at("exp_avg");
  torch::Tensor& v = state.at("exp_avg_sq");
  m.mul_(beta1).add_(projected, 1 - beta1);
  v.mul_(beta2).addcmul_(projected, projected, 1 - beta2);
  const torch::Tensor denom = v.sqrt().add_(options.eps());
  double step_size = options.lr();
  if (options.correct_bias()) {
    step_size *= std::sqrt(1 - std::pow(beta2, t)) / (1 - std::pow(beta1, t));
  }
  p.add_(soap_project_back(m / denom, bases), -step_size);

  soap_accumulate_(per_dim(state, kStat, grad.dim()), grad,
                   options.gram_beta());
  if (t % options.precondition_frequency() == 0)
    soap_refresh_(state, bases);
}

Soap::Soap(std::vector<torch::Tensor> params, SoapOptions defaults)
    : StatefulOptimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                        std::make_unique<SoapOptions>(defaults)) {
  check_soap_options(defaults);
}

torch::Tensor Soap::step(LossClosure closure) {
  return step_each<SoapOptions>(
      closure, [](const SoapOptions& options) { check_soap_options(options); },
      [&](const torch::Tensor& p, SoapOptions& options) {
        ParamState& s = state_for(p, [&](ParamState& fresh) {
          fresh.set("exp_avg",
                    torch::zeros_like(p, torch::MemoryFormat::Contiguous));
          fresh.set("exp_avg_sq",
                    torch::zeros_like(p, torch::MemoryFormat::Contiguous));
        });
        soap_step_(p, p.grad(), s, options);
      });
}

}  // namespace optim
