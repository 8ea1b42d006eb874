// Inside bridge/ only: the interpreter, the GIL and the rules' Python
// objects. Every function here that returns or takes a py::object must be
// called with the GIL held; the others say when they take it.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "optim/base.h"
#include "optim/registry.h"

namespace bridge {

namespace py = pybind11;

// Starts the embedded interpreter (without Python's signal handlers, so
// Ctrl-C stops twin-run as before) when none is running, imports torch and
// releases the GIL; a no-op inside a Python process (`import twins`) or once
// done. Call without the GIL. Throws a one-line error when torch does not
// import.
void ensure_interpreter();

// The torch version this build was compiled against (the build's Python's
// torch), and a one-line error when `imported`, the torch a Python
// imports, is another: LibTorch's C++ types must be the very ones of the
// torch whose libtorch_python wraps them.
std::string built_torch_version();
void check_torch_version(const std::string& imported);

// The module `module_name` made of `source` (a file compiled into the
// bridge, named `file` in tracebacks), executed once per interpreter and
// kept in sys.modules. GIL held.
py::object embedded_module(const char* module_name, const char* source,
                           const char* file);

// The modules of the bridge's Python side (each loaded with the others
// it imports): bridge/adapter.py, the Python half of the adapter
// (make, Adapter), as _twins_adapter; bridge/identity.py, a rule's
// identity and a library class's prediction, as _twins_identity. GIL held.
py::object adapter_module();
py::object identity_module();
// bridge/isolation.py as _twins_isolation: what a rule may not do to the
// process (Guarded, call_guarded, StopRequested). GIL held.
py::object isolation_module();

// Whether this process started the interpreter (twin-run, the tests), not
// a Python process that imported twins. Any thread.
bool embedded_interpreter();

// "TypeError: message" (the message's first line) of the Python exception
// `error`, with the GIL held.
std::string python_error(const py::error_already_set& error);

// How a registered rule builds its Python optimizer; immutable once
// registered, shared by every optimizer made from it.
struct Rule {
  enum class Kind {
    kTorch,     // torch.optim.<target>
    kFile,      // <target> defined in the file `path` (content `source`)
    kModule,    // <target> of the importable module `path`
    kCallable,  // the Python callable registered under `name`
  };
  Kind kind = Kind::kTorch;
  std::string name;       // the canonical (registered) name
  std::string target;     // the class or factory name
  std::string path;       // kFile: the file as named (normalised);
                          // kModule: the module's dotted name
  std::string source;     // kFile: its content when resolved: what runs
  std::string args_json;  // canonical JSON object of the keyword arguments
  // kModule of no distribution (named by its file's hash): the module that
  // defines the target is executed afresh for each optimizer, as a kFile
  // rule's file is.
  bool fresh = false;

  // The class or factory (a kFile rule's file, and a `fresh` kModule
  // rule's defining module, executed afresh, so that the two copies of a
  // pair never share module-level state). GIL held.
  py::object callable() const;
  // kFile: `source` executed as a fresh module named after its hash. GIL
  // held.
  py::object load_module() const;
  // args_json as a dict, with lr = `lr`. GIL held.
  py::dict kwargs(double lr) const;
};

// The first 16 hex digits of the SHA-256 of `bytes` (hashlib). GIL held.
std::string content_hash(const std::string& bytes);

// The class `name` spells (optim::to_string's words), none for another.
std::optional<optim::Equivariance> equivariance_named(const std::string& name);

// The predicted class of the class `fn` at its defaults (the row of
// bridge/predictions.tsv whose definition is fn's module and
// qualified name, without bound defaults), when it is equivariant or
// basis-dependent; none for a class it does not name, or names as shape,
// distribution or n/a (their class is the census's question about a
// model, not one line). GIL held.
std::optional<optim::Equivariance> library_prediction(const py::object& fn);

// The rule's predicted class: the attribute `twins_predicted` of the class
// or factory ("equivariant" or "basis-dependent"); without one, when the
// rule takes no arguments but lr (`plain`), the library's prediction for
// its class at its defaults (bridge/predictions.tsv); else none.
// Throws naming `rule` for another value. GIL held.
std::optional<optim::Equivariance> stated_prediction(const py::object& fn,
                                                     bool plain,
                                                     const std::string& rule);

// The numeric default of the `lr` parameter of `fn`'s signature, 0 when it
// has none (torch.optim.SGD's `required`). GIL held.
double signature_lr(const py::object& fn);

// The numbers of a hyperparameter dict as (name, value) pairs sorted by
// name: bools 0 / 1, numbers, sequences of numbers as name.0, name.1, ...;
// "params", "lr" and everything else (None, strings) left out. GIL held.
optim::Hparams numeric_hparams(const py::dict& arguments);

// A Python callable's own rule (the module's twins.run(MyAdam)): registers
// `fn` with `args_json` under python:MODULE.QUALNAME#HASH{...}, HASH over its
// source (or its code objects where the source is not available), resolves
// it and returns that name. GIL held.
std::string register_callable(const py::object& fn,
                              const std::string& args_json);

}  // namespace bridge
