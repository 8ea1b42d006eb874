// bridge.h in a build without Python support (CMake TWINS_PYTHON=OFF): the
// names are still recognised, so that naming a Python rule is a one-line
// error that says what is missing rather than "unknown optimizer".
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

std::string resolve_rule(const std::string& name, const std::string&) {
  unavailable(name);
}

std::vector<std::string> resolve_rules(const std::vector<std::string>& names,
                                       const std::string&) {
  for (const auto& n : names) {
    if (is_python_rule(n))
      unavailable(n);
  }
  return names;
}

void check_rule(const twins::PairSpec& spec) {
  if (is_python_rule(spec.opt))
    unavailable(spec.opt);
}

}  // namespace bridge
