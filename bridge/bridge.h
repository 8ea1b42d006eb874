// Python optimizers inside the protocol: a rule written as a
// torch.optim.Optimizer (or a factory of one) runs as copy 1's and copy 2's
// optimizer of a pair, stepping the C++-owned parameters in place, with the
// guarantees of a built-in rule (docs/extending.md).
//
// Names (what --opt takes):
//   torch:NAME                 torch.optim.NAME (torch:Adam, torch:SGD)
//   py:FILE.py:NAME            NAME defined in FILE.py: a torch.optim.Optimizer
//                              subclass, or a factory returning an optimizer
// either followed by its keyword arguments as one JSON object:
//   torch:SGD{"momentum": 0.9, "nesterov": true}
// A rule is built as NAME(param_groups, lr=<the pair's lr>, **arguments)
// on the named parameter groups of python_optimizer.h. "lr" among the
// arguments is the rule's default rate (used without --lr); without it the
// default is the `lr` default of NAME's signature (torch.optim.Adam: 1e-3),
// else none (then pass --lr).
//
// The canonical name, which the records carry, is the rule's identity, so
// that a record key changes when the rule does: the JSON arguments in
// canonical form (keys sorted, no spaces), and for a file its path
// (lexically normalised, as given) with the first 16 hex digits of the
// SHA-256 of its content:
//   torch:SGD{"momentum":0.9,"nesterov":true}
//   py:rules/my_adam.py#3fa1c2d4e5b6a7c8:MyAdam{"beta2":0.99}
// The registry resolves canonical names only (install() adds its resolvers
// for the torch:, py: and python: prefixes); resolve_rule turns what a user
// writes into one. A canonical py: name is checked against the file's
// hash. Rules defined in Python code (`import twins`) are named
// python:MODULE.QUALNAME#HASH{...} (HASH over their source) and exist only
// in the process that defined them.
//
// This header includes no Python header. Without Python support (CMake
// TWINS_PYTHON=OFF) install() adds nothing and resolve_rule throws a
// one-line error saying so.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bridge {

// Whether this build runs Python rules (TWINS_PYTHON).
bool available();

// Whether `name` is a Python rule's name (torch:, py: or python: prefix),
// whatever the build.
bool is_python_rule(const std::string& name);

// Adds the registry's resolvers of the torch:, py: and python: names
// (optim::register_resolver); once per process, later calls do nothing.
// The first resolution starts the embedded interpreter when none is
// running. No-op without Python support.
void install();

// The canonical name of the rule `name` with `args_json` (a JSON object, or
// empty) merged under its own arguments (a key of the name's wins),
// resolved in the registry: the rule exists, its arguments are accepted by
// the class (torch:) and its file loads. Resolving the canonical name again
// gives it back. Throws a one-line error naming the rule: malformed name or
// JSON, missing or unreadable file, a file that fails to load, NAME not
// defined (or not a torch.optim class), arguments the class rejects, a file
// changed since the hash of a canonical name, a python: name outside its
// process, no Python support in this build.
std::string resolve_rule(const std::string& name,
                         const std::string& args_json = "");

// resolve_rule for each Python rule of `names`, every other name kept.
// Throws when `args_json` is given and `names` has no Python rule (the
// built-in rules' hyperparameters are fixed).
std::vector<std::string> resolve_rules(const std::vector<std::string>& names,
                                       const std::string& args_json = "");

// A Python module compiled into a room above the bridge (the census's
// census/census.py): its name in sys.modules, its source and the file its
// tracebacks name. It may import the bridge's own modules (_twins_*).
struct EmbeddedModule {
  const char* name;
  const char* source;
  const char* file;
};

// `function` of `module` (executed once per interpreter) called with
// `args` (a JSON array, as Python values), its result as JSON. Starts the
// interpreter when none runs and takes the GIL. Throws a one-line error:
// Python's ("TypeError: ...") after `function`'s name; without Python
// support, the bridge's.
nlohmann::json call_python(const EmbeddedModule& module,
                           const std::string& function,
                           const nlohmann::json& args);

// The predicted class of each optimizer library's rules
// (bridge/predictions.tsv, compiled in): what the bridge states for a
// library's class at its defaults (a Python rule's optim::OptimizerInfo),
// and what the census shows beside its measurement. Empty without Python
// support.
const char* predictions_tsv();

}  // namespace bridge
