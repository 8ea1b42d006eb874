#include "bridge/python.h"

#include <fmt/format.h>
#include <pybind11/embed.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "bridge/bridge.h"
#include "bridge_config.h"
#include "adapter_py.h"
#include "conventions_py.h"
#include "errors_py.h"
#include "identity_py.h"
#include "isolation_py.h"
#include "predictions_tsv.h"
#include "twins/text.h"

using twins::first_line;

namespace bridge {

namespace {

// The interpreter this process embedded (twin-run, the tests): started
// once, its main thread state parked while C++ runs, finalised at exit.
// Inside `import twins` the Python process owns the interpreter and this
// stays empty.
// Whether a rule's thread was refused for running on (bridge/isolation.py):
// the process must not wait for it. GIL held.
bool abandoned_threads() {
  py::object modules = py::module_::import("sys").attr("modules");
  return modules.contains("_twins_isolation") &&
         modules["_twins_isolation"].attr("abandoned_threads").cast<bool>();
}

struct Embedded {
  PyThreadState* parked = nullptr;
  ~Embedded() {
    if (!parked)
      return;
    PyEval_RestoreThread(parked);
    // A rule's thread that never ended (the run was refused for it):
    // finalising would wait for it forever, so the process ends without.
    if (abandoned_threads())
      return;
    py::finalize_interpreter();
  }
};

Embedded& embedded() {
  static Embedded e;
  return e;
}

std::mutex start_mutex;

// The bridge's Python side, one module per job, in the order they import
// each other (bridge/CMakeLists.txt compiles them in).
const EmbeddedModule kPythonSide[] = {
    {"_twins_isolation", kIsolationPy, "bridge/isolation.py"},
    {"_twins_errors", kErrorsPy, "bridge/errors.py"},
    {"_twins_conventions", kConventionsPy, "bridge/conventions.py"},
    {"_twins_adapter", kAdapterPy, "bridge/adapter.py"},
    {"_twins_identity", kIdentityPy, "bridge/identity.py"},
};

// The module `name` of the bridge's Python side, every one loaded.
py::object python_side(const char* name) {
  py::object out;
  for (const EmbeddedModule& m : kPythonSide) {
    py::object module = embedded_module(m.name, m.source, m.file);
    if (std::strcmp(m.name, name) == 0)
      out = module;
  }
  return out;
}

// The Python whose environment the embedded interpreter takes (its
// sys.prefix, site-packages and torch): the python beside this executable
// where there is one (twin-run installed by pip into an environment's
// bin/), else the one the build was configured with.
std::string interpreter_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* name : {"python3", "python"}) {
      // A file that runs: the build tree has a folder python/ (the
      // package) beside twin-run.
      const fs::path beside = exe.parent_path() / name;
      if (fs::is_regular_file(beside, ec) &&
          access(beside.c_str(), X_OK) == 0)
        return beside.string();
    }
  }
  return TWINS_PYTHON_EXECUTABLE;
}

// Starts the interpreter as `python` would start (so that it finds that
// Python's environment), without Python's signal handlers.
void start_interpreter(const std::string& python) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  PyStatus status =
      PyConfig_SetBytesString(&config, &config.program_name, python.c_str());
  if (!PyStatus_Exception(status))
    status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  TORCH_CHECK(!PyStatus_Exception(status),
              "Python rules: starting Python ", PY_VERSION, " as ", python,
              " failed: ", status.err_msg ? status.err_msg : "?");
}

}  // namespace

void ensure_interpreter() {
  std::lock_guard<std::mutex> lock(start_mutex);
  Embedded& embedded = bridge::embedded();
  if (embedded.parked || Py_IsInitialized())
    return;
  const std::string python = interpreter_path();
  start_interpreter(python);
  std::string error;
  try {
    py::object torch = py::module_::import("torch");
    check_torch_version(torch.attr("__version__").cast<std::string>());
    // A rule's print() goes to stderr with the progress lines: stdout
    // stays the summary a script reads.
    py::module_ sys = py::module_::import("sys");
    sys.attr("stdout") = sys.attr("stderr");
  } catch (const py::error_already_set& e) {
    error = fmt::format("'import torch' failed in Python {} ({}): {}",
                        PY_VERSION, python, python_error(e));
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  }
  embedded.parked = PyEval_SaveThread();
  TORCH_CHECK(error.empty(), "Python rules: ", error);
}

std::string built_torch_version() {
  return TWINS_BUILT_TORCH_VERSION;
}

void check_torch_version(const std::string& imported) {
  TORCH_CHECK(imported == TWINS_BUILT_TORCH_VERSION,
              "twins was built against torch ", TWINS_BUILT_TORCH_VERSION,
              " and this Python imports torch ", imported,
              ": rebuild it in this environment (pip install "
              "--no-build-isolation --force-reinstall twins' checkout, "
              "docs/extending.md)");
}

py::object embedded_module(const char* module_name, const char* source,
                           const char* file) {
  py::object modules = py::module_::import("sys").attr("modules");
  if (modules.contains(module_name))
    return modules[module_name];
  py::object module = py::module_::import("types").attr("ModuleType")(module_name);
  module.attr("__file__") = file;
  modules[module_name] = module;
  py::module_ builtins = py::module_::import("builtins");
  try {
    py::object code = builtins.attr("compile")(py::str(source), file, "exec");
    builtins.attr("exec")(code, module.attr("__dict__"));
  } catch (...) {
    modules.attr("pop")(module_name);
    throw;
  }
  return module;
}

py::object adapter_module() { return python_side("_twins_adapter"); }

py::object identity_module() { return python_side("_twins_identity"); }

py::object isolation_module() { return python_side("_twins_isolation"); }

bool embedded_interpreter() {
  std::lock_guard<std::mutex> lock(start_mutex);
  return embedded().parked != nullptr;
}

nlohmann::json call_python(const EmbeddedModule& module,
                           const std::string& function,
                           const nlohmann::json& args) {
  ensure_interpreter();
  py::gil_scoped_acquire gil;
  try {
    python_side("");  // the bridge's modules, which it may import
    py::object json = py::module_::import("json");
    py::object result =
        embedded_module(module.name, module.source, module.file)
            .attr(function.c_str())(*json.attr("loads")(args.dump()));
    return nlohmann::json::parse(
        json.attr("dumps")(result).cast<std::string>());
  } catch (const py::error_already_set& e) {
    TORCH_CHECK(false, module.file, ": ", function, "() failed: ",
                python_error(e));
  }
}

const char* predictions_tsv() { return kPredictionsTsv; }

std::optional<optim::Equivariance> library_prediction(const py::object& fn) {
  return equivariance_named(identity_module()
                                .attr("prediction_of")(kPredictionsTsv, fn)
                                .cast<std::string>());
}

std::string python_error(const py::error_already_set& error) {
  std::string type = "Python error", message;
  try {
    if (error.type())
      type = py::str(error.type().attr("__name__"));
    if (error.value())
      message = first_line(py::str(error.value()));
  } catch (const py::error_already_set&) {
    // An exception whose str() raises: its type is all there is.
  }
  return message.empty() ? type : type + ": " + message;
}

py::object Rule::callable() const {
  switch (kind) {
    case Kind::kTorch:
      return py::module_::import("torch.optim").attr(target.c_str());
    case Kind::kFile:
      return load_module().attr(target.c_str());
    case Kind::kModule:
      if (fresh)
        return identity_module().attr("fresh_rule")(path, target);
      return isolation_module()
          .attr("call_guarded")(py::module_::import("importlib").attr("import_module"),
                                path)
          .attr(target.c_str());
    case Kind::kCallable:
      return py::module_::import("_twins_rules").attr("rules")[name.c_str()];
  }
  return py::none();
}

py::object Rule::load_module() const {
  // Executed from the content that was hashed, not reread: the rule that
  // runs is the one the name identifies. The file's directory is on
  // sys.path while it runs, as for a script, so that it can import its
  // neighbours.
  py::module_ sys = py::module_::import("sys");
  py::object os_path = py::module_::import("os.path");
  const std::string module_name = "twins_rule_" + content_hash(source);
  py::object module =
      py::module_::import("types").attr("ModuleType")(module_name);
  module.attr("__file__") = path;
  sys.attr("modules")[module_name.c_str()] = module;
  py::object dir = os_path.attr("dirname")(os_path.attr("abspath")(path));
  py::list sys_path = sys.attr("path");
  sys_path.insert(0, dir);
  py::module_ builtins = py::module_::import("builtins");
  try {
    py::object code = builtins.attr("compile")(py::bytes(source), path, "exec");
    // Its import is the rule's code: os._exit and os.chdir refused
    // (bridge/isolation.py).
    isolation_module().attr("call_guarded")(builtins.attr("exec"), code,
                                            module.attr("__dict__"));
  } catch (...) {
    sys_path.attr("remove")(dir);
    throw;
  }
  sys_path.attr("remove")(dir);
  return module;
}

py::dict Rule::kwargs(double lr) const {
  py::dict d = py::module_::import("json").attr("loads")(
      args_json.empty() ? std::string("{}") : args_json);
  d["lr"] = lr;
  return d;
}

std::string content_hash(const std::string& bytes) {
  py::object h =
      py::module_::import("hashlib").attr("sha256")(py::bytes(bytes));
  return h.attr("hexdigest")().cast<std::string>().substr(0, 16);
}

std::optional<optim::Equivariance> stated_prediction(const py::object& fn,
                                                     bool plain,
                                                     const std::string& rule) {
  if (!py::hasattr(fn, "twins_predicted"))
    return plain ? library_prediction(fn) : std::nullopt;
  const std::string s = py::str(fn.attr("twins_predicted"));
  const auto stated = equivariance_named(s);
  TORCH_CHECK(stated, rule, ": twins_predicted is '", s,
              "' (expected 'equivariant' or 'basis-dependent')");
  return stated;
}

std::optional<optim::Equivariance> equivariance_named(const std::string& name) {
  for (auto e : {optim::Equivariance::kEquivariant,
                 optim::Equivariance::kBasisDependent}) {
    if (name == optim::to_string(e))
      return e;
  }
  return std::nullopt;
}

double signature_lr(const py::object& fn) {
  try {
    py::object sig = py::module_::import("inspect").attr("signature")(fn);
    py::dict params = sig.attr("parameters").attr("copy")();
    if (!params.contains("lr"))
      return 0;
    py::object d = params["lr"].attr("default");
    if (py::isinstance<py::bool_>(d) ||
        !(py::isinstance<py::float_>(d) || py::isinstance<py::int_>(d)))
      return 0;
    const double lr = d.cast<double>();
    return lr > 0 && std::isfinite(lr) ? lr : 0;
  } catch (const py::error_already_set&) {
    return 0;  // a builtin without a signature
  }
}

optim::Hparams numeric_hparams(const py::dict& arguments) {
  auto number = [](const py::handle& v, double* out) {
    if (py::isinstance<py::bool_>(v)) {
      *out = v.cast<bool>() ? 1.0 : 0.0;
      return true;
    }
    if (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) {
      *out = v.cast<double>();
      return true;
    }
    return false;
  };
  optim::Hparams out;
  for (const auto& [key, v] : arguments) {
    const std::string name = py::str(key);
    if (name == "params" || name == "lr")
      continue;
    double x = 0;
    if (number(v, &x)) {
      out.emplace_back(name, x);
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      size_t i = 0;
      for (const auto& item : v) {
        if (number(item, &x))
          out.emplace_back(fmt::format("{}.{}", name, i), x);
        ++i;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace bridge
