#include "app/flags.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "data/task.h"

namespace app {

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

CLI::Validator positive_real() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok =
            !text.empty() && end && *end == '\0' && std::isfinite(v) && v > 0;
        return ok ? std::string()
                  : fmt::format("{} is not a positive number", text);
      },
      "POSITIVE");
}

void add_pair_flags(CLI::App& app, sweep::PlanRequest& p) {
  const data::TaskDefaults mod = data::task_defaults("mod47");
  const data::TaskDefaults lm = data::task_defaults("charlm");
  auto both = [](int64_t m, int64_t c) {
    return fmt::format("[default: {} for mod<p>, {} for charlm]", m, c);
  };
  app.add_option("--task", p.task,
                 "Task: mod<p> = modular addition (a + b) mod p, e.g. mod47, "
                 "full batch; charlm = character LM on tiny-Shakespeare "
                 "(or --data), minibatches (docs/protocol.md §4)")
      ->capture_default_str();
  app.add_option("--steps", p.steps,
                 "Training steps " + both(mod.steps, lm.steps))
      ->check(whole_number(1, kMaxSteps));
  app.add_option("--lr", p.lr,
                 "Learning rate for every optimizer of the run [default: "
                 "each optimizer's for the task, see --list-optimizers]")
      ->check(positive_real());
  app.add_option("--dtype", p.dtype,
                 "float32 or float64 [default: float32 on cpu, float64 on "
                 "cuda]");
  app.add_option("--device", p.device, "cpu, cuda or cuda:N")
      ->capture_default_str();
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
  app.add_option("--mlp", p.mlp,
                 fmt::format("MLP hidden width [default: {} x d-model]",
                             data::default_mlp(1)))
      ->check(whole_number(1, 1 << 24));
  app.add_option("--data-seed", p.data_seed,
                 "Seed of the mod<p> split / the charlm batch-stream "
                 "generator")
      ->capture_default_str();
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

void add_engine_flags(CLI::App& app, EngineFlags& f,
                      const std::string& out_help, int threads) {
  app.add_option("--out", f.out,
                 out_help +
                     "; rerunning with the same file resumes it (pairs "
                     "already recorded are skipped). Missing directories "
                     "are created");
  app.add_option("--jobs", f.jobs,
                 "Groups of pairs run at once in this process (a group: the "
                 "pairs that share copy 1)")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  f.threads = threads;
  app.add_option("--threads", f.threads,
                 "Models of a group trained at once, each on one thread; "
                 "records are bitwise the same for any value")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  app.add_flag("--no-share", f.no_share,
               "Train copy 1 once per pair instead of once per group of "
               "pairs that share it (same records, more work: for "
               "comparison and debugging)");
  app.add_flag("--quiet", f.quiet, "No progress lines");
  app.add_flag("--no-memory-check", f.no_memory_check,
               "Run even when the memory estimate exceeds this machine's "
               "memory");
  app.add_option("--save-models", f.save_models,
                 "Save both copies of every pair here when it ends (one "
                 "directory per pair: model1.pt, model2.pt, spec.json); "
                 "`twin-run merge --models DIR` reads them back");
}

sweep::EngineOptions engine_options(const EngineFlags& f,
                                    const std::string& path, int threads) {
  sweep::EngineOptions o;
  o.results_path = path;
  o.jobs = f.jobs;
  o.threads = f.threads > 0 ? f.threads : threads;
  o.share = !f.no_share;
  o.quiet = f.quiet;
  o.check_memory = !f.no_memory_check;
  o.save_models = f.save_models;
  return o;
}

std::vector<std::string> split_list(const std::string& flag,
                                    const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma - start);
    TORCH_CHECK(!item.empty(), flag, ": empty element in '", text, "'");
    out.push_back(item);
    if (comma == std::string::npos)
      return out;
    start = comma + 1;
  }
}

std::vector<uint64_t> parse_seeds(const std::string& flag,
                                  const std::string& text) {
  std::vector<uint64_t> out;
  for (const auto& item : split_list(flag, text)) {
    bool digits = item.size() <= 19;
    for (char c : item)
      digits = digits && c >= '0' && c <= '9';
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

std::vector<int64_t> parse_steps(const std::string& flag,
                                 const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(flag, text)) {
    bool digits = !item.empty() && item.size() <= 10;
    for (char c : item)
      digits = digits && c >= '0' && c <= '9';
    TORCH_CHECK(digits, flag, ": '", item, "' is not a step (0 to ", kMaxSteps,
                ")");
    out.push_back(std::stoll(item));
  }
  return out;
}

}  // namespace app
