#include "bench/bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "data/charlm.h"
#include "model/flops.h"
#include "optim/registry.h"
#include "twins/defaults.h"
#include "twins/device.h"
#include "twins/environment.h"
#include "twins/io.h"
#include "twins/lockstep.h"
#include "twins/setup.h"
#include "twins_paths.h"  // generated: TWINS_SOURCE_DIR

namespace bench {

namespace fs = std::filesystem;
using twins::dtype_name;
using twins::PairSpec;
using twins::set_threads;
using Clock = std::chrono::steady_clock;

namespace {

long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  TORCH_CHECK(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Steps of a row: warm-up, then `repeats` timed segments of `segment` steps.
struct Schedule {
  int64_t warmup, segment;
};

Schedule schedule_for(const PairSpec& spec, bool quick) {
  if (quick)
    return {1, 2};
  return spec.task == "charlm" ? Schedule{2, 3} : Schedule{5, 10};
}

// The Table-3 headline pair (adam gauge, init 42, gauge seed 777) at the
// task's default shape, as a run would resolve it; `opt` in adam's place.
PairSpec bench_spec(const std::string& task, torch::Dtype dtype,
                    const std::string& opt) {
  PairSpec s = twins::default_spec(task, opt);
  s.dtype = dtype;
  s.protocol = twins::default_protocol(s.protocol, dtype);
  return s;
}

struct RowDef {
  std::string name;
  std::string task;
  torch::Dtype dtype;
  ThreadConfig threads;
  std::string opt = "adam";
  // LLaMA-style attention: rotary positions and half as many key/value
  // heads as query heads (docs/protocol.md §3), which the small-attention
  // kernel and the token table leave to the reference path.
  bool rope_gqa = false;
  // The model's products: LibTorch's BLAS or twins' FMA-chain kernels
  // (model/gemm.h).
  model::Matmul matmul = model::Matmul::kBlas;
};

// torch.optim's Adam stepped in Python beside the built-in adam: the cost
// of a Python step(). Only in a program whose registry resolves torch:
// names (twin-run built with Python support).
constexpr const char* kTorchAdam = "torch:Adam";

std::vector<RowDef> row_defs() {
  const ThreadConfig conc{true, 1}, seq1{false, 1}, seq2{false, 2};
  std::vector<RowDef> rows = {
      {"mod47-f32", "mod47", torch::kFloat, conc},
      {"mod47-f32-seq1", "mod47", torch::kFloat, seq1},
      {"mod47-f32-seq2", "mod47", torch::kFloat, seq2},
      {"mod47-f64", "mod47", torch::kDouble, conc},
      {"mod47-f32-rope-gqa", "mod47", torch::kFloat, conc, "adam", true},
      {"charlm-f32", "charlm", torch::kFloat, conc},
      {"charlm-f32-rope-gqa", "charlm", torch::kFloat, conc, "adam", true},
      {"charlm-f64", "charlm", torch::kDouble, conc}};
  if (optim::has_resolver(kTorchAdam)) {
    rows.insert(rows.begin() + 1, {"mod47-torchadam", "mod47",
                                   torch::kFloat, conc, kTorchAdam});
  }
  // The FMA-chain rows, where this CPU has the kernels: the same pairs,
  // other float32 bits.
  if (model::best_isa() != model::Isa::kNone) {
    const model::Matmul fma = model::Matmul::kFmaChain;
    std::vector<RowDef> chained = {
        {"mod47-f32-fma", "mod47", torch::kFloat, conc, "adam", false, fma},
        {"mod47-f64-fma", "mod47", torch::kDouble, conc, "adam", false, fma},
        {"charlm-f32-fma", "charlm", torch::kFloat, conc, "adam", false, fma},
        {"charlm-f64-fma", "charlm", torch::kDouble, conc, "adam", false, fma}};
    if (optim::has_resolver(kTorchAdam)) {
      chained.insert(chained.begin() + 1,
                     {"mod47-torchadam-fma", "mod47", torch::kFloat, conc,
                      kTorchAdam, false, fma});
    }
    rows.insert(rows.end(), chained.begin(), chained.end());
  }
  return rows;
}

// The model config and the (sequences, length) of one training step.
struct StepShape {
  model::ModelConfig cfg;
  int64_t sequences, len;
};

StepShape step_shape(const PairSpec& spec) {
  auto task = twins::make_task(spec, torch::kCPU);
  StepShape s;
  s.cfg = twins::model_config(spec, task->shape());
  const data::Batch b = task->train_batch(1);
  s.sequences = b.x.size(0);
  s.len = b.x.size(1);
  return s;
}

bool on_cuda(const PairSpec& spec) { return spec.device != "cpu"; }

// The products of one model step as the row's device runs it: on CUDA the
// first block has no token table (model::uses_token_table), so it does
// about a fifth more work than on CPU.
std::vector<model::MatmulShape> step_matmuls(const PairSpec& spec) {
  const StepShape s = step_shape(spec);
  return model::training_step_matmuls(s.cfg, s.sequences, s.len,
                                      on_cuda(spec));
}

// Waits for the row's device (not the current one) to finish its queued
// work; nothing to wait for on CPU.
void synchronize(const torch::Device& device) {
  if (device.is_cuda())
    torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

}  // namespace

std::string ThreadConfig::name() const {
  return concurrent ? fmt::format("2 copies x {} thread{}", threads,
                                  threads > 1 ? "s" : "")
                    : fmt::format("sequential, {} thread{}", threads,
                                  threads > 1 ? "s" : "");
}

std::vector<std::string> bench_row_names() {
  std::vector<std::string> out;
  for (const auto& r : row_defs())
    out.push_back(r.name);
  return out;
}

double matmul_roof_gflops(const PairSpec& spec, const ThreadConfig& threads,
                          int repeats, model::Matmul matmul) {
  const auto shapes = step_matmuls(spec);
  const torch::Device device = twins::resolve_device(spec.device);
  const auto opts = torch::TensorOptions().dtype(spec.dtype).device(device);
  struct Operands {
    std::vector<torch::Tensor> a, b, c;
  };
  const int workers = threads.concurrent ? 2 : 1;
  // The FMA-chain kernels do the step's linear maps; attention's batched
  // products stay bmm (the step's small-attention kernel does those).
  const bool chained = matmul == model::Matmul::kFmaChain && !device.is_cuda();
  std::vector<Operands> ops(workers);
  for (auto& o : ops) {
    for (const auto& sh : shapes) {
      // A in the step's layout (a weight gradient's dY^T read in place).
      o.a.push_back(
          sh.a_transposed
              ? torch::randn({sh.batch, sh.k, sh.m}, opts).transpose(1, 2)
              : torch::randn({sh.batch, sh.m, sh.k}, opts));
      o.b.push_back(torch::randn({sh.batch, sh.k, sh.n}, opts));
      o.c.push_back(torch::empty({sh.batch, sh.m, sh.n}, opts));
    }
  }
  auto pass = [&](Operands& o) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (shapes[i].batch == 1 && chained) {
        // A new output per product, as in the step (chain_mm has no out
        // form): a harsher replay than the BLAS's into kept outputs.
        o.c[i] = model::chain_mm(o.a[i][0], o.b[i][0]);
      } else if (shapes[i].batch == 1) {
        torch::Tensor c = o.c[i][0];
        torch::mm_out(c, o.a[i][0], o.b[i][0]);
      } else {
        torch::bmm_out(o.c[i], o.a[i], o.b[i]);
      }
    }
  };
  set_threads(threads.threads);
  std::vector<double> times;
  synchronize(device);  // the operands are made
  for (int r = 0; r <= repeats; ++r) {  // pass 0 warms up
    const auto t0 = Clock::now();
    if (workers == 1) {
      pass(ops[0]);
    } else {
      // The second copy's thread at the row's setting too, as the
      // engine's workers are (twins::run_on_threads): a new thread of an
      // OpenMP build (PyPI's torch) starts with every core, and the two
      // replays then fought over them (a roof of 37 GFLOP/s under the
      // step's own 89-103).
      std::thread other([&] {
        set_threads(threads.threads);
        pass(ops[1]);
      });
      pass(ops[0]);
      other.join();
    }
    synchronize(device);
    if (r > 0)
      times.push_back(seconds_since(t0));
  }
  return model::total_flops(shapes) * workers / median(times) / 1e9;
}

std::string eager_script_path() {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "bench");
    candidates.push_back(exe.parent_path() / "bench");
  }
  candidates.emplace_back(std::string(TWINS_SOURCE_DIR) + "/bench");
  for (const auto& d : candidates) {
    if (fs::exists(d / "eager_pytorch.py", ec)) {
      return (d / "eager_pytorch.py").string();
    }
  }
  return "";
}

std::string EagerSetting::name() const {
  return fmt::format("{}/{}", torch_threads, openblas_threads);
}

std::vector<EagerSetting> eager_settings() {
  const int cores =
      std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  return {{1, 1}, {1, cores}, {cores, cores}};
}

std::vector<EagerSetting> eager_settings(const std::string& device) {
  // On a GPU the CPU threads only launch kernels: one setting.
  if (device != "cpu")
    return {{1, 1}};
  return eager_settings();
}

double BenchRow::speedup_vs_best_eager() const {
  if (eager_s.empty())
    return 0;
  return *std::min_element(eager_s.begin(), eager_s.end()) / s_per_pair_step;
}

namespace {

// The shell command that times `spec` under eager PyTorch with `script`:
// every user-supplied part (the Python, the script's and the corpus's
// paths) quoted for the shell.
std::string eager_command(const BenchOptions& options, const PairSpec& spec,
                          const EagerSetting& setting,
                          const std::string& script) {
  const bool lm = spec.task == "charlm";
  const int warmup = options.quick ? 1 : lm ? 1 : 3;
  const int timed = options.quick ? 2 : lm ? 6 : 40;
  std::string cmd = fmt::format(
      "OPENBLAS_NUM_THREADS={} {} {} --task {} --opt {} --twin {} "
      "--steps {} --warmup {} --dtype {} --threads {}",
      setting.openblas_threads, twins::shell_quoted(options.python),
      twins::shell_quoted(script), twins::shell_quoted(spec.task),
      twins::shell_quoted(spec.opt), to_string(spec.twin), warmup + timed,
      warmup, dtype_name(spec.dtype), setting.torch_threads);
  if (spec.device != "cpu")  // the script's default is cpu (and torch 1.13
    cmd += " --device " + twins::shell_quoted(spec.device);  // has no cuda)
  if (lm) {
    cmd += fmt::format(
        " --data {} --ctx {} --batch {}",
        twins::shell_quoted(spec.corpus.empty() ? data::default_corpus_path()
                                                : spec.corpus),
        spec.ctx, spec.batch);
  }
  return cmd + " 2>&1";
}

// Why the script's run gave no time, from its output and exit status: its
// first line, or for a Python that prints nothing (/bin/false) its status.
std::string eager_failure(const BenchOptions& options,
                          const std::string& out, int status) {
  const std::string first = out.substr(0, out.find('\n'));
  if (!first.empty())
    return first;
  return status == -1 || !WIFEXITED(status)
             ? std::string("it did not run to its end")
             : fmt::format("{} exited with status {} and printed nothing",
                           options.python, WEXITSTATUS(status));
}

}  // namespace

double eager_seconds_per_pair_step(const BenchOptions& options,
                                   const PairSpec& spec,
                                   const EagerSetting& setting,
                                   std::string* why) {
  const std::string script = eager_script_path();
  if (script.empty()) {
    if (why)
      *why = "bench/eager_pytorch.py not found";
    return -1;
  }
  const std::string cmd = eager_command(options, spec, setting, script);
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    if (why)
      *why = "cannot start " + options.python;
    return -1;
  }
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe))
    out.append(buf, n);
  const int status = ::pclose(pipe);
  const size_t brace = out.rfind("\n{");
  const std::string last =
      out.substr(brace == std::string::npos ? 0 : brace + 1);
  auto j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (status != 0 || j.is_discarded() || !j.contains("s_per_pair_step")) {
    if (why)
      *why = fmt::format("{} failed: {}", script,
                         eager_failure(options, out, status));
    return -1;
  }
  return j["s_per_pair_step"].get<double>();
}

namespace {

// Throws for a repeat count below 1 or a row name bench_row_names() lacks.
void check_bench_options(const BenchOptions& options) {
  TORCH_CHECK(options.repeats >= 1, "Invalid --repeats: ", options.repeats);
  const auto known = bench_row_names();
  for (const auto& name : options.rows) {
    TORCH_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
                "Unknown bench row: '", name,
                "' (known: ", fmt::format("{}", fmt::join(known, ", ")), ")");
  }
}

// The row of `definition` with its spec at `options`' device and schedule.
BenchRow bench_row(const RowDef& definition, const BenchOptions& options) {
  BenchRow row;
  row.name = definition.name;
  row.threads = definition.threads;
  row.spec = bench_spec(definition.task, definition.dtype, definition.opt);
  if (definition.rope_gqa) {
    row.spec.rope = true;
    row.spec.kv_heads = row.spec.heads / 2;
  }
  row.spec.device = options.device;
  row.matmul = definition.matmul;
  const Schedule schedule = schedule_for(row.spec, options.quick);
  row.spec.steps = schedule.warmup + schedule.segment * options.repeats;
  return row;
}

// Trains the row's pair: the warm-up, then `repeats` timed segments; sets
// its seconds per pair-step (the median segment's), page faults, FLOPs and
// roof.
void time_row(BenchRow& row, const BenchOptions& options) {
  const Schedule schedule = schedule_for(row.spec, options.quick);
  set_threads(row.threads.threads);
  const model::ScopedMatmul matmul(row.matmul);
  twins::Lockstep pair({row.spec}, row.threads.concurrent ? 2 : 1);
  pair.train_to(schedule.warmup);
  pair.check_losses();
  const torch::Device device = twins::resolve_device(row.spec.device);
  synchronize(device);  // the warm-up's kernels are outside the timing
  std::vector<double> per_step;
  const long faults_before = minor_faults();
  for (int r = 0; r < options.repeats; ++r) {
    const auto t0 = Clock::now();
    pair.train_to(pair.done() + schedule.segment);
    pair.check_losses();
    // Reading the losses waits for the stream of their copy only; the
    // segment ends when the row's whole device is idle.
    synchronize(device);
    per_step.push_back(seconds_since(t0) / double(schedule.segment));
  }
  row.s_per_pair_step = median(per_step);
  row.faults_per_pair_step = double(minor_faults() - faults_before) /
                             double(schedule.segment * options.repeats);
  row.flops_per_pair_step = 2 * model::total_flops(step_matmuls(row.spec));
  row.model_gflops = row.flops_per_pair_step / row.s_per_pair_step / 1e9;
  row.roof_gflops = matmul_roof_gflops(row.spec, row.threads,
                                       options.quick ? 2 : 9, row.matmul);
}

// The eager reference's seconds per pair-step of `spec` at each of
// eager_settings(spec.device): the median of several process runs per
// setting, since one run of the same script can land ~40% faster or slower
// than the next (seen with OpenBLAS at 2 threads), so a single run is no
// bar. On a GPU, which nobody shares, three runs (the GPU check's time is
// short).
std::vector<double> eager_times(const BenchOptions& options,
                                const PairSpec& spec) {
  const int runs = options.quick || spec.task == "charlm" ? 1
                   : on_cuda(spec)                        ? 3
                                                          : 5;
  std::vector<double> medians;
  std::string why;
  for (const auto& setting : eager_settings(spec.device)) {
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
      const double seconds =
          eager_seconds_per_pair_step(options, spec, setting, &why);
      TORCH_CHECK(seconds > 0, "--vs-pytorch: ", why);
      times.push_back(seconds);
    }
    medians.push_back(median(times));
  }
  return medians;
}

std::string row_line(const BenchRow& row) {
  return fmt::format(
      "{} on {}: {:.4f} s per pair-step ({}), {:.1f} GFLOP/s of a {:.1f} "
      "GFLOP/s roof, {:.0f} page faults per pair-step",
      row.name, row.spec.device, row.s_per_pair_step, row.threads.name(),
      row.model_gflops, row.roof_gflops, row.faults_per_pair_step);
}

}  // namespace

std::vector<BenchRow> run_bench(const BenchOptions& options,
                                void (*log)(const std::string&)) {
  check_bench_options(options);
  twins::configure_determinism();
  std::vector<BenchRow> rows;
  // The eager times per (task, dtype), measured once and shared by its
  // rows.
  std::map<std::string, std::vector<double>> eager;
  for (const auto& definition : row_defs()) {
    if (!options.rows.empty() &&
        std::find(options.rows.begin(), options.rows.end(), definition.name) ==
            options.rows.end()) {
      continue;
    }
    // The FMA-chain rows are CPU rows: on a GPU, cuBLAS does the products.
    if (definition.matmul != model::Matmul::kBlas && options.device != "cpu") {
      TORCH_CHECK(options.rows.empty(), "bench row '", definition.name,
                  "' times twins' CPU kernels; it does not run with --device ",
                  options.device);
      continue;
    }
    BenchRow row = bench_row(definition, options);
    time_row(row, options);
    if (options.vs_pytorch) {
      const std::string key = row.spec.task + dtype_name(row.spec.dtype);
      if (!eager.count(key))
        eager[key] = eager_times(options, row.spec);
      row.eager_s = eager[key];
    }
    if (log)
      log(row_line(row));
    rows.push_back(row);
  }
  return rows;
}

std::string format_bench_table(const std::vector<BenchRow>& rows) {
  const std::vector<EagerSetting> settings = eager_settings();
  size_t name_width = 15;  // the longest row name, at least the paper's
  for (const auto& r : rows)
    name_width = std::max(name_width, r.name.size());
  std::string out =
      fmt::format("{:<{}} {:<22} {:>11} {:>9} {:>9} {:>7}", "row", name_width,
                  "threads", "s/pair-step", "GFLOP/s", "roof", "% roof");
  for (const auto& e : settings) {
    out += fmt::format(" {:>10}", "eager " + e.name());
  }
  out += fmt::format(" {:>8}\n", "speedup");
  for (const auto& r : rows) {
    out += fmt::format("{:<{}} {:<22} {:>11.4f} {:>9.1f} {:>9.1f} {:>6.0f}%",
                       r.name, name_width, r.threads.name(), r.s_per_pair_step,
                       r.model_gflops, r.roof_gflops,
                       100 * r.model_gflops / r.roof_gflops);
    for (size_t i = 0; i < settings.size(); ++i) {
      out += i < r.eager_s.size() ? fmt::format(" {:>10.4f}", r.eager_s[i])
                                  : fmt::format(" {:>10}", "-");
    }
    out += r.eager_s.empty()
               ? fmt::format(" {:>8}\n", "-")
               : fmt::format(" {:>7.2f}x\n", r.speedup_vs_best_eager());
  }
  out +=
      "s/pair-step: median over timed segments after warm-up; GFLOP/s: "
      "matrix-multiply FLOPs of both copies (model/flops.h) per second; "
      "roof: the same products replayed back to back at the row's threads; "
      "eager T/B: bench/eager_pytorch.py with T LibTorch and B OpenBLAS "
      "threads, s/pair-step, median of 5 runs (1 for charlm); speedup: best "
      "eager / ours.\n";
  return out;
}

nlohmann::json bench_to_json(const std::vector<BenchRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json row = {{"row", r.name},
                          {"task", r.spec.task},
                          {"dtype", dtype_name(r.spec.dtype)},
                          {"opt", r.spec.opt},
                          {"twin", to_string(r.spec.twin)},
                          {"model",
                           {{"depth", r.spec.depth},
                            {"d_model", r.spec.d_model},
                            {"heads", r.spec.heads},
                            {"kv_heads", r.spec.kv_head_count()},
                            {"rope", r.spec.rope},
                            {"mlp", r.spec.mlp}}},
                          {"concurrent_copies", r.threads.concurrent},
                          {"threads_per_copy", r.threads.threads},
                          {"torch_threads", r.threads.threads},
                          {"openblas_threads", r.threads.threads},
                          {"device", r.spec.device},
                          {"matmul", model::matmul_name(r.matmul)},
                          {"s_per_pair_step", r.s_per_pair_step},
                          {"faults_per_pair_step", r.faults_per_pair_step},
                          {"flops_per_pair_step", r.flops_per_pair_step},
                          {"model_gflops", r.model_gflops},
                          {"roof_gflops", r.roof_gflops},
                          {"fraction_of_roof", r.model_gflops / r.roof_gflops}};
    if (!r.eager_s.empty()) {
      // "torch1_openblas2": seconds per pair-step at that setting.
      nlohmann::json e;
      const auto settings = eager_settings(r.spec.device);
      for (size_t i = 0; i < r.eager_s.size() && i < settings.size(); ++i) {
        e[fmt::format("torch{}_openblas{}", settings[i].torch_threads,
                      settings[i].openblas_threads)] = r.eager_s[i];
      }
      row["eager_s_per_pair_step"] = e;
      row["speedup_vs_best_eager"] = r.speedup_vs_best_eager();
    }
    j.push_back(row);
  }
  return j;
}

// ---------------------------------------------------------------------------
// The benchmark's file

namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  }
  return "unknown";  // not Linux, or no model name: the file still says so
}

}  // namespace

std::string BenchMachine::line() const {
  return fmt::format("{} ({} cores), LibTorch {}, {}", cpu, cores,
                     TORCH_VERSION, date);
}

BenchMachine bench_machine() {
  BenchMachine m;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", &tm);
  m.date = date;
  m.cpu = cpu_model();
  m.cores = std::thread::hardware_concurrency();
  return m;
}

void check_bench_output(const std::string& path) {
  twins::check_output_file(path, "--out");
  const std::string ending = ".jsonl";
  TORCH_CHECK(path.size() < ending.size() ||
                  path.compare(path.size() - ending.size(), ending.size(),
                               ending) != 0,
              "--out '", path,
              "': a benchmark file is one JSON object (.json); .jsonl names "
              "a results file");
  if (!std::filesystem::exists(path))
    return;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  TORCH_CHECK(j.is_object() && j.contains("rows") &&
                  j.contains("torch_version"),
              "--out '", path,
              "' exists and is not a twin-run benchmark file (one JSON object "
              "with its machine and rows): choose another name or remove it");
}

void write_bench_file(const std::string& path, const BenchMachine& machine,
                      const std::vector<BenchRow>& rows, bool quick,
                      const nlohmann::json& kernels) {
  // The BLAS and its kernels (OpenBLAS's core): bench/peers.py gives the
  // eager LibTorch of the same library the same core.
  const twins::NumericEnv& env = twins::numeric_env("cpu");
  nlohmann::json j = {
      {"date", machine.date},   {"cpu", machine.cpu},
      {"cores", machine.cores}, {"torch_version", TORCH_VERSION},
      {"blas", env.blas},       {"blas_core", env.blas_core},
      {"quick", quick},         {"rows", bench_to_json(rows)}};
  if (!kernels.is_null())
    j["kernels"] = kernels;
  twins::write_text_atomically(path, j.dump(2) + "\n");
}

namespace {

// Seconds per call of `work`: the median of `repeats` runs of enough calls
// to fill about 20 ms each, counted from a first call that warms up.
double seconds_per_call(int repeats, const std::function<void()>& work) {
  const auto t0 = Clock::now();
  work();
  const int calls = std::max(1, int(0.02 / std::max(seconds_since(t0), 1e-7)));
  std::vector<double> per_call;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i)
      work();
    per_call.push_back(seconds_since(start) / calls);
  }
  return median(per_call);
}

void start_kernel_timing(int repeats) {
  TORCH_CHECK(model::best_isa() != model::Isa::kNone,
              "--kernels: this CPU has neither AVX2 with FMA nor AVX-512, "
              "so twins' kernels do not run here");
  TORCH_CHECK(repeats >= 1, "Invalid --repeats: ", repeats);
  twins::configure_determinism();
  set_threads(1);
}

}  // namespace

std::vector<KernelFigure> kernel_figures(const std::string& task,
                                         torch::Dtype dtype, int repeats) {
  start_kernel_timing(repeats);
  const PairSpec spec = bench_spec(task, dtype, "adam");
  const auto shapes = step_matmuls(spec);
  const double step_flops = model::total_flops(shapes);
  const double peak = model::fma_peak_gflops(dtype);
  std::vector<KernelFigure> out;
  for (const auto& sh : shapes) {
    if (sh.batch != 1)  // attention's, done by the small-attention kernel
      continue;
    auto same = [&](const KernelFigure& f) {
      return f.m == sh.m && f.k == sh.k && f.n == sh.n &&
             f.a_transposed == sh.a_transposed;
    };
    auto it = std::find_if(out.begin(), out.end(), same);
    if (it != out.end()) {
      ++it->count;
      it->share_of_step += sh.flops() / step_flops;
      continue;
    }
    KernelFigure f;
    f.m = sh.m, f.k = sh.k, f.n = sh.n;
    f.a_transposed = sh.a_transposed;
    f.share_of_step = sh.flops() / step_flops;
    f.fma_peak_gflops = peak;
    const auto opts = torch::TensorOptions().dtype(dtype);
    // A in the step's layout: a weight gradient's dY^T is dY read in place.
    const torch::Tensor a = sh.a_transposed
                                ? torch::randn({sh.k, sh.m}, opts).t()
                                : torch::randn({sh.m, sh.k}, opts);
    const torch::Tensor b = torch::randn({sh.k, sh.n}, opts);
    torch::Tensor c;
    auto rate = [&](const std::function<void()>& product) {
      return sh.flops() / 1e9 / seconds_per_call(repeats, product);
    };
    // Each call makes its output, as the step's products do (a new
    // tensor, from memory the allocator keeps): BLAS and kernel alike.
    f.blas_gflops = rate([&] { c = torch::mm(a, b); });
    f.chain_gflops = rate([&] { c = model::chain_mm(a, b); });
    out.push_back(f);
  }
  return out;
}

StepProducts step_products(const std::string& task, torch::Dtype dtype,
                           int repeats) {
  start_kernel_timing(repeats);
  PairSpec spec = bench_spec(task, dtype, "adam");
  const Schedule schedule = schedule_for(spec, false);
  spec.steps = schedule.warmup + schedule.segment * repeats;
  const model::ScopedMatmul matmul(model::Matmul::kFmaChain);
  twins::Lockstep pair({spec}, 1);  // one copy after the other
  pair.train_to(schedule.warmup);
  pair.check_losses();
  // Per copy-step: a segment trains both copies `segment` steps each.
  const double copy_steps = 2.0 * double(schedule.segment);
  std::vector<double> flops, calls, product_s, step_s, rates;
  for (int r = 0; r < repeats; ++r) {
    model::start_kernel_clock();
    const auto t0 = Clock::now();
    pair.train_to(pair.done() + schedule.segment);
    const double wall = seconds_since(t0);
    const model::KernelClock clock = model::stop_kernel_clock();
    pair.check_losses();
    TORCH_CHECK(clock.calls > 0 && clock.seconds > 0,
                "bench: no kernel call in the step of ", task);
    flops.push_back(clock.flops / copy_steps);
    calls.push_back(double(clock.calls) / copy_steps);
    product_s.push_back(clock.seconds / copy_steps);
    step_s.push_back(wall / copy_steps);
    rates.push_back(clock.flops / clock.seconds / 1e9);
  }
  StepProducts out;
  out.flops_per_step = median(flops);
  out.calls_per_step = median(calls);
  out.product_seconds = median(product_s);
  out.step_seconds = median(step_s);
  out.gflops = median(rates);
  out.fma_peak_gflops = model::fma_peak_gflops(dtype);
  return out;
}

std::string format_step_products(const StepProducts& f) {
  return fmt::format(
      "inside the step: {:.1f} GFLOP/s, {:.0f}% of the FMA peak ({:.1f} "
      "GFLOP/s): {:.0f} kernel calls, {:.1f} MFLOP in {:.2f} ms of a {:.2f} ms "
      "copy-step ({:.0f}%); the kernels' clock around each call while one "
      "pair trains on one thread, copy after copy, medians of the segments\n",
      f.gflops, 100 * f.gflops / f.fma_peak_gflops, f.fma_peak_gflops,
      f.calls_per_step, f.flops_per_step / 1e6, 1e3 * f.product_seconds,
      1e3 * f.step_seconds, 100 * f.product_seconds / f.step_seconds);
}

nlohmann::json step_products_to_json(const StepProducts& f) {
  return {{"flops_per_copy_step", f.flops_per_step},
          {"kernel_calls_per_copy_step", f.calls_per_step},
          {"product_s_per_copy_step", f.product_seconds},
          {"s_per_copy_step", f.step_seconds},
          {"gflops", f.gflops},
          {"fma_peak_gflops", f.fma_peak_gflops}};
}

std::string format_kernel_table(const std::vector<KernelFigure>& figures,
                                const std::string& title) {
  std::string out = title + "\n";
  out += fmt::format(
      "{:>6} {:>6} {:>6} {:>2} {:>6} {:>7} {:>10} {:>10} {:>7} {:>7}\n", "m",
      "k", "n", "A", "count", "% step", "blas", "fma-chain", "% peak",
      "vs blas");
  for (const auto& f : figures) {
    out += fmt::format(
        "{:>6} {:>6} {:>6} {:>2} {:>6} {:>6.1f}% {:>10.1f} {:>10.1f} {:>6.0f}% "
        "{:>6.2f}x\n",
        f.m, f.k, f.n, f.a_transposed ? "T" : "", f.count,
        100 * f.share_of_step, f.blas_gflops, f.chain_gflops,
        100 * f.chain_gflops / f.fma_peak_gflops,
        f.chain_gflops / f.blas_gflops);
  }
  if (!figures.empty()) {
    out += fmt::format(
        "(m x k)(k x n) products of one model step, one thread; A: T where "
        "the step reads it transposed (a weight's gradient dY^T X); GFLOP/s, "
        "medians; % peak: of one core's FMA peak, {:.1f} GFLOP/s ({} "
        "kernels' FMAs on registers); % step: of the step's matmul FLOPs\n",
        figures.front().fma_peak_gflops, model::isa_name(model::best_isa()));
  }
  return out;
}

std::vector<SiluFigure> silu_figures(const std::string& task,
                                     torch::Dtype dtype, int repeats) {
  start_kernel_timing(repeats);
  const PairSpec spec = bench_spec(task, dtype, "adam");
  const StepShape step = step_shape(spec);
  const int64_t d = step.cfg.d_model, f = step.cfg.mlp;
  std::vector<int64_t> rows;  // each block's MLP rows, once each
  for (const auto& sh : step_matmuls(spec)) {
    if (sh.batch == 1 && sh.k == d && sh.n == f &&
        std::find(rows.begin(), rows.end(), sh.m) == rows.end())
      rows.push_back(sh.m);
  }
  namespace F = torch::nn::functional;
  const auto opts = torch::TensorOptions().dtype(dtype);
  std::vector<SiluFigure> out;
  for (int64_t m : rows) {
    const torch::Tensor x = torch::randn({m, d}, opts);
    const torch::Tensor w1t = torch::randn({d, f}, opts) * 0.2;
    const torch::Tensor gy = torch::randn({m, d}, opts);
    const torch::Tensor w2 = torch::randn({d, f}, opts) * 0.2;
    const torch::Tensor h = torch::mm(x, w1t);
    const model::SiluProduct hidden = model::chain_mm_silu(x, w1t);
    torch::Tensor c;
    auto ms = [&](const std::function<void()>& work) {
      return 1e3 * seconds_per_call(repeats, work);
    };
    SiluFigure fwd{"forward", m, d, f};
    fwd.blas_ms = ms([&] { c = F::silu(torch::mm(x, w1t)); });
    fwd.chain_ms = ms([&] { c = F::silu(model::chain_mm(x, w1t)); });
    fwd.fused_ms = ms([&] { c = model::chain_mm_silu(x, w1t).act; });
    SiluFigure bwd{"backward", m, d, f};
    bwd.blas_ms = ms([&] { c = torch::silu_backward(torch::mm(gy, w2), h); });
    bwd.chain_ms =
        ms([&] { c = torch::silu_backward(model::chain_mm(gy, w2), h); });
    bwd.fused_ms = ms(
        [&] { c = model::chain_mm_silu_grad(gy, w2, hidden.act, hidden.sig); });
    out.push_back(fwd);
    out.push_back(bwd);
  }
  return out;
}

std::string format_silu_table(const std::vector<SiluFigure>& figures) {
  std::string out =
      fmt::format("{:>9} {:>6} {:>6} {:>6} {:>10} {:>10} {:>10}\n", "SiLU", "m",
                  "k", "n", "blas", "fma-chain", "fused");
  for (const auto& f : figures) {
    out +=
        fmt::format("{:>9} {:>6} {:>6} {:>6} {:>10.3f} {:>10.3f} {:>10.3f}\n",
                    f.pass, f.m, f.k, f.n, f.blas_ms, f.chain_ms, f.fused_ms);
  }
  out +=
      "ms per call, one thread, medians: the MLP's product and SiLU (forward: "
      "x W1^T, SiLU; backward: dY W2, times SiLU'); blas and fma-chain: the "
      "product, then LibTorch's silu / silu_backward; fused: SiLU in the "
      "kernels' stores\n";
  return out;
}

nlohmann::json silu_to_json(const std::vector<SiluFigure>& figures) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : figures) {
    j.push_back({{"pass", f.pass},
                 {"m", f.m},
                 {"k", f.k},
                 {"n", f.n},
                 {"blas_ms", f.blas_ms},
                 {"fma_chain_ms", f.chain_ms},
                 {"fused_ms", f.fused_ms}});
  }
  return j;
}

nlohmann::json kernels_to_json(const std::vector<KernelFigure>& figures) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : figures) {
    j.push_back({{"m", f.m},
                 {"k", f.k},
                 {"n", f.n},
                 {"a_transposed", f.a_transposed},
                 {"count", f.count},
                 {"share_of_step", f.share_of_step},
                 {"blas_gflops", f.blas_gflops},
                 {"fma_chain_gflops", f.chain_gflops},
                 {"fma_peak_gflops", f.fma_peak_gflops}});
  }
  return j;
}

}  // namespace bench
