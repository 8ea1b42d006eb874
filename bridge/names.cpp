// The py: / torch: names: parsing, the rule's identity (canonical name), and
// its registry entry. Registration goes through optim::register_optimizer
// when a name is resolved; a prefix resolver in the registry (a hook that
// turns an unknown "py:" / "torch:" name into an entry on first lookup)
// would call resolve_rule from there instead of the app calling
// resolve_rules before planning.
#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bridge/bridge.h"
#include "bridge/python.h"
#include "optim/registry.h"
#include "twins/pair.h"

namespace bridge {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kTorchPrefix[] = "torch:";
constexpr char kFilePrefix[] = "py:";
constexpr char kCallablePrefix[] = "python:";
constexpr size_t kHashDigits = 16;

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  }
  return true;
}

bool is_hash(const std::string& s) {
  if (s.size() != kHashDigits)
    return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  }
  return true;
}

// What the theory predicts for torch.optim's classes under a rotation of a
// head's rows (docs/protocol.md §5): a rule whose update is a linear
// combination, with scalar coefficients, of the gradients and parameters is
// equivariant (SGD with any momentum, Nesterov, dampening or weight decay;
// ASGD, whose step size is a scalar schedule and whose average is not the
// model). Every rule that divides, clips or signs coordinate by coordinate
// is basis-dependent: Adam, AdamW, NAdam, RAdam (after its first steps,
// which are momentum SGD), Adamax, Adagrad, Adadelta, RMSprop, Rprop.
optim::Equivariance torch_prediction(const std::string& cls) {
  return cls == "SGD" || cls == "ASGD" ? optim::Equivariance::kEquivariant
                                       : optim::Equivariance::kBasisDependent;
}

// A name taken apart: prefix kind, file, class or factory, the hash a
// canonical py: name carries, the inline JSON arguments.
struct Parsed {
  Rule::Kind kind = Rule::Kind::kTorch;
  std::string path, target, hash;
  json args = json::object();
};

json parse_object(const std::string& text, const std::string& rule) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "Malformed arguments of '", rule, "': ", text,
                " is not JSON (", e.what(),
                "); expected one object, e.g. {\"momentum\": 0.9}");
  }
  TORCH_CHECK(j.is_object(), "Malformed arguments of '", rule, "': ", text,
              " is not a JSON object (e.g. {\"momentum\": 0.9})");
  return j;
}

Parsed parse(const std::string& name) {
  Parsed p;
  const size_t brace = name.find('{');
  const std::string head = name.substr(0, brace);
  if (brace != std::string::npos)
    p.args = parse_object(name.substr(brace), name);
  const char* usage =
      " (expected torch:NAME or py:FILE.py:NAME, optionally followed by "
      "JSON arguments: torch:SGD{\"momentum\": 0.9})";
  if (starts_with(head, kTorchPrefix)) {
    p.kind = Rule::Kind::kTorch;
    p.target = head.substr(sizeof(kTorchPrefix) - 1);
  } else if (starts_with(head, kFilePrefix)) {
    p.kind = Rule::Kind::kFile;
    const std::string rest = head.substr(sizeof(kFilePrefix) - 1);
    const size_t colon = rest.rfind(':');
    TORCH_CHECK(colon != std::string::npos && colon > 0,
                "Malformed Python rule name: '", name, "'", usage);
    p.path = rest.substr(0, colon);
    p.target = rest.substr(colon + 1);
    const size_t hash = p.path.rfind('#');
    if (hash != std::string::npos && is_hash(p.path.substr(hash + 1))) {
      p.hash = p.path.substr(hash + 1);
      p.path.resize(hash);
    }
  } else {
    TORCH_CHECK(!starts_with(head, kCallablePrefix), "Python rule '", name,
                "' was defined in a Python process and exists only there "
                "(name a file instead: py:FILE.py:NAME)");
    TORCH_CHECK(false, "Malformed Python rule name: '", name, "'", usage);
  }
  TORCH_CHECK(is_identifier(p.target), "Malformed Python rule name: '", name,
              "': '", p.target, "' is not a Python name", usage);
  return p;
}

std::string read_file(const std::string& path, const std::string& rule) {
  TORCH_CHECK(fs::is_regular_file(path), rule, ": no such file '", path, "'");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  TORCH_CHECK(in.good() || in.eof(), rule, ": cannot read '", path, "'");
  return text.str();
}

// The rule's public names, for an error about a missing one.
std::string defined_names(const py::dict& ns) {
  std::string out;
  for (const auto& [k, v] : ns) {
    const std::string n = py::str(k);
    if (n.empty() || n[0] == '_' || !PyCallable_Check(v.ptr()) ||
        py::isinstance<py::module_>(v))
      continue;
    out += (out.empty() ? "" : ", ") + n;
  }
  return out.empty() ? "nothing callable" : out;
}

// Registration after the has_optimizer check, one at a time. Taken with
// the GIL held and never waiting for it inside.
std::mutex register_mutex;

// Registers `rule` unless its name is (a rule resolved before), checking a
// default rate given again.
std::string register_rule(std::shared_ptr<Rule> rule, std::string summary,
                          optim::Equivariance predicted, optim::Hparams hp,
                          double lr) {
  std::lock_guard<std::mutex> lock(register_mutex);
  const std::string name = rule->name;
  if (optim::has_optimizer(name)) {
    const double had = optim::find_optimizer(name).lr;
    TORCH_CHECK(lr <= 0 || lr == had, name, ": named with default lr ", lr,
                " and before with ", had,
                " (name one rate per rule, or pass --lr)");
    return name;
  }
  optim::register_optimizer(rule_info(std::move(rule), std::move(summary),
                                      predicted, std::move(hp), lr));
  return name;
}

}  // namespace

bool available() {
  return true;
}

bool is_python_rule(const std::string& name) {
  return starts_with(name, kTorchPrefix) || starts_with(name, kFilePrefix) ||
         starts_with(name, kCallablePrefix);
}

std::string resolve_rule(const std::string& name,
                         const std::string& args_json) {
  TORCH_CHECK(is_python_rule(name), "Not a Python rule name: '", name,
              "' (torch:NAME or py:FILE.py:NAME)");
  if (starts_with(name, kCallablePrefix) && optim::has_optimizer(name) &&
      args_json.empty())
    return name;
  Parsed p = parse(name);
  if (!args_json.empty()) {
    const json extra = parse_object(args_json, name);
    for (const auto& [k, v] : extra.items()) {
      if (!p.args.contains(k))
        p.args[k] = v;  // the name's own arguments win
    }
  }
  double lr = 0;
  if (p.args.contains("lr")) {
    const json& v = p.args["lr"];
    TORCH_CHECK(
        v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()),
        "Invalid learning rate in the arguments of '", name, "': ", v.dump(),
        " (must be a positive number)");
    lr = v.get<double>();
    p.args.erase("lr");
  }
  auto rule = std::make_shared<Rule>();
  rule->kind = p.kind;
  rule->target = p.target;
  rule->args_json = p.args.empty() ? "" : p.args.dump();
  if (p.kind == Rule::Kind::kFile) {
    rule->path = fs::path(p.path).lexically_normal().string();
    rule->source = read_file(rule->path, name);
  }
  ensure_interpreter();
  py::gil_scoped_acquire gil;
  std::string summary;
  optim::Equivariance predicted = optim::Equivariance::kBasisDependent;
  optim::Hparams hparams;
  try {
    if (p.kind == Rule::Kind::kTorch) {
      py::module_ torch = py::module_::import("torch");
      py::object optim_module = py::module_::import("torch.optim");
      py::object base = optim_module.attr("Optimizer");
      py::object cls = py::getattr(optim_module, p.target.c_str(), py::none());
      const bool is_class = py::isinstance<py::type>(cls) &&
                            PyObject_IsSubclass(cls.ptr(), base.ptr()) == 1 &&
                            !cls.is(base);
      if (!is_class) {
        std::string known;
        for (const auto& n : py::list(
                 py::module_::import("builtins").attr("dir")(optim_module))) {
          py::object c = optim_module.attr(n);
          if (py::isinstance<py::type>(c) &&
              PyObject_IsSubclass(c.ptr(), base.ptr()) == 1 && !c.is(base))
            known +=
                (known.empty() ? "" : ", ") + py::str(n).cast<std::string>();
        }
        TORCH_CHECK(false, "Unknown torch.optim optimizer: '", p.target,
                    "' in '", name, "' (torch ",
                    py::str(torch.attr("__version__")).cast<std::string>(),
                    " has ", known, ")");
      }
      rule->name = kTorchPrefix + p.target + rule->args_json;
      if (lr <= 0)
        lr = signature_lr(cls);
      // One construction on a stand-in parameter: arguments the class
      // rejects fail here, and its defaults are the record's
      // hyperparameters.
      py::object dummy = torch.attr("zeros")(1);
      dummy.attr("requires_grad_")();
      py::list params;
      params.append(dummy);
      py::dict kwargs = rule->kwargs(lr > 0 ? lr : 1e-3);
      py::object opt;
      try {
        opt = cls(params, **kwargs);
      } catch (const py::error_already_set& e) {
        TORCH_CHECK(false, rule->name,
                    ": rejected its arguments: ", python_error(e));
      }
      hparams = numeric_hparams(opt.attr("defaults"));
      predicted = torch_prediction(p.target);
      summary = fmt::format(
          "torch.optim.{} of PyTorch {}{}", p.target,
          py::str(torch.attr("__version__")).cast<std::string>(),
          rule->args_json.empty() ? "" : " with " + rule->args_json);
    } else {
      const std::string hash = content_hash(rule->source);
      TORCH_CHECK(p.hash.empty() || p.hash == hash, name, ": '", rule->path,
                  "' has changed since this name was recorded (its hash is "
                  "now ",
                  hash, ")");
      rule->name = fmt::format("{}{}#{}:{}{}", kFilePrefix, rule->path, hash,
                               p.target, rule->args_json);
      // Loaded once here for the checks; each optimizer loads it afresh.
      py::dict ns;
      try {
        ns = rule->load_module().attr("__dict__");
      } catch (const py::error_already_set& e) {
        TORCH_CHECK(false, name, ": '", rule->path,
                    "' failed to load: ", python_error(e));
      }
      TORCH_CHECK(ns.contains(p.target.c_str()), name, ": '", rule->path,
                  "' defines no '", p.target, "' (it defines ",
                  defined_names(ns), ")");
      py::object fn = ns[p.target.c_str()];
      py::object base = py::module_::import("torch.optim").attr("Optimizer");
      TORCH_CHECK(PyCallable_Check(fn.ptr()), name, ": '", p.target,
                  "' is not a class or a function");
      TORCH_CHECK(!py::isinstance<py::type>(fn) ||
                      PyObject_IsSubclass(fn.ptr(), base.ptr()) == 1,
                  name, ": '", p.target,
                  "' is a class but not a torch.optim.Optimizer");
      if (lr <= 0)
        lr = signature_lr(fn);
      predicted = stated_prediction(fn, predicted, name);
      hparams = numeric_hparams(py::module_::import("json").attr("loads")(
          rule->args_json.empty() ? std::string("{}") : rule->args_json));
      summary = fmt::format(
          "Python rule {} from {} (sha256 {}){}", p.target, rule->path, hash,
          rule->args_json.empty() ? "" : " with " + rule->args_json);
    }
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, name, ": ", python_error(e));
  }
  return register_rule(std::move(rule), std::move(summary), predicted,
                       std::move(hparams), lr);
}

std::vector<std::string> resolve_rules(const std::vector<std::string>& names,
                                       const std::string& args_json) {
  std::vector<std::string> out;
  for (const auto& n : names)
    out.push_back(is_python_rule(n) ? resolve_rule(n, args_json) : n);
  return out;
}

void check_rule(const twins::PairSpec& spec) {
  if (!is_python_rule(spec.opt))
    return;
  // The model's weights draw from the global generator; leave it as found.
  auto generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor rng = generator.get_state();
  const data::TaskShape shape = twins::make_task(spec, torch::kCPU)->shape();
  model::Transformer m = model::build(twins::model_config(spec, shape),
                                      spec.init_seed, spec.dtype, torch::kCPU);
  generator.set_state(rng);
  optim::make_optimizer(spec.opt, twins::param_split(m), spec.lr);
}

std::string register_callable(const py::object& fn,
                              const std::string& args_json, double default_lr) {
  TORCH_CHECK(PyCallable_Check(fn.ptr()),
              "twins: the optimizer must be a name, a class or a factory, got ",
              py::str(py::type::of(fn).attr("__name__")).cast<std::string>());
  json args = args_json.empty() ? json::object()
                                : parse_object(args_json, "python rule");
  double lr = default_lr;
  if (args.contains("lr")) {
    TORCH_CHECK(args["lr"].is_number() && args["lr"].get<double>() > 0,
                "twins: invalid lr ", args["lr"].dump(),
                " (must be a positive number)");
    lr = args["lr"].get<double>();
    args.erase("lr");
  }
  // The identity: the source where Python has it, else the code objects;
  // plus defaults and closure values, which the source does not show.
  py::module_ marshal = py::module_::import("marshal");
  py::object builtins = py::module_::import("builtins");
  std::string identity;
  try {
    identity = py::module_::import("inspect")
                   .attr("getsource")(fn)
                   .cast<std::string>();
  } catch (const py::error_already_set&) {
    py::list codes;
    if (py::hasattr(fn, "__code__")) {
      codes.append(fn.attr("__code__"));
    } else {
      py::dict members = builtins.attr("dict")(builtins.attr("vars")(fn));
      py::list keys = builtins.attr("sorted")(members);
      for (const auto& k : keys) {
        py::object v = members[k];
        if (py::hasattr(v, "__func__"))
          v = v.attr("__func__");
        if (py::hasattr(v, "__code__"))
          codes.append(v.attr("__code__"));
      }
    }
    for (const auto& c : codes)
      identity += marshal.attr("dumps")(c).cast<std::string>();
  }
  for (const char* attr : {"__defaults__", "__kwdefaults__"}) {
    if (py::hasattr(fn, attr))
      identity += py::repr(fn.attr(attr)).cast<std::string>();
  }
  if (py::hasattr(fn, "__closure__") && !fn.attr("__closure__").is_none()) {
    for (const auto& cell : fn.attr("__closure__"))
      identity += py::repr(cell.attr("cell_contents")).cast<std::string>();
  }
  auto rule = std::make_shared<Rule>();
  rule->kind = Rule::Kind::kCallable;
  rule->args_json = args.empty() ? "" : args.dump();
  const std::string module =
      py::str(py::getattr(fn, "__module__", py::str("?")));
  const std::string qualname =
      py::str(py::getattr(fn, "__qualname__", py::str("rule")));
  rule->target = qualname;
  rule->name = fmt::format("{}{}.{}#{}{}", kCallablePrefix, module, qualname,
                           content_hash(identity), rule->args_json);
  py::object base = py::module_::import("torch.optim").attr("Optimizer");
  if (py::isinstance<py::type>(fn)) {
    TORCH_CHECK(PyObject_IsSubclass(fn.ptr(), base.ptr()) == 1, rule->name,
                ": a class but not a torch.optim.Optimizer");
  }
  // The callables live in a Python dict (module _twins_rules), so that
  // Python destroys them with its interpreter; the registry holds names.
  py::object sys_modules = py::module_::import("sys").attr("modules");
  if (!sys_modules.contains("_twins_rules")) {
    py::object m =
        py::module_::import("types").attr("ModuleType")("_twins_rules");
    m.attr("rules") = py::dict();
    sys_modules["_twins_rules"] = m;
  }
  sys_modules["_twins_rules"].attr("rules")[rule->name.c_str()] = fn;
  if (lr <= 0)
    lr = signature_lr(fn);
  const auto predicted =
      stated_prediction(fn, optim::Equivariance::kBasisDependent, rule->name);
  const std::string summary =
      fmt::format("Python rule {}.{}{}", module, qualname,
                  rule->args_json.empty() ? "" : " with " + rule->args_json);
  optim::Hparams hp = numeric_hparams(py::module_::import("json").attr("loads")(
      rule->args_json.empty() ? std::string("{}") : rule->args_json));
  return register_rule(std::move(rule), summary, predicted, std::move(hp), lr);
}

}  // namespace bridge
