// `import twins`: the extension twins._core under the package python/twins/
// (docs/extending.md). A front end like twin-run's app/: the Python
// package's keyword settings (one dict, read by one table below) become a
// sweep::CommandRequest and go through the one entry point every command
// uses (sweep::run_command), the verdict through report::judge_all; the
// rules themselves go through the registry's resolvers (bridge.h).
//
// A run is a Job: the engine runs on a thread of its own while the caller's
// thread waits in short slices with the GIL released, so that the pairs'
// C++ training and their Python steps (which take the GIL back) proceed,
// and Python sees Ctrl-C between two slices (python/twins/_engine.py draws
// the progress bar and asks the job to stop). A stop makes every running
// group write its checkpoint and end at its next step (twins/stop.h):
// the records written so far stay in the results file and a rerun resumes.
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>
#include <stdlib.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "bridge/bridge.h"
#include "bridge/python.h"
#include "bridge_config.h"
#include "report/verdict.h"
#include "sweep/command.h"
#include "twins/stop.h"
#include "twins/text.h"

using twins::first_line;

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

// ---------------------------------------------------------------------------
// The keyword settings every entry point shares: one setter per key, each
// writing its field of the request. An unknown key, or a value of the wrong
// type, is a one-line error naming it.

using Setter = std::function<void(sweep::CommandRequest&, const py::handle&)>;

template <typename T>
T as(const py::handle& value, const char* key) {
  // pybind11 casts True to 1 and a string to the list of its characters:
  // neither is what a setting of that type means.
  const bool wrong =
      (std::is_arithmetic_v<T> && !std::is_same_v<T, bool> &&
       py::isinstance<py::bool_>(value)) ||
      (!std::is_same_v<T, std::string> && py::isinstance<py::str>(value));
  try {
    if (!wrong)
      return value.cast<T>();
  } catch (const py::cast_error&) {
  }
  TORCH_CHECK(false, "twins: ", key, "=", py::repr(value).cast<std::string>(),
              " has the wrong type");
}

// A count (steps, a width, jobs): a whole number of at least 1; 0 is not
// "the default" (None is).
template <typename T>
T at_least_one(const py::handle& value, const char* key) {
  const T n = as<T>(value, key);
  TORCH_CHECK(n >= 1, "twins: ", key, "=", n,
              " must be at least 1 (None: the default)");
  return n;
}

const std::map<std::string, Setter>& setters() {
  using R = sweep::CommandRequest;
  using H = const py::handle&;
  static const std::map<std::string, Setter> table = {
      {"twins", [](R& r, H v) {
         r.plan.twins = as<std::vector<std::string>>(v, "twins");
         TORCH_CHECK(!r.plan.twins.empty(), "twins: twins=[] names no twin "
                     "(e.g. twins=['gauge', 'identity'])");
       }},
      {"twin_seeds", [](R& r, H v) { r.plan.twin_seeds = as<std::vector<uint64_t>>(v, "twin_seeds"); }},
      {"noise_scales", [](R& r, H v) {
         const auto s = as<std::vector<double>>(v, "noise_scales");
         if (!s.empty())
           r.plan.noise_scales = s;
       }},
      {"task", [](R& r, H v) { r.plan.task = as<std::string>(v, "task"); }},
      {"steps", [](R& r, H v) { r.plan.steps = at_least_one<int64_t>(v, "steps"); }},
      {"lr", [](R& r, H v) {
         r.plan.lr = as<double>(v, "lr");
         TORCH_CHECK(r.plan.lr > 0 && std::isfinite(r.plan.lr), "twins: lr=",
                     r.plan.lr, " must be a positive number (None: the "
                     "rule's default)");
       }},
      {"dtype", [](R& r, H v) { r.plan.dtype = as<std::string>(v, "dtype"); }},
      {"init_seed", [](R& r, H v) { r.plan.init_seeds = {as<uint64_t>(v, "init_seed")}; }},
      {"device", [](R& r, H v) { r.plan.device = as<std::string>(v, "device"); }},
      {"depth", [](R& r, H v) { r.plan.depth = at_least_one<int64_t>(v, "depth"); }},
      {"d_model", [](R& r, H v) { r.plan.d_model = at_least_one<int64_t>(v, "d_model"); }},
      {"heads", [](R& r, H v) { r.plan.heads = at_least_one<int64_t>(v, "heads"); }},
      {"mlp", [](R& r, H v) { r.plan.mlp = at_least_one<int64_t>(v, "mlp"); }},
      {"data_seed", [](R& r, H v) { r.plan.data_seed = as<uint64_t>(v, "data_seed"); }},
      {"out", [](R& r, H v) {
         r.engine.results_path = as<std::string>(v, "out");
         TORCH_CHECK(!r.engine.results_path.empty(), "twins: out='' names no "
                     "file (None: a temporary one)");
       }},
      {"jobs", [](R& r, H v) { r.engine.jobs = at_least_one<int>(v, "jobs"); }},
      {"threads", [](R& r, H v) { r.engine.threads = at_least_one<int>(v, "threads"); }},
      {"progress", [](R& r, H v) { r.engine.quiet = !as<bool>(v, "progress"); }},
  };
  return table;
}

sweep::CommandKind command_kind(const std::string& kind) {
  if (kind == "run")
    return sweep::CommandKind::kRun;
  TORCH_CHECK(kind == "verdict", "twins: unknown command '", kind,
              "' (run, verdict)");
  return sweep::CommandKind::kVerdict;
}

// The request of `kind` for rule `opt` with `settings` (a dict of the keys
// above). Checkpoints are on as in twin-run (every 10 minutes), so that a
// stop writes every running group's state and a rerun resumes it; Python
// keeps its own signal handlers (the job is stopped by stop()).
sweep::CommandRequest make_request(const std::string& kind,
                                   const std::string& opt,
                                   const py::dict& settings) {
  sweep::CommandRequest r(command_kind(kind));
  r.plan.opts = {opt};
  r.engine.threads = sweep::default_threads(r.kind);
  r.engine.quiet = true;
  r.engine.state.every_seconds = 600;
  r.engine.stop_signals = false;
  for (const auto& [key, value] : settings) {
    const std::string name = py::str(key);
    auto it = setters().find(name);
    TORCH_CHECK(it != setters().end(), "twins: unknown setting '", name, "'");
    if (!value.is_none())
      it->second(r, value);
  }
  return r;
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
    case report::VerdictClass::kFailed:
      return "failed";
    case report::VerdictClass::kDidNotMove:
      return "did not move";
    case report::VerdictClass::kUnresolved:
      return "unresolved";
  }
  return "?";
}

py::dict verdict_dict(const report::Verdict& v) {
  const auto predicted = optim::find_optimizer(v.opt).predicted;
  py::dict d;
  d["opt"] = v.opt;
  d["verdict"] = report::verdict_label(v);
  d["class"] = class_name(v.verdict);
  d["chaotic"] = v.chaotic;
  d["predicted"] = optim::to_string(predicted);
  d["as_predicted"] =
      predicted ? py::object(py::bool_(report::as_predicted(v, *predicted)))
                : py::none();  // no prediction: neither
  d["identity_max"] = v.identity_max;
  d["moved_at"] = v.moved_at;
  d["onset_step"] = v.onset_step;
  d["separation"] = v.separation;
  d["separation_step"] = v.separation_step;
  d["gauge_at"] = v.gauge_at;
  d["roundtrip_at"] = v.roundtrip_at;
  d["roundtrip_onset"] = v.roundtrip_onset;
  d["commutation_measured"] = v.commutation_measured;
  d["commutation_ratio"] = v.commutation_ratio;
  d["commutation_step"] = v.commutation_step;
  d["commutation_gauge"] = v.commutation_gauge;
  d["commutation_roundtrip"] = v.commutation_roundtrip;
  d["roundtrip_final"] = v.roundtrip_final;
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

std::string make_temp_dir() {
  std::string templ = (fs::temp_directory_path() / "twins-XXXXXX").string();
  TORCH_CHECK(mkdtemp(templ.data()), "twins: cannot create a directory in ",
              fs::temp_directory_path().string());
  return templ;
}

// ---------------------------------------------------------------------------
// Job: one command on a thread of its own.

class Job {
 public:
  explicit Job(sweep::CommandRequest request)
      : request_(std::move(request)),
        counts_(std::make_shared<sweep::ProgressCounts>()) {
    if (request_.engine.results_path.empty()) {
      temp_dir_ = make_temp_dir();
      request_.engine.results_path =
          (fs::path(temp_dir_) / "records.jsonl").string();
    }
    request_.engine.counts = counts_;
    twins::clear_stop();
    thread_ = std::thread([this] { work(); });
  }

  ~Job() {
    if (thread_.joinable()) {
      // Collected while running (an error in the caller's wait): the
      // groups stop at their next step, which may need the GIL.
      twins::request_stop(SIGINT);
      if (PyGILState_Check()) {
        py::gil_scoped_release release;
        thread_.join();
      } else {
        thread_.join();
      }
    }
    // A stopped run's temporary file is kept: its path was named.
    if (!temp_dir_.empty() && !stopped_) {
      std::error_code ec;
      fs::remove_all(temp_dir_, ec);
    }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Whether the run has ended, waiting at most `seconds` (GIL released).
  bool wait(double seconds) {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mutex_);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration<double>(std::max(0.0, seconds));
    cv_.wait_until(lock, until, [this] { return done_; });
    if (done_ && thread_.joinable())
      thread_.join();
    return done_;
  }

  // (pairs, pairs done, group-steps, group-steps done) so far.
  py::tuple counts() const {
    return py::make_tuple(counts_->pairs.load(), counts_->pairs_done.load(),
                          counts_->steps.load(), counts_->steps_done.load());
  }

  // Asks every running group to write its state and end at its next step.
  void stop() { twins::request_stop(SIGINT); }

  // The line that says where the records and the groups' states are.
  std::string stopped_message() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopped_)
      return "stopped";
    return fmt::format("{}; rerun with out='{}' to resume", stop_text_,
                       request_.engine.results_path);
  }

  // The records (and, for a verdict, the verdict), or the run's error.
  py::dict result() {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(done_, "twins: the run has not ended");
    if (error_)
      std::rethrow_exception(error_);
    py::dict d;
    d["records"] = records_of(outcome_);
    d["results_path"] = temp_dir_.empty() ? request_.engine.results_path : "";
    if (request_.kind == sweep::CommandKind::kVerdict) {
      const std::vector<report::Verdict> v =
          report::judge_all(outcome_.results());
      TORCH_CHECK(v.size() == 1, "twins.verdict: ", v.size(),
                  " verdicts from ", outcome_.run.records.size(), " records");
      d["verdict"] = verdict_dict(v.front());
    }
    return d;
  }

 private:
  void work() {
    sweep::CommandOutcome outcome;
    std::exception_ptr error;
    bool stopped = false;
    std::string stop_text;
    try {
      outcome = sweep::run_command(request_);
    } catch (const twins::Stopped& e) {
      stopped = true;
      stop_text = e.what();
      error = std::current_exception();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    outcome_ = std::move(outcome);
    error_ = error;
    stopped_ = stopped;
    stop_text_ = stop_text;
    done_ = true;
    cv_.notify_all();
  }

  sweep::CommandRequest request_;
  std::shared_ptr<sweep::ProgressCounts> counts_;
  std::string temp_dir_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, stopped_ = false;
  std::string stop_text_;
  std::exception_ptr error_;
  sweep::CommandOutcome outcome_;
};

std::unique_ptr<Job> start(const std::string& kind, const py::object& opt,
                           const py::object& args, const py::dict& settings) {
  sweep::CommandRequest request =
      make_request(kind, rule_name(opt, args), settings);
  return std::make_unique<Job>(std::move(request));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() =
      "The C++ side of `import twins` (python/twins/): rules resolved and "
      "registered, commands run as jobs. Use the package's twins.run, "
      "twins.verdict and twins.plot.";
  py::object torch = py::module_::import("torch");
  bridge::check_torch_version(torch.attr("__version__").cast<std::string>());
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
  m.attr("__version__") = TWINS_VERSION;
  m.attr("torch_version") = bridge::built_torch_version();

  m.def(
      "resolve",
      [](const py::object& opt, const py::object& args) {
        return rule_name(opt, args);
      },
      py::arg("opt"), py::arg("args") = py::none(),
      "The registered name of a rule: its identity in the records.");

  py::class_<Job>(m, "Job", "A command running on a thread of its own.")
      .def("wait", &Job::wait, py::arg("seconds"),
           "Whether it has ended, waiting at most this long.")
      .def("counts", &Job::counts,
           "(pairs, pairs done, group-steps, group-steps done).")
      .def("stop", &Job::stop,
           "Every running group writes its checkpoint and ends at its next "
           "step.")
      .def("stopped_message", &Job::stopped_message)
      .def("result", &Job::result,
           "{'records': [...], 'verdict': {...}}, or the run's error.");

  m.def("start", &start, py::arg("kind"), py::arg("opt"), py::arg("args"),
        py::arg("settings"),
        "Starts command `kind` ('run' or 'verdict') for rule `opt` with its "
        "JSON-able `args` and the keyword `settings` of twins.run.");
}
