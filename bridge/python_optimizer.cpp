#include "bridge/python_optimizer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/python_variable.h>

#include "bridge/python.h"

namespace bridge {

namespace {

constexpr int64_t kMatricesPerLayer = 6;  // wq, wk, wv, wo, w1, w2
const char* const kMatrixRoles[kMatricesPerLayer] = {"wq", "wk", "wv",
                                                     "wo", "w1", "w2"};

bool same(const torch::Tensor& a, const torch::Tensor& b) {
  return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
}

// The C++ tensor as a Python torch.Tensor: the same TensorImpl, so an
// in-place update from Python is one of the model's parameters.
py::object wrap(const torch::Tensor& t) {
  PyObject* o = THPVariable_Wrap(t);
  if (!o)
    throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

py::list python_groups(const std::vector<ParamGroupInfo>& groups) {
  py::list out;
  for (const auto& g : groups) {
    py::dict d;
    py::list params;
    params.append(wrap(g.param));
    d["params"] = params;
    d["name"] = g.name;
    d["role"] = g.role;
    d["layer"] = g.layer >= 0 ? py::object(py::int_(g.layer)) : py::none();
    d["matrix"] = g.matrix;
    if (g.heads > 0) {
      d["heads"] = g.heads;
      d["head_dim"] = g.head_dim;
      py::list rows;
      for (int64_t h = 0; h < g.heads; ++h)
        rows.append(py::make_tuple(h * g.head_dim, (h + 1) * g.head_dim));
      d["head_rows"] = rows;
      d["gauge"] = g.gauge;
    }
    out.append(d);
  }
  return out;
}

}  // namespace

std::vector<ParamGroupInfo> param_groups(const optim::ParamSplit& p) {
  const int64_t layers =
      static_cast<int64_t>(p.matrices.size()) / kMatricesPerLayer;
  const bool shaped =
      layers >= 1 &&
      static_cast<int64_t>(p.matrices.size()) == layers * kMatricesPerLayer &&
      static_cast<int64_t>(p.others.size()) == 2 + 2 * layers + 2 &&
      static_cast<int64_t>(p.qk.size()) == 2 * layers && p.heads >= 1;
  TORCH_CHECK(shaped, "Python rules: the parameters are not a transformer's (",
              p.matrices.size(), " matrices, ", p.others.size(), " others, ",
              p.qk.size(), " W_Q/W_K, ", p.heads, " heads)");
  std::vector<ParamGroupInfo> out;
  auto add = [&](const torch::Tensor& t, std::string name, std::string role,
                 int64_t layer) {
    ParamGroupInfo g;
    g.param = t;
    g.name = std::move(name);
    g.role = std::move(role);
    g.layer = layer;
    out.push_back(std::move(g));
    return &out.back();
  };
  for (int64_t l = 0; l < layers; ++l) {
    TORCH_CHECK(
        same(p.qk[2 * l], p.matrices[kMatricesPerLayer * l]) &&
            same(p.qk[2 * l + 1], p.matrices[kMatricesPerLayer * l + 1]),
        "Python rules: layer ", l,
        "'s W_Q, W_K are not its first two matrices");
    for (int64_t i = 0; i < kMatricesPerLayer; ++i) {
      const torch::Tensor& w = p.matrices[kMatricesPerLayer * l + i];
      ParamGroupInfo* g =
          add(w, fmt::format("layers.{}.{}", l, kMatrixRoles[i]),
              kMatrixRoles[i], l);
      g->matrix = true;
      if (i < 4) {  // the attention's projections: d_model rows per head
        g->heads = p.heads;
        g->head_dim = (i == 3 ? w.size(1) : w.size(0)) / p.heads;
        g->gauge = i < 2;
      }
    }
  }
  add(p.others[0], "embedding", "embedding", -1);
  add(p.others[1], "positional", "positional", -1);
  for (int64_t l = 0; l < layers; ++l) {
    add(p.others[2 + 2 * l], fmt::format("layers.{}.norm1", l), "gain", l);
    add(p.others[3 + 2 * l], fmt::format("layers.{}.norm2", l), "gain", l);
  }
  add(p.others[2 + 2 * layers], "norm_f", "gain", -1);
  add(p.others[3 + 2 * layers], "head", "head", -1);
  return out;
}

// ---------------------------------------------------------------------------

struct PythonOptimizer::State {
  py::object optimizer;
  py::object step;
};

PythonOptimizer::PythonOptimizer(std::shared_ptr<const Rule> rule,
                                 const optim::ParamSplit& params, double lr)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(params.all())},
                              std::make_unique<PythonOptimizerOptions>(lr)),
      rule_(std::move(rule)) {
  const std::vector<ParamGroupInfo> groups = bridge::param_groups(params);
  ensure_interpreter();
  std::string error;
  {
    py::gil_scoped_acquire gil;
    try {
      auto state = std::make_unique<State>();
      py::object fn = rule_->callable();
      py::dict kwargs = rule_->kwargs(lr);
      state->optimizer = fn(python_groups(groups), **kwargs);
      if (py::hasattr(state->optimizer, "step"))
        state->step = state->optimizer.attr("step");
      if (!state->step || !PyCallable_Check(state->step.ptr())) {
        error =
            fmt::format("{}: built a {} without a step() method", rule_->name,
                        py::str(py::type::of(state->optimizer).attr("__name__"))
                            .cast<std::string>());
      } else {
        state_ = std::move(state);
      }
    } catch (const py::error_already_set& e) {
      error = fmt::format("{}: rejected its arguments or parameters: {}",
                          rule_->name, python_error(e));
    }
  }
  TORCH_CHECK(error.empty(), error);
}

PythonOptimizer::~PythonOptimizer() {
  if (!state_)
    return;
  if (!Py_IsInitialized()) {
    // The interpreter is gone (process exit): its objects went with it.
    (void)state_.release();
    return;
  }
  py::gil_scoped_acquire gil;
  state_.reset();
}

torch::Tensor PythonOptimizer::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  ++steps_;
  std::string error;
  {
    py::gil_scoped_acquire gil;
    try {
      state_->step();
    } catch (const py::error_already_set& e) {
      error = fmt::format("{}: step() raised at step {}: {}", rule_->name,
                          steps_, python_error(e));
    }
  }
  TORCH_CHECK(error.empty(), error);
  return loss;
}

}  // namespace bridge
