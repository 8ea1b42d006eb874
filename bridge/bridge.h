// Python optimizers inside the protocol: a rule written as a
// torch.optim.Optimizer (or a factory of one) runs as copy 1's and copy 2's
// optimizer of a pair, stepping the C++-owned parameters in place, with the
// guarantees of a built-in rule (docs/extending.md).
//
// Names (what --opt takes; resolve_rule turns them into registry entries):
//   torch:NAME                 torch.optim.NAME (torch:Adam, torch:SGD)
//   py:FILE.py:NAME            NAME defined in FILE.py: a torch.optim.Optimizer
//                              subclass, or a factory returning an optimizer
// either followed by keyword arguments as one JSON object, e.g.
//   'torch:SGD{"momentum": 0.9, "nesterov": true}'
// A rule is built as NAME(param_groups, lr=<the pair's lr>, **arguments)
// on the named parameter groups of docs/extending.md (python_optimizer.h).
// "lr" among the arguments is the rule's default learning rate, used when
// no --lr is given; it is not passed on twice and it is not part of the
// name (the pair's lr is recorded as for every rule). Without it the default
// is the `lr` default of NAME's signature (torch.optim.Adam: 1e-3), else
// none (then pass --lr).
//
// The registered (canonical) name carries the rule's identity, so that a
// record key changes when the rule does: the JSON arguments in canonical
// form (keys sorted, no spaces, lr removed), and for a file its path
// (lexically normalised, as given) and the first 16 hex digits of the
// SHA-256 of its content:
//   torch:SGD{"momentum":0.9,"nesterov":true}
//   py:rules/my_adam.py#3fa1c2d4e5b6a7c8:MyAdam{"beta2":0.99}
// A canonical py: name given back is checked against the file's hash. The
// module's rules defined in Python code are named
// python:MODULE.QUALNAME#HASH{...} (HASH over their source) and exist only in
// the process that defined them.
//
// This header includes no Python header; without Python support (CMake
// TWINS_PYTHON=OFF) every function that needs Python throws a one-line
// error saying so.
#pragma once

#include <string>
#include <vector>

#include "twins/spec.h"

namespace bridge {

// Whether this build runs Python rules (TWINS_PYTHON).
bool available();

// Whether `name` is a Python rule's name (py:, torch: or python: prefix),
// whatever the build.
bool is_python_rule(const std::string& name);

// Registers the rule `name` (see the top of this file) with `args_json`
// (a JSON object or empty) merged under its inline arguments (an inline key
// wins), and returns its canonical name; resolving it again returns the same
// name. Starts the embedded interpreter on first use when none is running.
// Throws a one-line error naming the rule: malformed name or JSON, missing
// or unreadable file, a file that fails to load, NAME not defined (or not a
// torch.optim class), a file changed since the hash in a canonical name, a
// python: name outside its process, no Python support in this build.
std::string resolve_rule(const std::string& name,
                         const std::string& args_json = "");

// resolve_rule for each Python rule of `names`, every other name kept.
std::vector<std::string> resolve_rules(const std::vector<std::string>& names,
                                       const std::string& args_json = "");

// Builds the optimizer of `spec` once, on a model of its shape, and drops
// it: a rule that rejects its arguments or the parameter groups fails here,
// before a results file exists. No-op for a name that is not a Python rule.
void check_rule(const twins::PairSpec& spec);

}  // namespace bridge
