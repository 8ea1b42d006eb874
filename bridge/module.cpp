// `import twins`: the protocol from Python (docs/extending.md). A front end
// like twin-run's app/: Python's arguments become a sweep::CommandRequest
// and go through the one entry point every command uses
// (sweep::run_command), the verdict through report::judge_all; the rules
// themselves go through the registry's resolvers (bridge.h). The GIL is
// released while the engine runs, so that the pairs' C++ training and their
// Python steps (which take it back) can proceed.
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>

#include "bridge/bridge.h"
#include "bridge/python.h"
#include "report/verdict.h"
#include "sweep/command.h"

namespace py = pybind11;
namespace fs = std::filesystem;

namespace {

std::string json_text(const py::object& args) {
  if (args.is_none())
    return "";
  return py::module_::import("json").attr("dumps")(args).cast<std::string>();
}

// The registered name of `opt`: a built-in name as it is, a torch: / py:
// name resolved, a class or factory registered as a python: rule. GIL held.
std::string rule_name(const py::object& opt, const py::object& args) {
  const std::string args_json = json_text(args);
  if (py::isinstance<py::str>(opt)) {
    const std::string name = opt.cast<std::string>();
    if (bridge::is_python_rule(name)) {
      py::gil_scoped_release release;  // the resolvers take it as needed
      return bridge::resolve_rule(name, args_json);
    }
    TORCH_CHECK(args_json.empty(), "twins: args apply to a Python rule, not "
                "to the built-in '", name, "' (its hyperparameters are fixed)");
    return name;
  }
  return bridge::register_callable(opt, args_json);
}

// The settings twins.run and twins.verdict share.
struct Settings {
  std::string task;
  std::optional<int64_t> steps;
  std::optional<double> lr;
  std::optional<std::string> dtype;
  uint64_t init_seed;
  std::string device;
  std::optional<int64_t> depth, d_model, heads, mlp;
  uint64_t data_seed;
  std::optional<std::string> out;
  int jobs;
  std::optional<int> threads;
  bool progress;
};

sweep::CommandRequest make_request(sweep::CommandKind kind,
                                   const std::string& opt, const Settings& s) {
  sweep::CommandRequest r(kind);
  sweep::PlanRequest& p = r.plan;
  p.task = s.task;
  p.opts = {opt};
  p.init_seeds = {s.init_seed};
  p.steps = s.steps.value_or(0);
  p.lr = s.lr.value_or(0);
  p.dtype = s.dtype.value_or("");
  p.device = s.device;
  p.depth = s.depth.value_or(0);
  p.d_model = s.d_model.value_or(0);
  p.heads = s.heads.value_or(0);
  p.mlp = s.mlp.value_or(0);
  p.data_seed = s.data_seed;
  r.engine.results_path = s.out.value_or("");
  r.engine.jobs = s.jobs;
  r.engine.threads = s.threads.value_or(sweep::default_threads(kind));
  r.engine.quiet = !s.progress;
  return r;
}

// Runs `request` as twin-run does, into a temporary results file unless one
// is named. Called with the GIL held; releases it while the engine runs.
sweep::CommandOutcome run(sweep::CommandRequest request) {
  std::string temp_dir;
  if (request.engine.results_path.empty()) {
    std::string templ = (fs::temp_directory_path() / "twins-XXXXXX").string();
    TORCH_CHECK(mkdtemp(templ.data()), "twins: cannot create a directory in ",
                fs::temp_directory_path().string());
    temp_dir = templ;
    request.engine.results_path = (fs::path(temp_dir) / "records.jsonl").string();
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty())
        fs::remove_all(dir, ec);
    }
  } cleanup{temp_dir};
  py::gil_scoped_release release;
  return sweep::run_command(request);
}

py::list records_of(const sweep::CommandOutcome& o) {
  py::object loads = py::module_::import("json").attr("loads");
  py::list out;
  for (const auto& r : o.run.records)
    out.append(loads(r.json.dump()));
  return out;
}

const char* class_name(report::VerdictClass v) {
  switch (v) {
    case report::VerdictClass::kEquivariant:
      return "equivariant";
    case report::VerdictClass::kBasisDependent:
      return "basis-dependent";
    case report::VerdictClass::kInvalid:
      return "invalid";
    case report::VerdictClass::kUndetermined:
      return "undetermined";
  }
  return "?";
}

py::dict verdict_dict(const report::Verdict& v) {
  const optim::Equivariance predicted = optim::find_optimizer(v.opt).predicted;
  py::dict d;
  d["opt"] = v.opt;
  d["verdict"] = report::verdict_label(v);
  d["class"] = class_name(v.verdict);
  d["chaotic"] = v.chaotic;
  d["predicted"] = optim::to_string(predicted);
  d["as_predicted"] = report::as_predicted(v, predicted);
  d["identity_max"] = v.identity_max;
  d["onset_step"] = v.onset_step;
  d["gauge_onset"] = v.gauge_onset;
  d["noise_onset"] = v.noise_onset;
  d["onset_ratio"] = v.onset_ratio;
  d["gauge_step1"] = v.gauge_step1;
  d["noise_step1"] = v.noise_step1;
  d["onset_ratio_step1"] = v.onset_ratio_step1;
  d["early_ratio"] = v.early_ratio;
  d["early_step"] = v.early_step;
  d["gauge_final"] = v.gauge_final;
  d["noise_final"] = v.noise_final;
  d["track_decades"] = v.track_decades;
  d["note"] = v.note;
  d["line"] = report::format_verdict_line(v);
  return d;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

}  // namespace

PYBIND11_MODULE(twins, m) {
  m.doc() =
      "The attention-twin protocol (docs/protocol.md) from Python: "
      "twins.verdict(rule) and twins.run(rule). A rule is a built-in name "
      "('adam'), a torch.optim name ('torch:Adam'), a file rule "
      "('py:FILE.py:NAME'), or a torch.optim.Optimizer subclass or factory "
      "defined in Python, built as rule(param_groups, lr=lr, **args); the "
      "named parameter groups are described in docs/extending.md.";
  py::module_::import("torch");  // the tensor type the rules receive
  bridge::install();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError,
                      first_line(e.what_without_backtrace()).c_str());
    }
  });

  m.def(
      "resolve",
      [](const py::object& opt, const py::object& args) {
        return rule_name(opt, args);
      },
      py::arg("opt"), py::arg("args") = py::none(),
      "The registered name of a rule: its identity in the records.");

  m.def(
      "run",
      [](const py::object& opt, const std::vector<std::string>& twin_kinds,
         const py::object& args, const std::string& task,
         std::optional<int64_t> steps, std::optional<double> lr,
         std::optional<std::string> dtype, uint64_t init_seed,
         std::vector<uint64_t> twin_seeds, std::vector<double> noise_scales,
         const std::string& device, std::optional<int64_t> depth,
         std::optional<int64_t> d_model, std::optional<int64_t> heads,
         std::optional<int64_t> mlp, uint64_t data_seed,
         std::optional<std::string> out, int jobs, std::optional<int> threads,
         bool progress) {
        const Settings s{task,      steps, lr,      dtype,   init_seed,
                         device,    depth, d_model, heads,   mlp,
                         data_seed, out,   jobs,    threads, progress};
        sweep::CommandRequest r =
            make_request(sweep::CommandKind::kRun, rule_name(opt, args), s);
        r.plan.twins = twin_kinds;
        r.plan.twin_seeds = twin_seeds;
        if (!noise_scales.empty())
          r.plan.noise_scales = noise_scales;
        return records_of(run(std::move(r)));
      },
      py::arg("opt"), py::kw_only(),
      py::arg("twins") = std::vector<std::string>{"gauge"},
      py::arg("args") = py::none(), py::arg("task") = "mod47",
      py::arg("steps") = py::none(), py::arg("lr") = py::none(),
      py::arg("dtype") = py::none(), py::arg("init_seed") = 42,
      py::arg("twin_seeds") = std::vector<uint64_t>{},
      py::arg("noise_scales") = std::vector<double>{},
      py::arg("device") = "cpu", py::arg("depth") = py::none(),
      py::arg("d_model") = py::none(), py::arg("heads") = py::none(),
      py::arg("mlp") = py::none(), py::arg("data_seed") = 42,
      py::arg("out") = py::none(), py::arg("jobs") = 1,
      py::arg("threads") = py::none(), py::arg("progress") = false,
      "Trains the pairs of `opt` (one per twin kind, seed and noise scale) "
      "as `twin-run --opt` does and returns their records as dicts, the "
      "JSONL schema of docs/output-format.md. With out=PATH the records go "
      "there and a rerun resumes; without, a temporary file is used.");

  m.def(
      "verdict",
      [](const py::object& opt, const py::object& args, const std::string& task,
         std::optional<int64_t> steps, std::optional<double> lr,
         std::optional<std::string> dtype, uint64_t init_seed,
         const std::string& device, std::optional<int64_t> depth,
         std::optional<int64_t> d_model, std::optional<int64_t> heads,
         std::optional<int64_t> mlp, uint64_t data_seed,
         std::optional<std::string> out, int jobs, std::optional<int> threads,
         bool progress) {
        const Settings s{task,      steps, lr,      dtype,   init_seed,
                         device,    depth, d_model, heads,   mlp,
                         data_seed, out,   jobs,    threads, progress};
        const sweep::CommandOutcome o = run(make_request(
            sweep::CommandKind::kVerdict, rule_name(opt, args), s));
        const std::vector<report::Verdict> v =
            report::judge_all(o.results());
        TORCH_CHECK(v.size() == 1, "twins.verdict: ", v.size(),
                    " verdicts from ", o.run.records.size(), " records");
        py::dict d = verdict_dict(v.front());
        d["records"] = records_of(o);
        return d;
      },
      py::arg("opt"), py::kw_only(), py::arg("args") = py::none(),
      py::arg("task") = "mod47", py::arg("steps") = py::none(),
      py::arg("lr") = py::none(), py::arg("dtype") = py::none(),
      py::arg("init_seed") = 42, py::arg("device") = "cpu",
      py::arg("depth") = py::none(), py::arg("d_model") = py::none(),
      py::arg("heads") = py::none(), py::arg("mlp") = py::none(),
      py::arg("data_seed") = 42, py::arg("out") = py::none(),
      py::arg("jobs") = 1, py::arg("threads") = py::none(),
      py::arg("progress") = false,
      "The equivariance verdict of `opt` (docs/protocol.md §10), as "
      "`twin-run verdict` gives it: its gauge, identity, noise 1e-7 and "
      "noise 1e-5 twins, judged. Returns a dict: verdict (the label), class, "
      "predicted, as_predicted, the figures it rests on, line (twin-run "
      "verdict's line) and records.");
}
