#include "bridge/python_optimizer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <map>

#include "bridge/python.h"
#include "bridge/rule_call.h"
#include "model/generator.h"
#include "twins/stop.h"

namespace bridge {

namespace {

constexpr int kMatricesPerLayer = 6;  // wq, wk, wv, wo, w1, w2

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
  const std::vector<torch::Tensor> all = p.all();
  TORCH_CHECK(p.roles.size() == all.size() && p.heads >= 1,
              "Python rules: the parameters carry no roles (",
              p.roles.size(), " roles for ", all.size(),
              " tensors; twins::param_split gives them)");
  std::vector<ParamGroupInfo> out;
  std::map<int64_t, int> gains, matrices;  // per layer, seen so far
  for (size_t i = 0; i < all.size(); ++i) {
    const optim::ParamRole& r = p.roles[i];
    ParamGroupInfo g;
    g.param = all[i];
    g.role = optim::to_string(r.role);
    g.layer = r.layer;
    switch (r.role) {
      case optim::Role::kWq:
      case optim::Role::kWk:
      case optim::Role::kWv:
      case optim::Role::kWo: {
        // The attention's projections: head_dim = d_model / heads rows
        // (W_O: columns) per head; W_K, W_V of grouped-query attention
        // have fewer heads than W_Q.
        const bool wo = r.role == optim::Role::kWo;
        const int64_t d_model = all[i].size(wo ? 0 : 1);
        g.head_dim = d_model / p.heads;
        g.heads = all[i].size(wo ? 1 : 0) / g.head_dim;
        g.gauge = r.role == optim::Role::kWq || r.role == optim::Role::kWk;
      }
        [[fallthrough]];
      case optim::Role::kW1:
      case optim::Role::kW2:
        g.matrix = true;
        ++matrices[r.layer];
        break;
      case optim::Role::kGain:
        if (r.layer >= 0) {
          const int n = ++gains[r.layer];
          TORCH_CHECK(n <= 2, "Python rules: layer ", r.layer,
                      " has more than two gains");
          g.name = fmt::format("layers.{}.norm{}", r.layer, n);
        } else {
          g.name = "norm_f";
        }
        break;
      default:
        break;
    }
    if (g.name.empty()) {
      g.name = r.layer >= 0 ? fmt::format("layers.{}.{}", r.layer, g.role)
                            : g.role;
    }
    out.push_back(std::move(g));
  }
  for (const auto& [layer, n] : matrices) {
    TORCH_CHECK(n == kMatricesPerLayer, "Python rules: layer ", layer, " has ",
                n, " matrices (expected wq, wk, wv, wo, w1, w2)");
  }
  return out;
}

// ---------------------------------------------------------------------------

struct PythonOptimizer::State {
  py::object adapter;  // adapter.Adapter: the optimizer, its stream, checks
  bool modes = false;
  // Its steps swap the copy's stream into the default generator
  // (bridge/conventions.py, isolated_steps): false for a rule known to
  // draw nothing, whose steps then need not take the generator's mutex.
  bool isolated_steps = true;
};

namespace {

// What adapter.make needs of the model beyond the groups: the widths
// a library may ask for by name (adam-mini's dim and n_heads).
py::dict model_info(const std::vector<ParamGroupInfo>& groups) {
  py::dict d;
  int64_t layers = 0;
  for (const auto& g : groups) {
    if (g.role == "wq") {
      d["d_model"] = g.param.size(0);
      d["heads"] = g.heads;
      d["kv_heads"] = g.heads;
      d["head_dim"] = g.head_dim;
      ++layers;
    }
  }
  d["layers"] = layers;
  return d;
}

// The caller's closure as a Python callable, valid while `alive` is true:
// the C++ evaluation runs without the GIL.
py::object python_closure(const torch::optim::Optimizer::LossClosure& closure,
                          const std::shared_ptr<bool>& alive,
                          const std::string& rule) {
  if (!closure)
    return py::none();
  return py::cpp_function([closure, alive, rule]() -> py::object {
    TORCH_CHECK(*alive, rule,
                ": the closure was called after its step() returned");
    torch::Tensor loss;
    {
      py::gil_scoped_release release;
      loss = closure();
    }
    return wrap(loss);
  });
}

}  // namespace

PythonOptimizer::PythonOptimizer(std::shared_ptr<const Rule> rule,
                                 const optim::ParamSplit& params, double lr)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(params.all())},
                              std::make_unique<PythonOptimizerOptions>(lr)),
      rule_(std::move(rule)) {
  const std::vector<ParamGroupInfo> groups = bridge::param_groups(params);
  ensure_interpreter();
  std::string error;
  {
    // The rule runs with its own stream in the default generator: no
    // model is built meanwhile. The mutex before the GIL, always.
    std::lock_guard<std::recursive_mutex> generator(
        model::default_generator_mutex());
    py::gil_scoped_acquire gil;
    RuleCall call(rule_->name, "its constructor", 0);
    try {
      auto state = std::make_unique<State>();
      py::object fn = rule_->callable();
      py::dict kwargs = rule_->kwargs(lr);
      state->adapter = adapter_module().attr("make")(fn, python_groups(groups),
                                               kwargs, model_info(groups));
      state->modes = !state->adapter.attr("modes").is_none();
      state->isolated_steps =
          state->adapter.attr("isolated_steps").cast<bool>();
      state_ = std::move(state);
    } catch (const py::error_already_set& e) {
      if (call.interrupted()) {
        twins::restore_stop_handlers();
        call.throw_stopped();
      }
      error = fmt::format("{}: rejected its arguments or parameters: {}",
                          rule_->name, python_error(e));
    }
  }
  twins::restore_stop_handlers();  // a rule's own handler does not stay
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
  ++steps_;
  std::string error;
  auto alive = std::make_shared<bool>(true);
  {
    std::unique_lock<std::recursive_mutex> generator(
        model::default_generator_mutex(), std::defer_lock);
    if (state_->isolated_steps)
      generator.lock();
    py::gil_scoped_acquire gil;
    bool stopped = false;
    {
      RuleCall call(rule_->name, "step()", steps_);
      try {
        state_->adapter.attr("step")(
            python_closure(closure, alive, rule_->name));
      } catch (const py::error_already_set& e) {
        stopped = call.interrupted();
        error = fmt::format("{}: step() raised at step {}: {}", rule_->name,
                            steps_, python_error(e));
      }
      *alive = false;
      if (stopped) {
        twins::restore_stop_handlers();
        call.throw_stopped();
      }
    }
    // A handler the rule put in place of the stop signals' is undone, so
    // that SIGTERM still checkpoints (signal.signal(SIGTERM, SIG_IGN)).
    twins::restore_stop_handlers();
    // A state a checkpoint cannot hold (a lock, an open file) is found at
    // the first step, not when the first checkpoint is written minutes
    // later: the state after one step is what every later one holds.
    if (error.empty() && steps_ == 1) {
      try {
        py::module_::import("torch").attr("save")(
            state_->adapter.attr("state_dict")(),
            py::module_::import("io").attr("BytesIO")());
      } catch (const py::error_already_set& e) {
        error = fmt::format(
            "{}: its state cannot be checkpointed (torch.save of its "
            "state_dict() after step 1: {}); a rule's state must be "
            "picklable (docs/extending.md)",
            rule_->name, python_error(e));
      }
    }
  }
  TORCH_CHECK(error.empty(), error);
  return {};
}

bool PythonOptimizer::has_evaluation_weights() const {
  return state_->modes;
}

void PythonOptimizer::to_evaluation() {
  call_rule("evaluation", "eval()");
}

void PythonOptimizer::to_training() {
  call_rule("training", "train()");
}

void PythonOptimizer::call_rule(const char* method, const char* what) {
  std::string error;
  {
    std::lock_guard<std::recursive_mutex> generator(
        model::default_generator_mutex());
    py::gil_scoped_acquire gil;
    RuleCall call(rule_->name, what, steps_);
    try {
      state_->adapter.attr(method)();
    } catch (const py::error_already_set& e) {
      if (call.interrupted()) {
        twins::restore_stop_handlers();
        call.throw_stopped();
      }
      error = fmt::format("{}: {} raised after step {}: {}", rule_->name,
                          what, steps_, python_error(e));
    }
  }
  twins::restore_stop_handlers();
  TORCH_CHECK(error.empty(), error);
}

void PythonOptimizer::save(torch::serialize::OutputArchive& archive) const {
  std::string bytes, error;
  {
    py::gil_scoped_acquire gil;
    try {
      py::object buffer = py::module_::import("io").attr("BytesIO")();
      py::module_::import("torch").attr("save")(
          state_->adapter.attr("state_dict")(), buffer);
      bytes = buffer.attr("getvalue")().cast<std::string>();
    } catch (const py::error_already_set& e) {
      error = fmt::format("{}: saving its state_dict() failed: {}",
                          rule_->name, python_error(e));
    }
  }
  TORCH_CHECK(error.empty(), error);
  torch::Tensor data =
      torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  archive.write("rule", c10::IValue(rule_->name));
  archive.write("steps", c10::IValue(steps_));
  archive.write("state_dict", data, /*is_buffer=*/true);
}

void PythonOptimizer::load(torch::serialize::InputArchive& archive) {
  c10::IValue value;
  archive.read("rule", value);
  TORCH_CHECK(value.isString() && value.toStringRef() == rule_->name,
              rule_->name, ": the saved state is of another rule (",
              value.isString() ? value.toStringRef() : std::string("?"), ")");
  archive.read("steps", value);
  const int64_t steps = value.toInt();
  torch::Tensor data;
  archive.read("state_dict", data, /*is_buffer=*/true);
  data = data.contiguous();
  const std::string bytes(static_cast<const char*>(data.data_ptr()),
                          static_cast<size_t>(data.numel()));
  std::string error;
  {
    py::gil_scoped_acquire gil;
    try {
      py::object buffer =
          py::module_::import("io").attr("BytesIO")(py::bytes(bytes));
      // Our own bytes: every object the rule's state holds may come back.
      py::object sd = py::module_::import("torch").attr("load")(
          buffer, py::arg("weights_only") = false);
      state_->adapter.attr("load_state_dict")(sd);
    } catch (const py::error_already_set& e) {
      error = fmt::format("{}: loading its state_dict() failed: {}",
                          rule_->name, python_error(e));
    }
  }
  TORCH_CHECK(error.empty(), error);
  steps_ = steps;
}

optim::OptimizerInfo rule_info(std::shared_ptr<const Rule> rule,
                               std::string summary,
                               std::optional<optim::Equivariance> predicted,
                               optim::Hparams hparams, double lr) {
  optim::OptimizerInfo info;
  info.name = rule->name;
  info.summary = std::move(summary);
  info.predicted = predicted;
  info.hparams = std::move(hparams);
  info.lr = lr;
  info.make = [rule](const optim::ParamSplit& p,
                     double rate) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<PythonOptimizer>(rule, p, rate);
  };
  return info;
}

}  // namespace bridge
