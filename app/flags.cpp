#include "app/flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "data/task.h"
#include "model/gemm.h"
#include "twins/spec.h"

namespace app {

namespace {
std::string real_problem(const std::string& item, double* value);
std::string seed_problem(const std::string& item, uint64_t* value);
}  // namespace

CLI::Validator whole_number(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        const bool ok = !text.empty() && end && *end == '\0' &&
                        errno != ERANGE && v >= lo && v <= hi;
        return ok ? std::string()
                  : fmt::format("{} is not a whole number from {} to {}", text,
                                lo, hi);
      },
      fmt::format("INT in [{} - {}]", lo, hi));
}

namespace {

// A real number (real_problem's checks) for which `ok` holds; otherwise
// "<text> <fails>".
CLI::Validator real_where(bool (*ok)(double), const char* fails,
                          const char* name) {
  return CLI::Validator(
      [ok, fails](std::string& text) -> std::string {
        double v = 0;
        const std::string problem = real_problem(text, &v);
        if (!problem.empty())
          return problem;
        return ok(v) ? std::string() : fmt::format("{} {}", text, fails);
      },
      name);
}

}  // namespace

CLI::Validator positive_real() {
  return real_where([](double v) { return v > 0; }, "is not a positive number",
                    "POSITIVE");
}

CLI::Validator real_above_one() {
  return real_where([](double v) { return v > 1; }, "is not above 1",
                    "NUMBER > 1");
}

CLI::Validator non_negative_real() {
  return real_where([](double v) { return v >= 0; }, "is negative",
                    "NUMBER >= 0");
}

CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& text) {
        uint64_t v = 0;
        return seed_problem(text, &v);
      },
      "");  // the help's UINT says it
}

CLI::Option* add_protocol_flag(CLI::App& app, std::string& out,
                               const std::string& default_text) {
  return app
      .add_option("--protocol", out,
                  "The recipe of every pair (docs/protocol.md §2a): "
                  "paper-cpu = the paper's CPU scripts (Table 3, D.5: "
                  "PyTorch's module init, float32 gauge and noise draws); "
                  "paper-gpu = its GPU suite (Table 9: one generator draws "
                  "the weights parameter by parameter, float64 draws); twins "
                  "= PyTorch's module init with float64 draws (a gauge exact "
                  "to float64 rounding) [default: " +
                      default_text + "]")
      ->check(CLI::IsMember({"paper-cpu", "paper-gpu", "twins"}));
}

CLI::Option* add_stop_after_flag(CLI::App& app, int64_t& out) {
  return app
      .add_option("--stop-after", out,
                  "Train only through this step, with the data stream, the "
                  "draws and the checkpoints of the full --steps run (e.g. "
                  "the step-1 columns of a 3000-step table) [default: the "
                  "last step]")
      ->check(whole_number(1, kMaxSteps));
}

namespace {

// "[default: M for mod<p>, C for charlm]": a flag's two task defaults.
std::string both(int64_t m, int64_t c) {
  return fmt::format("[default: {} for mod<p>, {} for charlm]", m, c);
}

// The model's shape: blocks, width, heads, rotary positions, MLP width.
void add_shape_flags(CLI::App& app, sweep::PlanRequest& p) {
  const data::TaskDefaults mod = data::task_defaults("mod47");
  const data::TaskDefaults lm = data::task_defaults("charlm");
  app.add_option("--depth", p.depth,
                 "Transformer blocks " + both(mod.depth, lm.depth))
      ->check(whole_number(1, 1000));
  app.add_option("--d-model", p.d_model,
                 "Residual width d, divisible by --heads " +
                     both(mod.d_model, lm.d_model))
      ->check(whole_number(1, 65536));
  app.add_option("--heads", p.heads,
                 "Attention heads per block " + both(mod.heads, lm.heads))
      ->check(whole_number(1, 4096));
  app.add_option("--kv-heads", p.kv_heads,
                 "Key/value heads per block (grouped-query attention), "
                 "dividing --heads [default: as many as --heads]")
      ->check(whole_number(1, 4096));
  app.add_flag("--rope", p.rope,
               "Rotary positions on queries and keys instead of the learned "
               "positional parameter (docs/protocol.md §3)");
  app.add_option("--rope-base", p.rope_base,
                 "--rope: the frequency base [default: 10000]")
      ->check(real_above_one());
  app.add_option("--mlp", p.mlp,
                 fmt::format("MLP hidden width [default: {} x d-model]",
                             data::default_mlp(1)))
      ->check(whole_number(1, 1 << 24));
}

}  // namespace

void add_pair_flags(CLI::App& app, sweep::PlanRequest& p) {
  const data::TaskDefaults mod = data::task_defaults("mod47");
  const data::TaskDefaults lm = data::task_defaults("charlm");
  app.add_option("--task", p.task,
                 "Task: mod<p> = modular addition (a + b) mod p, e.g. mod47, "
                 "full batch; charlm = character LM on tiny-Shakespeare "
                 "(or --data), minibatches (docs/protocol.md §4)")
      ->capture_default_str();
  add_protocol_flag(app, p.protocol,
                    "paper-cpu in float32, twins in float64");
  app.add_option("--steps", p.steps,
                 "Training steps " + both(mod.steps, lm.steps))
      ->check(whole_number(1, kMaxSteps));
  add_stop_after_flag(app, p.stop_after);
  app.add_option("--lr", p.lr,
                 "Learning rate for every optimizer of the run [default: "
                 "each optimizer's for the task, see --list-optimizers]")
      ->check(positive_real());
  app.add_option("--dtype", p.dtype,
                 "float32 or float64 [default: float32 on cpu, float64 on "
                 "cuda]");
  app.add_option("--device", p.device, "cpu, cuda or cuda:N")
      ->capture_default_str();
  add_shape_flags(app, p);
  app.add_option("--data-seed", p.data_seed,
                 "Seed of the mod<p> split / the charlm batch-stream "
                 "generator")
      ->capture_default_str()
      ->check(seed_number());
  app.add_option("--ctx", p.ctx,
                 fmt::format("charlm: context length (characters) "
                             "[default: {}]",
                             lm.ctx))
      ->check(whole_number(1, 1 << 20));
  app.add_option("--batch", p.batch,
                 fmt::format("charlm: windows per training step [default: "
                             "{}]",
                             lm.batch))
      ->check(whole_number(1, 1 << 20));
  app.add_option("--data", p.corpus,
                 "charlm: UTF-8 text file to train on [default: the shipped "
                 "data/tinyshakespeare.txt]");
}

void add_opt_args(CLI::App& app, std::string& opt_args) {
  app.add_option("--opt-args", opt_args,
                 "Keyword arguments of the Python rules in --opt (torch:NAME, "
                 "py:MODULE:NAME, py:FILE.py:NAME), one JSON object, e.g. '{\"momentum\": "
                 "0.9}'; a rule's own arguments (torch:SGD{...}) win "
                 "(docs/extending.md)")
      ->check(non_empty());
}

void add_pair_list_flags(CLI::App& app, sweep::CommandRequest& r,
                         std::string& opt_args, const std::string& out_help) {
  sweep::PlanRequest& p = r.plan;
  add_names(app, "--opt", p.opts,
            "Optimizers, comma-separated (see --list-optimizers; Python "
            "rules: torch:NAME, py:MODULE:NAME, py:FILE.py:NAME). Without "
            "--opt and --twin: "
            "the seven Table-3 pairs");
  add_opt_args(app, opt_args);
  add_names(app, "--twin", p.twins,
            "Twin kinds, comma-separated: gauge (per-head orthogonal A_h on "
            "W_Q/W_K rows; under --rope a rotation per frequency pair), "
            "identity (A_h = I, must stay exactly 0), noise (W_Q, W_K + "
            "scale N(0,1)), gauge-vo (orthogonal B_h on W_V rows and W_O "
            "columns), gauge-all (both gauges), gauge-full (--rope only: the "
            "unrestricted A_h, not a symmetry), roundtrip (gauge-all's "
            "rotations applied and undone: only their rounding, the "
            "verdict's yardstick). Default gauge when --opt is given");
  add_seeds(app, "--init-seed", p.init_seeds,
            "Seeds of the base model's initialisation (torch::manual_seed "
            "before the build), comma-separated")
      ->default_str(fmt::format("{}", fmt::join(p.init_seeds, ",")));
  add_seeds(app, "--twin-seed", p.twin_seeds,
            "Seeds of the gauge / noise draws, comma-separated [default: 777 "
            "for gauge twins, 888 for noise twins]");
  add_reals(app, "--noise-scale", p.noise_scales,
            "Std of the W_Q/W_K perturbation of noise twins, comma-separated")
      ->default_str(twins::format_scale(p.noise_scales.front()));
  add_reals(app, "--p", p.adam_ps,
            "Exponents in [0, 1] of the Adam-p dial for a bare adam-p in "
            "--opt, comma-separated (one pair set per p; adam-p0.5 names one "
            "directly) [default: 0.5]");
  add_pair_flags(app, p);
  add_engine_flags(app, r, out_help);
}

namespace {

// Checkpoints (docs/clusters.md): by time for long runs, never for runs
// of seconds.
void add_checkpoint_flags(CLI::App& app, twins::StatePolicy& state) {
  state.every_seconds = 60 * 10;
  app.add_option_function<double>(
         "--checkpoint-minutes",
         [&state](double m) { state.every_seconds = 60 * m; },
         "Write each group's whole state (a checkpoint, in <out>.ckpt/) "
         "at least this often while it trains, and when SIGTERM, SIGUSR1, "
         "SIGINT or SIGHUP asks the run to stop (then exit 75, or 130 for SIGINT); a "
         "rerun resumes each group from its checkpoint with the same bits. "
         "0: never by time [default: 10]")
      ->check(non_negative_real());
  app.add_option_function<int64_t>(
         "--checkpoint-every",
         [&state](int64_t n) { state.every_steps = n; },
         "Also write it at least every N steps (0: not by steps) [default: "
         "0]")
      ->check(whole_number(0, kMaxSteps));
  app.add_flag_callback(
      "--checkpoint-restart", [&state] { state.restart = true; },
      "Remove a checkpoint that cannot be used (damaged, or of another "
      "configuration) and start its group at step 0, instead of stopping "
      "with an error");
}

}  // namespace

void add_engine_flags(CLI::App& app, sweep::CommandRequest& r,
                      const std::string& out_help) {
  sweep::EngineOptions& e = r.engine;
  app.add_option("--out", e.results_path,
                 out_help +
                     "; rerunning with the same file resumes it (pairs "
                     "already recorded are skipped). Missing directories "
                     "are created");
  // Not given, either comes from the CPUs of a SLURM task
  // (sweep::resolve_parallelism).
  r.jobs_given = r.threads_given = false;
  app.add_option("--jobs", e.jobs,
                 "Groups of pairs run at once in this process (a group: the "
                 "pairs that share copy 1) [in a SLURM task, default: "
                 "min(groups, SLURM_CPUS_PER_TASK)]")
      ->capture_default_str()
      ->check(whole_number(1, 1024))
      ->each([&r](const std::string&) { r.jobs_given = true; });
  e.threads = sweep::default_threads(r.kind);
  app.add_option("--threads", e.threads,
                 "Models of a group trained at once, each on one thread; "
                 "records are bitwise the same for any value [in a SLURM "
                 "task, default: SLURM_CPUS_PER_TASK / jobs]")
      ->capture_default_str()
      ->check(whole_number(1, 1024))
      ->each([&r](const std::string&) { r.threads_given = true; });
  app.add_flag_callback(
      "--no-share", [&e] { e.share = false; },
      "Train copy 1 once per pair instead of once per group of pairs that "
      "share it (same records, more work: for comparison and debugging)");
  app.add_flag("--quiet", e.quiet, "No progress lines");
  app.add_flag_callback(
      "--no-memory-check", [&e] { e.check_memory = false; },
      "Run even when the memory estimate exceeds the memory this process "
      "may use (the machine's, or its cgroup's limit: SLURM's --mem)");
  add_checkpoint_flags(app, e.state);
  add_allow_mixed_env_flag(app, e.allow_mixed_env);
  // Read in main() before anything else (twins::enter_portable_mode):
  // OpenBLAS chooses its kernels when it loads. Declared here for --help.
  app.add_flag_callback(
      "--portable-kernels", [] {},
      "Pin the kernels every AVX2 machine runs (OpenBLAS Haswell, ATen "
      "avx2; twin-run re-executes itself with OPENBLAS_CORETYPE and "
      "ATEN_CPU_CAPABILITY set), so that machines whose CPUs would choose "
      "others write the same bits; the same as TWINS_PORTABLE=1 "
      "(docs/output-format.md)");
  // Process-wide, like the kernels above: set as the flag is parsed, before
  // any pair is built or any record's numeric environment is read.
  app.add_option_function<std::string>(
         "--matmul",
         [](const std::string& name) {
           model::set_matmul(model::parse_matmul(name));
         },
         "How the model's products run on the CPU: blas (LibTorch's "
         "matmul, OpenBLAS; the default, and what the paper's tables were "
         "made with) or fma-chain (twins' own AVX-512 / AVX2 kernels: each "
         "entry one chain of fused multiply-adds in index order, the same "
         "bits on every such CPU, other float32 bits than blas), or auto "
         "(fma-chain where the CPU has AVX2 and FMA); records name it in "
         "numeric_env.matmul (docs/performance.md)")
      ->check(CLI::IsMember({"blas", "fma-chain", "auto"}))
      ->default_str("blas");
  app.add_option("--save-models", e.save_models,
                 "Save both copies of every pair here when it ends (one "
                 "directory per pair: model1.pt, model2.pt, spec.json); "
                 "`twin-run merge --models DIR` reads them back");
}

CLI::Option* add_allow_mixed_env_flag(CLI::App& app, bool& out) {
  return app.add_flag(
      "--allow-mixed-env", out,
      "Mix records written under another numeric environment (LibTorch, "
      "BLAS and its core type, ATen's CPU capability, GPU) with a warning "
      "instead of stopping: their float bits need not agree "
      "(docs/output-format.md)");
}

// ---------------------------------------------------------------------------
// Lists

namespace {

using CLI::ValidationError;

// The next comma of `text` from `start` that separates elements: not one
// inside a JSON object, array or string (a Python rule's arguments,
// torch:SGD{"momentum":0.9,"nesterov":true}); npos when none.
size_t separator(const std::string& text, size_t start) {
  int depth = 0;
  bool quoted = false;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (c == ',' && depth == 0) {
      return i;
    }
  }
  return std::string::npos;
}

// The elements of a comma-separated `text`; none may be empty or repeated.
std::vector<std::string> split_list(const std::string& flag,
                                    const std::string& text) {
  if (text.empty())
    throw ValidationError(flag, "empty value");
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = separator(text, start);
    std::string item = text.substr(start, comma - start);
    if (item.empty())
      throw ValidationError(flag, "empty element in '" + text + "'");
    // Twice is a typo: it would run (or measure) the same thing twice.
    if (std::find(out.begin(), out.end(), item) != out.end()) {
      throw ValidationError(flag,
                            "'" + item + "' appears twice in '" + text + "'");
    }
    out.push_back(item);
    if (comma == std::string::npos)
      return out;
    start = comma + 1;
  }
}

bool digits(const std::string& s, size_t most) {
  return !s.empty() && s.size() <= most &&
         s.find_first_not_of("0123456789") == std::string::npos;
}

std::string name_item(const std::string&, const std::string& item) {
  return item;
}

// Why `item` is not a seed, or empty when it is one. Every uint64 seeds
// torch::manual_seed; digits only, so that "-1" is not taken for 2^64 - 1.
std::string seed_problem(const std::string& item, uint64_t* value) {
  errno = 0;
  char* end = nullptr;
  const bool ok = digits(item, 20);
  const unsigned long long v = ok ? std::strtoull(item.c_str(), &end, 10) : 0;
  if (!ok || errno == ERANGE || !end || *end != '\0') {
    return fmt::format("'{}' is not a seed (a whole number from 0 to {})",
                       item, std::numeric_limits<uint64_t>::max());
  }
  *value = v;
  return "";
}

uint64_t seed_item(const std::string& flag, const std::string& item) {
  uint64_t v = 0;
  const std::string problem = seed_problem(item, &v);
  if (!problem.empty())
    throw ValidationError(flag, problem);
  return v;
}

// Why `item` is not a finite double, or empty when it is one: out of
// range (beyond +-1.8e308 or nearer 0 than 2.2e-308 but not 0) is said
// as such.
std::string real_problem(const std::string& item, double* value) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(item.c_str(), &end);
  if (item.empty() || !end || *end != '\0' || std::isnan(v) ||
      item.find_first_of(" \t\n") != std::string::npos)
    return fmt::format("'{}' is not a number", item);
  if (errno == ERANGE || std::isinf(v)) {
    return fmt::format(
        "'{}' is out of range (a number is 0 or of magnitude {:g} to {:g})",
        item, std::numeric_limits<double>::min(),
        std::numeric_limits<double>::max());
  }
  *value = v;
  return "";
}

double real_item(const std::string& flag, const std::string& item) {
  double v = 0;
  const std::string problem = real_problem(item, &v);
  if (!problem.empty())
    throw ValidationError(flag, problem);
  return v;
}

int64_t step_item(const std::string& flag, const std::string& item) {
  if (!digits(item, 10)) {
    throw ValidationError(flag, fmt::format("'{}' is not a step (0 to {})",
                                            item, kMaxSteps));
  }
  return std::stoll(item);
}

template <typename T>
CLI::Option* add_list(CLI::App& app, const std::string& flag,
                      std::vector<T>& out, const std::string& help,
                      T (*parse_item)(const std::string&, const std::string&)) {
  return app.add_option_function<std::string>(
      flag,
      [flag, &out, parse_item](const std::string& text) {
        std::vector<T> items;
        for (const auto& item : split_list(flag, text))
          items.push_back(parse_item(flag, item));
        out = std::move(items);
      },
      help);
}

}  // namespace

CLI::Option* add_names(CLI::App& app, const std::string& flag,
                       std::vector<std::string>& out, const std::string& help) {
  return add_list(app, flag, out, help, name_item);
}

CLI::Option* add_seeds(CLI::App& app, const std::string& flag,
                       std::vector<uint64_t>& out, const std::string& help) {
  return add_list(app, flag, out, help, seed_item);
}

CLI::Option* add_reals(CLI::App& app, const std::string& flag,
                       std::vector<double>& out, const std::string& help) {
  return add_list(app, flag, out, help, real_item);
}

CLI::Option* add_steps(CLI::App& app, const std::string& flag,
                       std::vector<int64_t>& out, const std::string& help) {
  return add_list(app, flag, out, help, step_item);
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("empty value") : std::string();
      },
      "");
}

}  // namespace app
