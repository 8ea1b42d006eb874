#include "app/cli.h"

#include <fmt/format.h>

#include "optim/registry.h"
#include "twins/device.h"
#include "twins/report.h"
#include "twins/run.h"
#include "twins/sink.h"

namespace app {

void add_pair_flags(CLI::App& app, twins::PlanRequest& p) {
  app.add_option("--task", p.task,
                 "Task: mod<p> = modular addition (a + b) mod p, e.g. mod47, "
                 "full batch; charlm = character LM on tiny-Shakespeare "
                 "(or --data), minibatches (PROTOCOL §4)")
      ->capture_default_str();
  app.add_option("--steps", p.steps,
                 "Training steps [default: 1500 for mod<p>, 3000 for charlm]")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", p.lr,
                 "Learning rate for every optimizer of the run [default: "
                 "each optimizer's default for the task, PROTOCOL §5]")
      ->check(CLI::PositiveNumber);
  app.add_option("--dtype", p.dtype,
                 "float32 or float64 [default: float32 on cpu, float64 on "
                 "cuda]");
  app.add_option("--device", p.device, "cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--depth", p.depth,
                 "Transformer blocks [default: 2 for mod<p>, 6 for charlm]")
      ->check(CLI::PositiveNumber);
  app.add_option("--d-model", p.d_model,
                 "Residual width d, divisible by --heads [default: 64 for "
                 "mod<p>, 256 for charlm]")
      ->check(CLI::PositiveNumber);
  app.add_option("--heads", p.heads,
                 "Attention heads per block [default: 4 for mod<p>, 8 for "
                 "charlm]")
      ->check(CLI::PositiveNumber);
  app.add_option("--mlp", p.mlp, "MLP hidden width [default: 4 x d-model]")
      ->check(CLI::PositiveNumber);
  app.add_option("--data-seed", p.data_seed,
                 "Seed of the mod<p> split / the charlm batch-stream "
                 "generator")
      ->capture_default_str();
  app.add_option("--ctx", p.ctx, "charlm: context length (characters)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", p.batch, "charlm: windows per training step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--data", p.corpus,
                 "charlm: UTF-8 text file to train on [default: the shipped "
                 "data/tinyshakespeare.txt]");
}

void setup_run(CLI::App& app, RunFlags& f) {
  auto& p = f.plan;
  app.add_option("--opt", f.opts,
                 "Optimizers, comma-separated (see --list-optimizers). "
                 "Without --opt and --twin: the seven Table-3 pairs");
  app.add_option("--twin", f.twins,
                 "Twin kinds, comma-separated: gauge (per-head orthogonal "
                 "A_h on W_Q/W_K rows), identity (A_h = I, must stay "
                 "exactly 0), noise (W_Q, W_K + scale N(0,1)). Default "
                 "gauge when --opt is given");
  app.add_option("--init-seed", f.init_seeds,
                 "Seeds of the base model's initialisation "
                 "(torch::manual_seed before the build), comma-separated")
      ->capture_default_str();
  app.add_option("--twin-seed", f.twin_seeds,
                 "Seeds of the gauge / noise draws, comma-separated "
                 "[default: 777 for gauge twins, 888 for noise twins]");
  app.add_option("--noise-scale", f.noise_scales,
                 "Std of the W_Q/W_K perturbation of noise twins, "
                 "comma-separated")
      ->capture_default_str();
  app.add_option("--p", f.adam_ps,
                 "Exponents in [0, 1] of the Adam-p dial for a bare adam-p "
                 "in --opt, comma-separated (one pair set per p; adam-p0.5 "
                 "names one directly) [default: 0.5]");
  add_pair_flags(app, p);
  app.add_option("--out", f.out,
                 "Results file (JSON lines, appended) [default: a new file "
                 "runs/<task>-<date>-<time>.jsonl]");
  app.add_option("--threads", f.threads,
                 "CPU threads: with 2 or more the two copies of a pair train "
                 "concurrently, each on threads/2 LibTorch and OpenBLAS "
                 "threads; 1 trains them one after the other. Records are "
                 "bitwise the same either way")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--quiet", f.quiet, "No progress lines; the table still prints");
  app.add_flag("--list-optimizers", f.list_optimizers,
               "Print every registered optimizer with its predicted class "
               "and default learning rates, then exit");
}

namespace {

// Splits a comma-separated list; an empty list or element is an error.
std::vector<std::string> split_list(const std::string& flag,
                                    const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma - start);
    TORCH_CHECK(!item.empty(), flag, ": empty element in '", text, "'");
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::vector<uint64_t> parse_seeds(const std::string& flag,
                                  const std::string& text) {
  std::vector<uint64_t> out;
  for (const auto& item : split_list(flag, text)) {
    bool digits = item.size() <= 19;
    for (char c : item) digits = digits && c >= '0' && c <= '9';
    TORCH_CHECK(digits, flag, ": '", item,
                "' is not a seed (a non-negative integer)");
    out.push_back(std::stoull(item));
  }
  return out;
}

std::vector<double> parse_reals(const std::string& flag,
                                const std::string& text) {
  std::vector<double> out;
  for (const auto& item : split_list(flag, text)) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TORCH_CHECK(used == item.size() && used > 0, flag, ": '", item,
                "' is not a number");
    out.push_back(v);
  }
  return out;
}

// The request with every list parsed; throws naming a malformed value.
twins::PlanRequest plan_request(const RunFlags& f) {
  twins::PlanRequest p = f.plan;
  if (!f.opts.empty()) p.opts = split_list("--opt", f.opts);
  if (!f.twins.empty()) p.twins = split_list("--twin", f.twins);
  p.init_seeds = parse_seeds("--init-seed", f.init_seeds);
  if (!f.twin_seeds.empty()) {
    p.twin_seeds = parse_seeds("--twin-seed", f.twin_seeds);
  }
  p.noise_scales = parse_reals("--noise-scale", f.noise_scales);
  if (!f.adam_ps.empty()) p.adam_ps = parse_reals("--p", f.adam_ps);
  return p;
}

void print_optimizers() {
  fmt::print("{:<14} {:<16} {:>9} {:>9}  {}\n", "name", "predicted",
             "lr mod", "lr charlm", "rule");
  for (const auto& name : optim::optimizer_names()) {
    const auto& info = optim::find_optimizer(name);
    fmt::print("{:<14} {:<16} {:>9g} {:>9g}  {}\n", info.name,
               optim::to_string(info.predicted), info.lr_mod, info.lr_charlm,
               info.summary);
  }
}

}  // namespace

int run_run(const RunFlags& f) {
  if (f.list_optimizers) {
    print_optimizers();
    return 0;
  }
  // Everything is validated before the results file exists.
  const twins::PlanRequest request = plan_request(f);
  twins::configure_determinism();  // before any CUDA call
  const std::vector<twins::PairSpec> specs = twins::expand(request);
  twins::resolve_device(request.device);
  twins::check_task(specs.front());  // reads the corpus once, early
  const bool concurrent = f.threads >= 2;
  twins::set_threads(concurrent ? f.threads / 2 : 1);

  twins::JsonlSink sink(f.out.empty()
                            ? twins::fresh_results_path("runs", request.task)
                            : f.out);
  twins::ProgressPrinter progress(f.quiet);
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = twins::run_pairs(specs, sink, progress, concurrent);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  fmt::print("{}", twins::format_drift_table(results));
  fmt::print("{} pair(s) in {:.1f} s; records in {}\n", results.size(), wall,
             sink.path());
  return 0;
}

}  // namespace app
