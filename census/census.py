"""The census's list of rules (docs/results.md, "The census"): every
optimizer of the installed libraries, read from each library's own
registry when the census runs, so that a new release adds its rules, with
the prediction set for it in bridge/predictions.tsv.

This file is compiled into the census (census/CMakeLists.txt embeds it)
and runs in the bridge's interpreter beside its modules. The C++ side
(census/census.cpp) calls rules(predictions_tsv, libraries) and gets one
dict per rule:

    library     the distribution's name as the predictions spell it
    version     its installed version
    aliases     the registry names of one rule (aliases of one class and
                defaults run once and are listed together)
    rule        the name twin-run's --opt takes for it (torch:NAME,
                py:MODULE:NAME, timm's factory with its registry name)
    definition  the class and the defaults it is built with
    predicted   the predicted class ("" where the predictions have no row)
    table3      what that class means on the Table-3 model
    reason      the prediction's one-line reason
    decided_by  the source line the prediction rests on
    error       why the rule cannot be listed to run ("" when it can)

and one dict per library listed but not installed (rule "", error
"not installed"), so that the census says what it did not see.
"""

import importlib
import importlib.metadata as metadata
import inspect

import torch


def _is_rule(value):
    return (isinstance(value, type) and issubclass(value, torch.optim.Optimizer)
            and value is not torch.optim.Optimizer)


def _exported_rules(module, names):
    """(name, class) for each of `names` in `module` that is an optimizer
    class."""
    out = []
    for name in names:
        value = getattr(module, name, None)
        if _is_rule(value):
            out.append((name, value))
    return out


def _definition(cls, defaults=None):
    text = f"{cls.__module__}.{cls.__qualname__}"
    if defaults:
        text += "(" + ", ".join(f"{k}={v!r}" for k, v in sorted(defaults.items())) + ")"
    return text


def _by_class(pairs, rule_of):
    """Aliases of one class (and defaults) listed together, in the order of
    their first alias."""
    seen = {}
    for alias, cls in pairs:
        key = id(cls)
        if key not in seen:
            seen[key] = {"aliases": [], "cls": cls}
        seen[key]["aliases"].append(alias)
    rules = []
    for entry in seen.values():
        cls = entry["cls"]
        rules.append({"aliases": entry["aliases"], "rule": rule_of(entry["aliases"][0], cls),
                      "definition": _definition(cls)})
    return rules


# ---------------------------------------------------------------------------
# Each library's registry.

def _torch(module):
    # torch.optim's public classes (SparseAdam among them: the census says
    # why it cannot run rather than leave it out).
    names = sorted(getattr(module, "__all__", dir(module)))
    return _by_class(_exported_rules(module, names),
                     lambda alias, cls: f"torch:{alias}")


def _pytorch_optimizer(module):
    pairs = []
    for name in module.get_supported_optimizers():
        pairs.append((name, module.load_optimizer(name)))
    return _by_class(pairs, lambda alias, cls:
                     f"py:pytorch_optimizer:{cls.__name__}")


def _timm(module):
    # timm.optim's registry names; a name's class and its bound defaults
    # (lambw: Lamb with decoupled_decay=True) are built by timm's own
    # factory, create_optimizer_v2(params, opt=NAME), at the class's
    # default rate.
    groups = {}
    for name in module.list_optimizers():
        # The class itself (an entry may name it as a string); an entry
        # whose class does not load here (bitsandbytes': "CUDA required")
        # is listed alone with the reason.
        try:
            cls = module.get_optimizer_class(name, bind_defaults=False)
            error = ""
        except Exception as e:
            cls, error = None, _cannot_load(e)
        defaults = module.get_optimizer_info(name).defaults or {}
        key = (id(cls) if cls else name, repr(sorted(defaults.items())))
        entry = groups.setdefault(key, {"aliases": [], "cls": cls, "defaults": defaults,
                                        "error": error})
        entry["aliases"].append(name)
    rules = []
    for entry in groups.values():
        cls = entry["cls"]
        lr = _default_lr(cls) if cls else None
        args = '{"opt":"%s"%s}' % (entry["aliases"][0], "" if lr is None else ',"lr":%r' % lr)
        rules.append({"aliases": entry["aliases"],
                      "rule": "py:timm.optim:create_optimizer_v2" + args,
                      "definition": _definition(cls, entry["defaults"]) if cls else "",
                      "error": entry["error"]})
    return rules


def _module_classes(prefix):
    def enumerate_(module):
        names = sorted(getattr(module, "__all__", None) or
                       [n for n in dir(module) if not n.startswith("_")])
        return _by_class(_exported_rules(module, names),
                         lambda alias, cls: f"py:{prefix}:{alias}")
    return enumerate_


def _subpackages(names):
    """A library that exports its rules from subpackages (emerging-optimizers:
    orthogonalized_optimizers, psgd, ...): each subpackage's exported
    classes, py:PACKAGE.SUBPACKAGE:NAME."""
    def enumerate_(module):
        rules = []
        for name in names:
            sub = importlib.import_module(f"{module.__name__}.{name}")
            rules += _module_classes(sub.__name__)(sub)
        return rules
    return enumerate_


# The libraries, as the predictions name them: (name, import, registry).
LIBRARIES = [
    ("torch", "torch.optim", _torch),
    ("pytorch_optimizer", "pytorch_optimizer", _pytorch_optimizer),
    ("timm", "timm.optim", _timm),
    ("heavyball", "heavyball", _module_classes("heavyball")),
    ("torch-optimizer", "torch_optimizer", _module_classes("torch_optimizer")),
    ("schedulefree", "schedulefree", _module_classes("schedulefree")),
    ("lion-pytorch", "lion_pytorch", _module_classes("lion_pytorch")),
    ("kron-torch", "kron_torch", _module_classes("kron_torch")),
    ("prodigyopt", "prodigyopt", _module_classes("prodigyopt")),
    ("adam_mini", "adam_mini", _module_classes("adam_mini")),
    ("emerging-optimizers", "emerging_optimizers",
     _subpackages(["orthogonalized_optimizers", "psgd", "riemannian_optimizers",
                   "scalar_optimizers", "soap"])),
    ("muon-optimizer", "muon", _module_classes("muon")),
    ("bitsandbytes", "bitsandbytes.optim", _module_classes("bitsandbytes.optim")),
    ("torch-optimi", "optimi", _module_classes("optimi")),
    ("dadaptation", "dadaptation", _module_classes("dadaptation")),
    ("torch-adopt", "adopt", _module_classes("adopt")),
    ("adam-atan2-pytorch", "adam_atan2_pytorch", _module_classes("adam_atan2_pytorch")),
    ("came-pytorch", "came_pytorch", _module_classes("came_pytorch")),
    ("sophia-opt", "sophia_opt", _module_classes("sophia_opt")),
    ("grokadamw", "grokadamw", _module_classes("grokadamw")),
    ("galore-torch", "galore_torch", _module_classes("galore_torch")),
    ("apollo-torch", "apollo_torch", _module_classes("apollo_torch")),
]


def _default_lr(cls):
    try:
        p = inspect.signature(cls).parameters.get("lr")
    except (TypeError, ValueError):
        return None
    if p is None or p.default is inspect.Parameter.empty or \
            not isinstance(p.default, (int, float)) or isinstance(p.default, bool):
        return None
    return float(p.default)


def _version(library):
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return ""


# What a probe's error says about a need of the rule's that the protocol
# does not meet, beyond bridge/errors.py's (which arrive as "cannot run
# here: ..."): (words of the message, the reason). Checked in order.
_NEEDS = [
    (("missing 1 required positional argument",),
     "needs an argument the protocol cannot give"),
    (("unexpected keyword argument 'lr'",),
     "wraps another optimizer (takes no lr: needs a base optimizer)"),
    (("You need to install", "No module named"),
     "needs a package that is not installed"),
]


def probe_reason(text):
    """The census's reason from a probe's one-line error (the rule's own
    name already taken off): the "cannot run here" classes, else "raises"
    with where (its arguments or parameters, a step, eval()) and the
    message."""
    at = text.find("cannot run here: ")
    if at >= 0:
        return text[at:]
    for words, reason in _NEEDS:
        if any(w in text for w in words):
            return f"cannot run here: {reason} ({_after_where(text)})"
    return "raises: " + text


def _after_where(text):
    """The Python error of "where: TypeError: message"."""
    for kind in ("TypeError: ", "ImportError: ", "ModuleNotFoundError: ",
                 "ValueError: ", "RuntimeError: ", "AttributeError: "):
        at = text.find(kind)
        if at >= 0:
            return text[at:]
    return text


def _cannot_load(e):
    reason = _conventions_reason(e)
    return ("cannot run here: " + reason if reason else "does not load") + \
        f" ({_first_line(e)})"


def _conventions_reason(e):
    try:  # the bridge's classification, where this runs inside it
        from _twins_errors import cannot_run
    except ImportError:
        return None
    return cannot_run(e)


def _first_line(e):
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def library_names():
    return [library for library, _, _ in LIBRARIES]


def rules(predictions_tsv, libraries=None):
    """The rules of `libraries` (names of LIBRARIES; every library when
    None), in the census's order; only those libraries are imported."""
    from _twins_identity import predictions as parse_predictions
    predictions = parse_predictions(predictions_tsv)
    out = []
    for library, module_name, registry in LIBRARIES:
        if libraries is not None and library not in libraries:
            continue
        version = _version(library)
        base = {"library": library, "version": version, "aliases": [], "rule": "",
                "definition": "", "predicted": "", "table3": "", "reason": "",
                "decided_by": "", "error": ""}
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                out.append(dict(base, error="not installed"))
                continue
            out.append(dict(base, error="fails to import: " + _first_line(e)))
            continue
        except Exception as e:  # a library that raises on import
            out.append(dict(base, error="fails to import: " + _first_line(e)))
            continue
        try:
            listed = registry(module)
        except Exception as e:
            out.append(dict(base, error="its registry raised: " + _first_line(e)))
            continue
        for entry in listed:
            row = None
            for alias in entry["aliases"]:
                row = predictions.get((library, alias))
                if row:
                    break
            rule = dict(base, **entry)
            if row:
                rule.update(predicted=row["class"], table3=row["table3"],
                            reason=row["reason"], decided_by=row["decided_by"])
            out.append(rule)
    return out
