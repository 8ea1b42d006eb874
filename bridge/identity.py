"""A Python rule's identity, which its --opt name and so its records' keys
carry (bridge/bridge.h): a module's rule by its distribution and version
(or its file's hash), a callable's by what decides its numbers (its code,
defaults, closure and the globals it reads), its hyperparameters from its
signature; and the predicted class of a library's class at its defaults
(bridge/predictions.tsv).

Compiled into the bridge as the module _twins_identity.
"""

import functools
import importlib
import inspect
import os
import sys
import types

import torch

from _twins_isolation import Guarded, RuleCode


@functools.lru_cache(maxsize=None)
def _packages_distributions():
    """importlib.metadata's map of top-level packages to distributions: it
    reads every installed distribution's file list (0.3 s in the test
    venv), and the census resolves 326 rules."""
    import importlib.metadata as metadata
    return metadata.packages_distributions()


def _distributions_of(top):
    """The distributions providing top-level package `top`, read again when
    the map kept has none (a package installed since, in a notebook)."""
    dists = _packages_distributions().get(top)
    if dists is None:
        _packages_distributions.cache_clear()
        dists = _packages_distributions().get(top, [])
    return dists


def module_identity(module, target):
    """'DIST==VERSION' of the distribution that provides `module`, or the
    first 16 hex digits of the SHA-256 of the file defining `target` where
    none does. Raises naming what is missing."""
    import hashlib
    import importlib
    import importlib.metadata as metadata
    try:
        with Guarded(), RuleCode():  # its import is the rule's code (bridge/isolation.py)
            mod = importlib.import_module(module)
    except Exception as e:
        raise ImportError(f"module '{module}' does not import: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if not hasattr(mod, target):
        rules = sorted(n for n, v in vars(mod).items()
                       if isinstance(v, type) and issubclass(v, torch.optim.Optimizer))
        raise AttributeError(f"module '{module}' defines no '{target}'"
                             + (f" (its optimizers: {', '.join(rules)})" if rules else ""))
    top = module.split(".")[0]
    dists = _distributions_of(top)
    if dists:
        dist = metadata.distribution(dists[0])
        return f"{dist.metadata['Name']}=={dist.version}"
    fn = getattr(mod, target)
    try:
        path = inspect.getsourcefile(fn) or mod.__file__
    except TypeError:
        path = mod.__file__
    defining = sys.modules.get(getattr(fn, "__module__", None) or "", mod)
    with open(path, "rb") as f:
        return hash_with_helpers(f.read(), path, _import_root(defining, path))[0]


def _import_root(module, path):
    """The directory the absolute imports of `module` (at `path`) resolve
    from: the sys.path entry holding its top-level package."""
    depth = getattr(module, "__name__", "").count(".")
    if os.path.basename(path) == "__init__.py":
        depth += 1
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(depth):
        root = os.path.dirname(root)
    return root


def hash_with_helpers(source, path, top=None):
    """(hash, helpers): the first 16 hex digits of the SHA-256 of a rule's
    file `source` (bytes, the file `path`) — followed, where it has helpers
    (helper_files), by each helper's relative path and bytes — and the
    helpers' paths. Without helpers the hash is the file's alone, as
    sha256sum gives it."""
    import hashlib
    helpers = helper_files(path, bytes(source), top)
    data = bytes(source)
    for rel, content in helpers:
        data += b"\0" + os.fsencode(rel) + b"\0" + content
    return hashlib.sha256(data).hexdigest()[:16], [rel for rel, _ in helpers]


def _module_file(directory, dotted):
    """The .py file that `dotted` names below `directory` (a package's
    __init__.py, or a module; for `pkg.NAME` where NAME is no module, the
    package's), None where `directory` has no such module."""
    found = None
    for part in dotted.split("."):
        if not part:
            return found
        package = os.path.join(directory, part)
        if os.path.isfile(os.path.join(package, "__init__.py")):
            found, directory = os.path.join(package, "__init__.py"), package
        elif os.path.isfile(package + ".py"):
            return package + ".py"
        else:
            return found
    return found


def _imported_files(path, source, top):
    """The files that the import statements of `source` (the file `path`)
    name below `top`, the directory its absolute imports resolve from:
    `import a.b` and `from a import b` find a/b.py or a/b/__init__.py
    there, `from . import x` beside `path`. Read from the files, not from
    what this process happens to have imported: an import inside a
    function counts before it runs."""
    import ast
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(top, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = os.path.dirname(path)
                for _ in range(node.level - 1):
                    base = os.path.dirname(base)
            else:
                base = top
            module = node.module or ""
            targets = [(base, module)] if module else []
            targets += [(base, f"{module}.{a.name}" if module else a.name)
                        for a in node.names]
        else:
            continue
        for directory, dotted in targets:
            found = _module_file(directory, dotted)
            if found is not None:
                out.append(os.path.abspath(found))
    return out


def _python_install_dirs():
    import sysconfig
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(sysconfig.get_path(key))
        except KeyError:
            pass
    return [os.path.abspath(d) + os.sep for d in dirs if d]


def helper_files(rule_path, source, top=None):
    """The modules a rule's file imports that lie in `top` (the directory
    its absolute imports resolve from: the file's own for a py:FILE rule)
    or below — its own helpers — and those they import, transitively, as
    sorted (path relative to `top`, bytes): part of the rule's identity,
    since they decide its numbers as its own lines do. Python's own
    installation (a virtual environment inside the project included) is
    left out: the standard library and installed distributions are
    theirs to name."""
    rule_path = os.path.abspath(rule_path)
    top = os.path.abspath(top or os.path.dirname(rule_path))
    installed = _python_install_dirs()
    files = {}
    stack = [(rule_path, source)]
    while stack:
        path, text = stack.pop()
        for found in _imported_files(path, text, top):
            if (found == rule_path or found in files
                    or not found.startswith(top + os.sep)
                    or any(found.startswith(d) for d in installed)):
                continue
            with open(found, "rb") as f:
                files[found] = f.read()
            stack.append((found, files[found]))
    return sorted((os.path.relpath(f, top), b) for f, b in files.items())


def fresh_rule(module, target):
    """The rule `target` of a module no distribution provides (its identity
    the hash of its file), with the module that defines it executed afresh:
    like a py:FILE rule, each optimizer gets its own module-level state (a
    call counter at module level made the records depend on --jobs and
    --threads, and the identity twin drift). The module's imports are
    shared as Python shares them; a rule defined inside another object is
    returned as imported."""
    import importlib.util
    with Guarded(), RuleCode():
        fn = getattr(importlib.import_module(module), target)
        defining = sys.modules.get(getattr(fn, "__module__", None) or "")
        spec = getattr(defining, "__spec__", None)
        origin = getattr(spec, "origin", None)
        name = getattr(fn, "__name__", None)
        if (origin is None or not origin.endswith(".py") or name is None
                or getattr(fn, "__qualname__", name) != name
                or getattr(defining, name, None) is not fn):
            return fn
        fresh_spec = importlib.util.spec_from_file_location(
            spec.name, origin,
            submodule_search_locations=spec.submodule_search_locations)
        fresh = importlib.util.module_from_spec(fresh_spec)
        fresh_spec.loader.exec_module(fresh)
        return getattr(fresh, name)


def signature_defaults(fn):
    """The keyword defaults of `fn`'s signature (a class: its __init__), as
    the record's hyperparameters read them."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty}


# ---------------------------------------------------------------------------
# A callable's identity (twins.run(SomeClass)): what decides its numbers.

class _Identity:
    """The text a callable rule's name hashes: its code (the source where
    Python has it, else its code objects), defaults, closure values and
    the globals its code reads (plain values by repr, the user's own
    functions and classes followed), a functools.partial's function and
    arguments, a class's members and its bases'. Library code (installed
    distributions, the standard library) counts by name and version. A
    value whose repr is its address (an arbitrary object) makes the hash
    this process's alone: its records are never resumed by another."""

    def __init__(self):
        self.seen = set()
        self.parts = []

    def of(self, obj):
        import functools
        if isinstance(obj, functools.partial):
            self.parts.append("partial")
            self.of(obj.func)
            self.parts.append("args " + self.value(obj.args))
            self.parts.append("keywords " + self.value(obj.keywords or {}))
        elif id(obj) in self.seen:
            self.parts.append("seen " + self.name(obj))
        elif self.library(obj):
            self.parts.append("library " + self.name(obj) + " " + self.version(obj))
        elif isinstance(obj, type):
            self.seen.add(id(obj))
            self.klass(obj)
        elif inspect.isfunction(obj) or inspect.ismethod(obj):
            self.seen.add(id(obj))
            self.function(getattr(obj, "__func__", obj))
        else:
            self.parts.append("value " + self.value(obj))
        return self.parts

    @staticmethod
    def name(obj):
        return (f"{getattr(obj, '__module__', '?')}."
                f"{getattr(obj, '__qualname__', type(obj).__qualname__)}")

    @staticmethod
    def library(obj):
        import sysconfig
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        if module is None:
            return False  # type() or exec with a module name of their own
        # Only what the module itself defines under that name: a class made
        # by exec() without __name__ calls itself builtins' own.
        found = module
        for part in (getattr(obj, "__qualname__", "") or "?").split("."):
            found = getattr(found, part, None)
        if found is not obj:
            return False
        if module.__name__ in sys.builtin_module_names:
            return True
        path = getattr(module, "__file__", None)
        if not path:
            return False  # __main__ of a notebook
        stdlib = sysconfig.get_paths()["stdlib"]
        return ("site-packages" in path or "dist-packages" in path
                or path.startswith(stdlib))

    @classmethod
    def version(cls, obj):
        top = (getattr(obj, "__module__", "") or "").split(".")[0]
        try:
            import importlib.metadata as metadata
            dists = _distributions_of(top)
            if dists:
                return f"{dists[0]}=={metadata.version(dists[0])}"
        except Exception:
            pass
        return f"python {sys.version.split()[0]}"

    def value(self, value, depth=0):
        if isinstance(value, (bool, int, float, complex, str, bytes, type(None))):
            return repr(value)
        if depth < 4 and isinstance(value, (tuple, list)):
            return (type(value).__name__ + "("
                    + ",".join(self.value(v, depth + 1) for v in value) + ")")
        if depth < 4 and isinstance(value, (set, frozenset)):
            return "set(" + ",".join(sorted(self.value(v, depth + 1) for v in value)) + ")"
        if depth < 4 and isinstance(value, dict):
            items = sorted((self.value(k, depth + 1), self.value(v, depth + 1))
                           for k, v in value.items())
            return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
        if isinstance(value, type(sys)):
            return "module " + value.__name__
        if isinstance(value, torch.Tensor):
            flat = value.detach().cpu().flatten()
            if flat.numel() > 4096:  # its first values and two sums
                flat = [flat[:16].tolist(), flat.sum().item(), flat.abs().sum().item()]
            else:
                flat = flat.tolist()
            return f"tensor {value.dtype} {tuple(value.shape)} {flat}"
        if isinstance(value, type) or inspect.isfunction(value) or inspect.ismethod(value):
            if self.library(value):
                return "library " + self.name(value)
            if id(value) not in self.seen:
                self.of(value)  # the user's own helper: its code counts too
            return "own " + self.name(value)
        return repr(value)

    def code(self, fn):
        try:
            return inspect.getsource(fn)
        except (OSError, TypeError):
            import marshal
            return marshal.dumps(fn.__code__).hex()

    def function(self, fn):
        self.parts.append("function " + self.name(fn))
        self.parts.append(self.code(fn))
        self.parts.append("defaults " + self.value(fn.__defaults__))
        self.parts.append("kwdefaults " + self.value(fn.__kwdefaults__))
        for cell in fn.__closure__ or ():
            try:
                self.parts.append("closure " + self.value(cell.cell_contents))
            except ValueError:  # an empty cell
                self.parts.append("closure empty")
        try:
            read = inspect.getclosurevars(fn).globals
        except (TypeError, ValueError):
            read = {}
        for name in sorted(read):
            self.parts.append(f"global {name} " + self.value(read[name]))

    def klass(self, cls):
        self.parts.append("class " + self.name(cls))
        for base in cls.__mro__[1:]:
            if base is not object:
                self.of(base)
        skip = {"__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"}
        for name, member in sorted(vars(cls).items()):
            if name in skip:
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            # torch.optim.Optimizer wraps its subclass's step() in a
            # profiling hook at the first instance (marked `hooked`): the
            # rule is what it was before, so that a class's name does not
            # change once it has been built (an interrupted run would not
            # resume in the same process).
            while getattr(member, "hooked", False) and hasattr(member, "__wrapped__"):
                member = member.__wrapped__
            if inspect.isfunction(member):
                self.parts.append("member " + name)
                self.function(member)
            else:
                self.parts.append(f"member {name} " + self.value(member))


def callable_identity(fn):
    """What a callable rule is, for its name's hash (_Identity)."""
    return "\n".join(_Identity().of(fn))


# ---------------------------------------------------------------------------
# A library class's predicted class (bridge/predictions.tsv).

def predictions(text):
    """{(library, alias): row} of the predictions file."""
    table = {}
    header = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if header is None:
            header = fields
            continue
        row = dict(zip(header, fields))
        for alias in row["aliases"].split(","):
            table[(row["library"], alias.strip())] = row
    return table


def prediction_of(predictions_tsv, fn):
    """The predicted class of the rows whose definition is `fn`'s class at
    its defaults (module and qualified name, no bound defaults); "" where
    none names it or the rows disagree."""
    top = (getattr(fn, "__module__", None) or "").split(".")[0]
    classes = set()
    for row in predictions(predictions_tsv).values():
        definition = row["definition"]
        if "(" not in definition and definition.split(".")[0] == top \
                and _resolve(definition) is fn:
            classes.add(row["class"])
    return classes.pop() if len(classes) == 1 else ""


def _resolve(path):
    """The object a dotted path names (torch.optim.Adam), None where it
    names none; only modules of an already imported package are imported."""
    module, _, name = path.rpartition(".")
    while module:
        try:
            value = importlib.import_module(module)
        except ImportError:
            module, _, outer = module.rpartition(".")
            name = f"{outer}.{name}"
            continue
        for part in name.split("."):
            value = getattr(value, part, None)
        return value
    return None
