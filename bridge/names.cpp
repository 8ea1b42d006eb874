// The torch: / py: / python: names: parsing, the rule's identity (its
// canonical name), and the registry's resolvers that turn a canonical name
// into an entry on its first lookup (bridge.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "bridge/bridge.h"
#include "bridge/python.h"
#include "bridge/python_optimizer.h"
#include "optim/registry.h"
#include "twins/io.h"

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
// head's rows, G_h -> A_h G_h (docs/protocol.md §5): an update that is a
// combination, with scalar coefficients, of the gradients and parameters is
// equivariant (SGD with any momentum, Nesterov, dampening or weight decay;
// ASGD, whose step size is a scalar schedule and whose average is not the
// model). Every rule that divides, clips or signs coordinate by coordinate
// is basis-dependent: Adam, AdamW, NAdam, RAdam (after its first steps,
// which are momentum SGD), Adamax, Adagrad, Adadelta, RMSprop, Rprop; so is
// LBFGS, whose first step size divides by the L1 norm of the gradient.
optim::Equivariance torch_prediction(const std::string& cls) {
  // Muon (2.9+): Newton-Schulz on each whole matrix, NS(B G) = B NS(G),
  // and Adam only on parameters the gauge does not touch.
  return cls == "SGD" || cls == "ASGD" || cls == "Muon"
             ? optim::Equivariance::kEquivariant
             : optim::Equivariance::kBasisDependent;
}

const char kUsage[] =
    " (expected torch:NAME, py:MODULE:NAME or py:FILE.py:NAME, optionally "
    "followed by JSON arguments: torch:SGD{\"momentum\": 0.9})";

// A name taken apart: prefix kind, file, class or factory, the hash a
// canonical py: name carries, the inline JSON arguments.
struct Parsed {
  Rule::Kind kind = Rule::Kind::kTorch;
  std::string path, target, hash;
  std::string dist;  // kModule: "distribution==version" of a canonical name
  json args = json::object();
};

// A module is named by dotted Python names; anything else before the
// class is a file (FILE.py, or a path). A name ending in ".py" is a file
// even where it would also spell a submodule "py" (rules.py).
bool is_module_name(const std::string& s) {
  const std::string suffix = ".py";
  if (s.size() >= suffix.size() &&
      s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!is_identifier(s.substr(start, dot - start)))
      return false;
    if (dot == std::string::npos)
      return true;
    start = dot + 1;
  }
}

json parse_object(const std::string& text, const std::string& rule) {
  json j;
  // A key given twice in one object would silently keep the last value.
  std::vector<std::set<std::string>> keys;  // per open object
  std::string twice;
  auto note_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (event == json::parse_event_t::object_end)
      keys.pop_back();
    else if (event == json::parse_event_t::key &&
             !keys.back().insert(parsed.get<std::string>()).second &&
             twice.empty())
      twice = parsed.get<std::string>();
    return true;
  };
  try {
    j = json::parse(text, note_keys);
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "Malformed arguments of '", rule, "': ", text,
                " is not JSON (", e.what(),
                "); expected one object, e.g. {\"momentum\": 0.9}");
  }
  TORCH_CHECK(j.is_object(), "Malformed arguments of '", rule, "': ", text,
              " is not a JSON object (e.g. {\"momentum\": 0.9})");
  TORCH_CHECK(twice.empty(), "Malformed arguments of '", rule, "': key \"",
              twice, "\" given twice in ", text);
  return j;
}

// "lr" among the arguments is a default rate: a positive number.
void check_rate(const json& args, const std::string& rule) {
  if (!args.contains("lr"))
    return;
  const json& v = args["lr"];
  TORCH_CHECK(
      v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()),
      "Invalid learning rate in the arguments of '", rule, "': ", v.dump(),
      " (must be a positive number)");
}

Parsed parse(const std::string& name) {
  Parsed p;
  const size_t brace = name.find('{');
  const std::string head = name.substr(0, brace);
  if (brace != std::string::npos)
    p.args = parse_object(name.substr(brace), name);
  if (starts_with(head, kTorchPrefix)) {
    p.kind = Rule::Kind::kTorch;
    p.target = head.substr(sizeof(kTorchPrefix) - 1);
  } else if (starts_with(head, kFilePrefix)) {
    p.kind = Rule::Kind::kFile;
    const std::string rest = head.substr(sizeof(kFilePrefix) - 1);
    const size_t colon = rest.rfind(':');
    TORCH_CHECK(colon != std::string::npos && colon > 0,
                "Malformed Python rule name: '", name, "'", kUsage);
    p.path = rest.substr(0, colon);
    p.target = rest.substr(colon + 1);
    const size_t hash = p.path.rfind('#');
    if (hash != std::string::npos && is_hash(p.path.substr(hash + 1))) {
      p.hash = p.path.substr(hash + 1);
      p.path.resize(hash);
    }
    // A module's canonical name carries its distribution in brackets:
    // py:timm.optim[timm==1.0.31]:Lamb.
    const size_t bracket = p.path.find('[');
    if (p.hash.empty() && bracket != std::string::npos &&
        p.path.back() == ']') {
      p.dist = p.path.substr(bracket + 1, p.path.size() - bracket - 2);
      p.path.resize(bracket);
      TORCH_CHECK(p.dist.find("==") != std::string::npos,
                  "Malformed Python rule name: '", name, "': [", p.dist,
                  "] is not [DISTRIBUTION==VERSION]", kUsage);
    }
    if (is_module_name(p.path)) {
      p.kind = Rule::Kind::kModule;
    } else {
      TORCH_CHECK(p.dist.empty(), "Malformed Python rule name: '", name,
                  "': '", p.path, "' is not a module name", kUsage);
    }
  } else {
    TORCH_CHECK(false, "Malformed Python rule name: '", name, "'", kUsage);
  }
  TORCH_CHECK(is_identifier(p.target), "Malformed Python rule name: '", name,
              "': '", p.target, "' is not a Python name", kUsage);
  check_rate(p.args, name);
  return p;
}

// A rule's file: one that exists and is a regular file (a directory, a FIFO
// or a device is named as what it is; reading a FIFO would wait forever).
void check_rule_file(const std::string& path, const std::string& name) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  TORCH_CHECK(fs::exists(st), name, ": no such file '", path, "'");
  TORCH_CHECK(!fs::is_directory(st), name, ": '", path,
              "' is a directory, not a Python file");
  TORCH_CHECK(fs::is_regular_file(st), name, ": '", path,
              "' is not a regular file (a FIFO, socket or device), not a "
              "Python file");
}

// Whether `args` set nothing but the rate: the rule is its class at its
// defaults, its library's prediction (bridge/predictions.tsv) applies.
bool only_rate(const json& args) {
  return args.empty() || (args.size() == 1 && args.contains("lr"));
}

std::string args_text(const json& args) {
  return args.empty() ? "" : args.dump();
}

// The canonical names (bridge.h).
std::string torch_name(const Parsed& p) {
  return kTorchPrefix + p.target + args_text(p.args);
}

// The hash a py:FILE rule's name carries: of its file's bytes, and where
// the file imports modules of its own directory, of theirs too
// (bridge/identity.py hash_with_helpers: found from the import statements,
// the file is not executed), so that an edited helper is another rule;
// `helpers` gets their paths. GIL held.
std::string rule_file_hash(const std::string& path, const std::string& source,
                           const std::string& name,
                           std::vector<std::string>* helpers) {
  try {
    const py::tuple out =
        identity_module().attr("hash_with_helpers")(py::bytes(source), path);
    for (const auto& h : out[1])
      helpers->push_back(h.cast<std::string>());
    return out[0].cast<std::string>();
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, name, ": reading the modules '", path,
                "' imports failed: ", python_error(e));
  }
}

// "'FILE'" or "'FILE' or the modules beside it that it imports (A.py,
// B.py)": what changed when the hash did.
std::string changed_what(const std::string& path,
                         const std::vector<std::string>& helpers) {
  std::string out = "'" + path + "'";
  if (!helpers.empty())
    out += fmt::format(" or the modules beside it that it imports ({})",
                       fmt::join(helpers, ", "));
  return out;
}

std::string file_name(const Parsed& p, const std::string& hash) {
  return fmt::format("{}{}#{}:{}{}", kFilePrefix, p.path, hash, p.target,
                     args_text(p.args));
}

// py:MODULE[DIST==VERSION]:NAME, or py:MODULE#HASH:NAME for a module no
// installed distribution provides (HASH over the file defining NAME).
std::string module_name(const Parsed& p, const std::string& identity) {
  const bool dist = identity.find("==") != std::string::npos;
  return fmt::format("{}{}{}{}{}:{}{}", kFilePrefix, p.path,
                     dist ? "[" : "#", identity, dist ? "]" : "", p.target,
                     args_text(p.args));
}

// The rule's default rate: "lr" of its arguments, else its signature's.
// GIL held.
double default_rate(const Parsed& p, const py::object& fn) {
  return p.args.contains("lr") ? p.args["lr"].get<double>() : signature_lr(fn);
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

std::string torch_version() {
  return py::str(py::module_::import("torch").attr("__version__"));
}

bool is_optimizer_class(const py::handle& c, const py::handle& base) {
  return py::isinstance<py::type>(c) &&
         PyObject_IsSubclass(c.ptr(), base.ptr()) == 1 && !c.is(base);
}

std::string fail_unless_canonical(const std::string& name,
                                  const std::string& canonical) {
  TORCH_CHECK(name == canonical, "Python rule '", name,
              "' is not in its canonical form '", canonical,
              "' (bridge::resolve_rule gives it)");
  return canonical;
}

// ---------------------------------------------------------------------------
// The resolvers. Each builds the entry of a canonical name, or throws a
// one-line error naming it.

optim::OptimizerInfo resolve_torch(const std::string& name) {
  Parsed p = parse(name);
  fail_unless_canonical(name, torch_name(p));
  auto rule = std::make_shared<Rule>();
  rule->kind = Rule::Kind::kTorch;
  rule->name = name;
  rule->target = p.target;
  rule->args_json = args_text(p.args);
  ensure_interpreter();
  py::gil_scoped_acquire gil;
  try {
    py::object optim_module = py::module_::import("torch.optim");
    py::object base = optim_module.attr("Optimizer");
    py::object cls = py::getattr(optim_module, p.target.c_str(), py::none());
    if (!is_optimizer_class(cls, base)) {
      std::string known;
      for (const auto& n : py::list(
               py::module_::import("builtins").attr("dir")(optim_module))) {
        if (is_optimizer_class(optim_module.attr(n), base))
          known += (known.empty() ? "" : ", ") + py::str(n).cast<std::string>();
      }
      TORCH_CHECK(false, "Unknown torch.optim optimizer: '", p.target,
                  "' in '", name, "' (torch ", torch_version(), " has ", known,
                  ")");
    }
    const double lr = default_rate(p, cls);
    // One construction on a stand-in parameter: arguments the class
    // rejects fail here, and its defaults are the record's hyperparameters.
    // A 1x1 matrix, which every class takes (torch.optim.Muon takes 2-D
    // parameters only).
    py::object dummy = py::module_::import("torch").attr("zeros")(1, 1);
    dummy.attr("requires_grad_")();
    py::list params;
    params.append(dummy);
    py::object opt;
    try {
      opt = cls(params, **rule->kwargs(lr > 0 ? lr : 1e-3));
    } catch (const py::error_already_set& e) {
      TORCH_CHECK(false, name, ": rejected its arguments: ", python_error(e));
    }
    std::string summary = fmt::format(
        "torch.optim.{} of PyTorch {}{}", p.target, torch_version(),
        rule->args_json.empty() ? "" : " with " + rule->args_json);
    return rule_info(rule, std::move(summary), torch_prediction(p.target),
                     numeric_hparams(opt.attr("defaults")), lr);
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, name, ": ", python_error(e));
  }
}

optim::OptimizerInfo resolve_file(const std::string& name) {
  Parsed p = parse(name);
  TORCH_CHECK(!p.hash.empty(), "Python rule '", name,
              "' names no content hash (its canonical form is "
              "py:FILE.py#HASH:NAME; bridge::resolve_rule gives it)");
  auto rule = std::make_shared<Rule>();
  rule->kind = Rule::Kind::kFile;
  rule->target = p.target;
  rule->args_json = args_text(p.args);
  rule->path = fs::path(p.path).lexically_normal().string();
  check_rule_file(rule->path, name);
  rule->source = twins::read_file(rule->path, "Python rule");
  ensure_interpreter();
  py::gil_scoped_acquire gil;
  std::vector<std::string> helpers;
  const std::string hash =
      rule_file_hash(rule->path, rule->source, name, &helpers);
  TORCH_CHECK(p.hash == hash, name, ": ", changed_what(rule->path, helpers),
              " changed since this name was recorded (its hash is now ",
              hash, ")");
  p.path = rule->path;
  rule->name = fail_unless_canonical(name, file_name(p, hash));
  try {
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
    std::string summary = fmt::format(
        "Python rule {} from {} (sha256 {}){}", p.target, rule->path, hash,
        rule->args_json.empty() ? "" : " with " + rule->args_json);
    return rule_info(
        rule, std::move(summary),
        stated_prediction(fn, only_rate(p.args), name),
        numeric_hparams(py::module_::import("json").attr("loads")(
            rule->args_json.empty() ? std::string("{}") : rule->args_json)),
        default_rate(p, fn));
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, name, ": ", python_error(e));
  }
}

// The identity a module's rule carries: "DIST==VERSION", or the hash of
// the file defining NAME where no installed distribution provides the
// module. Throws naming the rule when the module does not import or does
// not define NAME. GIL held.
std::string module_identity(const Parsed& p, const std::string& rule) {
  try {
    return identity_module()
        .attr("module_identity")(p.path, p.target)
        .cast<std::string>();
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, rule, ": ", python_error(e));
  }
}

// A canonical name's distribution or hash against what is installed now.
void check_identity(const Parsed& p, const std::string& identity,
                    const std::string& rule) {
  const std::string named = p.dist.empty() ? p.hash : p.dist;
  TORCH_CHECK(named.empty() || named == identity, rule,
              ": the name was recorded with ", named, " and this Python has ",
              identity, " (another release never resumes into the records)");
}

optim::OptimizerInfo resolve_module(const std::string& name, Parsed p) {
  TORCH_CHECK(!p.dist.empty() || !p.hash.empty(), "Python rule '", name,
              "' names no distribution (its canonical form is "
              "py:MODULE[DIST==VERSION]:NAME; bridge::resolve_rule gives it)");
  auto rule = std::make_shared<Rule>();
  rule->kind = Rule::Kind::kModule;
  rule->target = p.target;
  rule->path = p.path;
  rule->args_json = args_text(p.args);
  ensure_interpreter();
  py::gil_scoped_acquire gil;
  const std::string identity = module_identity(p, name);
  check_identity(p, identity, name);
  rule->name = fail_unless_canonical(name, module_name(p, identity));
  rule->fresh = identity.find("==") == std::string::npos;  // a file's hash
  try {
    py::object fn = rule->callable();
    py::object base = py::module_::import("torch.optim").attr("Optimizer");
    TORCH_CHECK(!py::isinstance<py::type>(fn) ||
                    PyObject_IsSubclass(fn.ptr(), base.ptr()) == 1,
                name, ": '", p.target,
                "' is a class but not a torch.optim.Optimizer");
    std::string summary = fmt::format(
        "{} of {} ({}){}", p.target, p.path, identity,
        rule->args_json.empty() ? "" : " with " + rule->args_json);
    py::dict defaults = identity_module().attr("signature_defaults")(fn);
    for (const auto& [k, v] : p.args.items())
      defaults[py::str(k)] = py::module_::import("json").attr("loads")(v.dump());
    return rule_info(
        rule, std::move(summary),
        stated_prediction(fn, only_rate(p.args), name),
        numeric_hparams(defaults), default_rate(p, fn));
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, name, ": ", python_error(e));
  }
}

// py: names: a module's rule or a file's.
optim::OptimizerInfo resolve_python(const std::string& name) {
  Parsed p = parse(name);
  if (p.kind == Rule::Kind::kModule)
    return resolve_module(name, std::move(p));
  return resolve_file(name);
}

// The entries of the rules register_callable made, until the registry
// asks for them.
std::mutex callables_mutex;
std::map<std::string, optim::OptimizerInfo> callables;

optim::OptimizerInfo resolve_callable(const std::string& name) {
  std::lock_guard<std::mutex> lock(callables_mutex);
  auto it = callables.find(name);
  TORCH_CHECK(it != callables.end(), "Python rule '", name,
              "' was defined in a Python process and exists only there "
              "(name a file instead: py:FILE.py:NAME)");
  return it->second;
}

// What a Python callable is, for its name's hash (bridge/identity.py,
// callable_identity: its code, defaults, closure, the globals it reads, a
// partial's arguments, a class's members and bases).
std::string callable_identity(const py::object& fn) {
  return identity_module().attr("callable_identity")(fn).cast<std::string>();
}

// The callables live in a Python dict (module _twins_rules), so that
// Python destroys them with its interpreter; the registry holds names.
void keep_callable(const std::string& name, const py::object& fn) {
  py::object sys_modules = py::module_::import("sys").attr("modules");
  if (!sys_modules.contains("_twins_rules")) {
    py::object rules_module =
        py::module_::import("types").attr("ModuleType")("_twins_rules");
    rules_module.attr("rules") = py::dict();
    sys_modules["_twins_rules"] = rules_module;
  }
  sys_modules["_twins_rules"].attr("rules")[name.c_str()] = fn;
}

}  // namespace

bool available() {
  return true;
}

bool is_python_rule(const std::string& name) {
  return starts_with(name, kTorchPrefix) || starts_with(name, kFilePrefix) ||
         starts_with(name, kCallablePrefix);
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto wrap = [](optim::OptimizerInfo (*resolve)(const std::string&)) {
      return [resolve](const std::string& name) {
        return std::optional<optim::OptimizerInfo>(resolve(name));
      };
    };
    optim::register_resolver(kTorchPrefix, wrap(resolve_torch));
    optim::register_resolver(kFilePrefix, wrap(resolve_python));
    optim::register_resolver(kCallablePrefix, wrap(resolve_callable));
  });
}

std::string resolve_rule(const std::string& name,
                         const std::string& args_json) {
  TORCH_CHECK(is_python_rule(name), "Not a Python rule name: '", name,
              "' (torch:NAME, py:MODULE:NAME or py:FILE.py:NAME)");
  install();
  if (starts_with(name, kCallablePrefix)) {
    TORCH_CHECK(args_json.empty(), "Python rule '", name,
                "': its arguments were given when it was defined");
    optim::find_optimizer(name);
    return name;
  }
  Parsed p = parse(name);
  if (!args_json.empty()) {
    const json extra = parse_object(args_json, name);
    for (const auto& [k, v] : extra.items()) {
      if (!p.args.contains(k))
        p.args[k] = v;  // the name's own arguments win
    }
    check_rate(p.args, name);
  }
  std::string canonical;
  if (p.kind == Rule::Kind::kTorch) {
    canonical = torch_name(p);
  } else if (p.kind == Rule::Kind::kModule) {
    ensure_interpreter();
    py::gil_scoped_acquire gil;
    const std::string identity = module_identity(p, name);
    check_identity(p, identity, name);
    p.hash.clear();
    canonical = module_name(p, identity);
  } else {
    p.path = fs::path(p.path).lexically_normal().string();
    check_rule_file(p.path, name);
    const std::string source = twins::read_file(p.path, "Python rule");
    ensure_interpreter();
    std::string hash;
    std::vector<std::string> helpers;
    {
      py::gil_scoped_acquire gil;
      hash = rule_file_hash(p.path, source, name, &helpers);
    }
    TORCH_CHECK(p.hash.empty() || p.hash == hash, name, ": ",
                changed_what(p.path, helpers),
                " changed since this name was recorded (its hash is now ",
                hash, ")");
    canonical = file_name(p, hash);
  }
  optim::find_optimizer(canonical);  // the resolver's checks
  return canonical;
}

std::vector<std::string> resolve_rules(const std::vector<std::string>& names,
                                       const std::string& args_json) {
  std::vector<std::string> out;
  bool any = false;
  for (const auto& n : names) {
    any = any || is_python_rule(n);
    out.push_back(is_python_rule(n) ? resolve_rule(n, args_json) : n);
  }
  TORCH_CHECK(args_json.empty() || any,
              "--opt-args: the arguments are for Python rules (torch:NAME, "
              "py:FILE.py:NAME) and --opt names none (a built-in rule's "
              "hyperparameters are fixed)");
  return out;
}

std::string register_callable(const py::object& fn,
                              const std::string& args_json) {
  TORCH_CHECK(PyCallable_Check(fn.ptr()),
              "twins: the optimizer must be a name, a class or a factory, got ",
              py::str(py::type::of(fn).attr("__name__")).cast<std::string>());
  Parsed p;
  if (!args_json.empty())
    p.args = parse_object(args_json, "a Python rule");
  auto rule = std::make_shared<Rule>();
  rule->kind = Rule::Kind::kCallable;
  rule->args_json = args_text(p.args);
  const std::string module =
      py::str(py::getattr(fn, "__module__", py::str("?")));
  const std::string qualname =
      py::str(py::getattr(fn, "__qualname__", py::str("rule")));
  rule->target = qualname;
  rule->name = fmt::format("{}{}.{}#{}{}", kCallablePrefix, module, qualname,
                           content_hash(callable_identity(fn)),
                           rule->args_json);
  check_rate(p.args, rule->name);
  py::object base = py::module_::import("torch.optim").attr("Optimizer");
  TORCH_CHECK(!py::isinstance<py::type>(fn) ||
                  PyObject_IsSubclass(fn.ptr(), base.ptr()) == 1,
              rule->name, ": a class but not a torch.optim.Optimizer");
  keep_callable(rule->name, fn);
  std::string summary =
      fmt::format("Python rule {}.{}{}", module, qualname,
                  rule->args_json.empty() ? "" : " with " + rule->args_json);
  optim::OptimizerInfo info = rule_info(
      rule, std::move(summary),
      stated_prediction(fn, only_rate(p.args), rule->name),
      numeric_hparams(py::module_::import("json").attr("loads")(
          rule->args_json.empty() ? std::string("{}") : rule->args_json)),
      default_rate(p, fn));
  {
    std::lock_guard<std::mutex> lock(callables_mutex);
    callables.emplace(rule->name, std::move(info));
  }
  install();
  optim::find_optimizer(rule->name);
  return rule->name;
}

}  // namespace bridge
