// bridge.h in a build without Python support (CMake TWINS_PYTHON=OFF): the
// names are still recognised, so that naming a Python rule is a one-line
// error that says what is missing rather than "unknown optimizer". No
// resolver is added: the registry knows no Python name, and tables made of
// them (torch-zoo) are not listed.
#include <c10/util/Exception.h>

#include "bridge/bridge.h"

namespace bridge {

namespace {

[[noreturn]] void unavailable(const std::string& name) {
  TORCH_CHECK(false, "Python rule '", name,
              "': this twin-run was built without Python support (install "
              "python3-dev, pybind11-dev and python3-torch, then reconfigure: "
              "cmake -S . -B build -DTWINS_PYTHON=ON)");
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

bool available() {
  return false;
}

bool is_python_rule(const std::string& name) {
  return starts_with(name, "torch:") || starts_with(name, "py:") ||
         starts_with(name, "python:");
}

void install() {}

std::string resolve_rule(const std::string& name, const std::string&) {
  unavailable(name);
}

std::vector<std::string> resolve_rules(const std::vector<std::string>& names,
                                       const std::string& args_json) {
  for (const auto& n : names) {
    if (is_python_rule(n))
      unavailable(n);
  }
  TORCH_CHECK(args_json.empty(),
              "--opt-args: the arguments are for Python rules (torch:NAME, "
              "py:FILE.py:NAME) and --opt names none (a built-in rule's "
              "hyperparameters are fixed)");
  return names;
}

nlohmann::json call_python(const EmbeddedModule& module, const std::string&,
                           const nlohmann::json&) {
  TORCH_CHECK(false, module.file,
              ": this twin-run was built without Python support (install "
              "python3-dev, pybind11-dev and python3-torch, then reconfigure: "
              "cmake -S . -B build -DTWINS_PYTHON=ON)");
}

const char* predictions_tsv() { return ""; }

}  // namespace bridge
