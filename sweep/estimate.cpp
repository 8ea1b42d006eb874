#include "sweep/estimate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/charlm.h"
#include "data/task.h"
#include "model/config.h"
#include "model/flops.h"
#include "twins/metrics.h"
#include "twins/units.h"

namespace sweep {

namespace {

// One thread's rate of model matrix-multiply FLOPs on this machine
// (`twin-run bench`, LibTorch 1.13 + OpenBLAS, one core per model; the
// mod-47 and char-LM rows span 50-75 GFLOP/s in float32 and 23-33 in
// float64; docs/performance.md).
constexpr double kFlopsPerSecondF32 = 55e9;
constexpr double kFlopsPerSecondF64 = 25e9;
constexpr double kSetupSeconds = 0.3;  // task, build, copies, gauge

// The shape of one training step and of the validation set.
struct Shapes {
  model::ModelConfig cfg;
  int64_t train_sequences = 0, val_sequences = 0, len = 0;
  int64_t vocab_out = 0;
  int64_t val_predictions = 0;  // validation positions with a prediction
};

Shapes shapes_of(const twins::PairSpec& s) {
  Shapes out;
  model::ModelConfig& c = out.cfg;
  c.depth = s.depth;
  c.d_model = s.d_model;
  c.heads = s.heads;
  c.mlp = s.mlp;
  c.kv_heads = s.kv_heads;
  c.rope = s.rope;
  c.rope_base = s.rope_base;
  if (s.is_charlm()) {
    c.vocab_in = c.vocab_out = 65;  // tiny-Shakespeare; others are close
    c.n_ctx = s.ctx;
    c.causal = true;
    c.last_only = false;
    out.train_sequences = s.batch;
    out.val_sequences = data::kValidationWindows;
    out.len = s.ctx;
    out.val_predictions = out.val_sequences * s.ctx;
  } else {
    const int64_t p = std::stoll(s.task.substr(3));
    const int64_t train = static_cast<int64_t>(std::floor(0.4 * p * p));
    c.vocab_in = p + 1;
    c.vocab_out = p;
    c.n_ctx = 3;
    c.last_only = true;
    out.train_sequences = train;
    out.val_sequences = p * p - train;
    out.len = 3;
    out.val_predictions = out.val_sequences;
  }
  out.vocab_out = c.vocab_out;
  return out;
}

// The size of a char-LM pair's corpus file; 0 for mod<p>, for a pipe, and
// for a file that cannot be read (the task says so later, in its words).
double corpus_file_bytes(const twins::PairSpec& s) {
  if (!s.is_charlm())
    return 0;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = s.corpus;
  if (path.empty()) {
    try {
      path = data::default_corpus_path();
    } catch (const c10::Error&) {
      return 0;
    }
  }
  if (!fs::is_regular_file(path, ec))
    return 0;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : double(size);
}

double bytes_per_value(const twins::PairSpec& s) {
  return s.dtype == torch::kDouble ? 8 : 4;
}

}  // namespace

double estimate_seconds(const twins::PairSpec& s, int models) {
  if (s.device != "cpu")
    return std::nan("");
  const Shapes sh = shapes_of(s);
  const double step = model::total_flops(
      model::training_step_matmuls(sh.cfg, sh.train_sequences, sh.len));
  // An evaluation is a forward pass: a third of a step's products.
  const double eval = model::total_flops(model::training_step_matmuls(
                          sh.cfg, sh.val_sequences, sh.len)) /
                      3;
  const double checkpoints = double(
      twins::checkpoint_steps(s.steps, s.merge_at, s.stop_after).size());
  const double flops =
      double(models) * (step * double(s.last_step()) + eval * checkpoints);
  const double rate =
      s.dtype == torch::kDouble ? kFlopsPerSecondF64 : kFlopsPerSecondF32;
  return kSetupSeconds + flops / rate;
}

double MemoryEstimate::total(int models, int threads) const {
  return double(models) * per_model +
         double(std::min(models, threads)) * per_training + evaluation +
         corpus;
}

MemoryEstimate estimate_memory(const twins::PairSpec& s) {
  const Shapes sh = shapes_of(s);
  const double b = bytes_per_value(s);
  const double d = double(s.d_model), mlp = double(s.mlp);
  const double layers = double(s.depth);
  const double params = layers * (4 * d * d + 2 * d * mlp + 2 * d) +
                        double(sh.cfg.vocab_in) * d + double(sh.cfg.n_ctx) * d +
                        d + double(sh.vocab_out) * d;
  MemoryEstimate m;
  m.per_model = 4 * params * b;  // weights, gradients, two optimizer buffers
  // Per token and layer, what the forward keeps for the backward and the
  // backward's own temporaries (about as much again): the residual stream,
  // norms, Q/K/V, attention output and projections (~12 d), the MLP's
  // three activations (3 mlp), and the attention scores and probabilities
  // over the context (2 heads len).
  const double len = double(sh.len);
  const double per_token = 2 * (12 * d + 3 * mlp + 2 * double(s.heads) * len);
  const double tokens = double(sh.train_sequences) * len;
  const double logits =
      3 * double(sh.vocab_out) *
      (sh.cfg.last_only ? double(sh.train_sequences) : tokens);
  m.per_training = (layers * per_token * tokens + logits) * b;
  // Evaluation: one layer's working set at a time (no gradients), plus the
  // logits of the reference and of the model being compared.
  const double val_tokens = double(sh.val_sequences) * len;
  m.evaluation = (per_token / 2 * val_tokens +
                  2 * double(sh.vocab_out) * double(sh.val_predictions)) *
                 b;
  m.corpus = kCorpusBytesPerByte * corpus_file_bytes(s);
  return m;
}

double cgroup_memory_limit_bytes(const std::string& self_cgroup,
                                 const std::string& root) {
  namespace fs = std::filesystem;
  // A limit file's value; 0 for none ("max", a v1 "unlimited" near 2^63,
  // missing or unreadable).
  auto limit_in = [](const fs::path& file) -> double {
    std::ifstream f(file);
    std::string text;
    if (!(f >> text) || text == "max")
      return 0;
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    return end && *end == '\0' && v > 0 && v < 0x1p62 ? v : 0;
  };
  double lowest = 0;
  // The cgroup's own file and each ancestor's, up to the hierarchy's root.
  auto walk = [&](const fs::path& top, const std::string& path,
                  const char* name) {
    const fs::path rel = fs::path(path).relative_path();
    fs::path at = rel.empty() ? top : (top / rel).lexically_normal();
    if (at.filename().empty())  // a trailing "/"
      at = at.parent_path();
    // Stops at the root, and at a path that climbed out of it ("..").
    while (at.string().size() >= top.string().size()) {
      const double v = limit_in(at / name);
      if (v > 0 && (lowest == 0 || v < lowest))
        lowest = v;
      if (at == top || at == at.parent_path())
        break;
      at = at.parent_path();
    }
  };
  std::istringstream lines(self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "<id>:<controllers>:<path>"
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos)
      continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      walk(fs::path(root), path, "memory.max");
      walk(fs::path(root) / "unified", path, "memory.max");
    }
    std::istringstream names(controllers);
    for (std::string c; std::getline(names, c, ',');) {
      if (c == "memory")
        walk(fs::path(root) / "memory", path, "memory.limit_in_bytes");
    }
  }
  return lowest;
}

double machine_memory_bytes(bool* capped) {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long size = ::sysconf(_SC_PAGE_SIZE);
  const double physical =
      pages > 0 && size > 0 ? double(pages) * double(size) : 0;
  std::ifstream f("/proc/self/cgroup");
  std::stringstream self;
  self << f.rdbuf();
  const double limit = cgroup_memory_limit_bytes(self.str(), "/sys/fs/cgroup");
  const bool lower = limit > 0 && (physical == 0 || limit < physical);
  if (capped)
    *capped = lower;
  return lower ? limit : physical;
}

void check_memory(const std::vector<std::vector<twins::PairSpec>>& groups,
                  int jobs, int threads) {
  bool capped = false;
  const double machine = machine_memory_bytes(&capped);
  check_memory(groups, jobs, threads, machine, capped);
}

void check_memory(const std::vector<std::vector<twins::PairSpec>>& groups,
                  int jobs, int threads, double machine, bool capped) {
  if (machine <= 0 || groups.empty())
    return;
  double worst = 0;
  const twins::PairSpec* at = nullptr;
  int models_at = 0;
  for (const auto& g : groups) {
    if (g.empty() || g.front().device != "cpu")
      continue;
    const int models = static_cast<int>(g.size()) + 1;
    const double need = estimate_memory(g.front()).total(models, threads);
    if (need > worst) {
      worst = need;
      at = &g.front();
      models_at = models;
    }
  }
  const double need = worst * double(std::min<size_t>(jobs, groups.size()));
  TORCH_CHECK(
      !at || need <= machine, "Not enough memory: about ",
      twins::format_bytes(need), " needed (",
      std::min<size_t>(jobs, groups.size()), " group(s) at once of ", models_at,
      " models of ", at ? twins::pair_label(*at) : "", ", ", at ? at->task : "",
      " L", at ? at->depth : 0, " d", at ? at->d_model : 0,
      at && at->is_charlm()
          ? fmt::format(" ctx {} batch {}{}", at->ctx, at->batch,
                        corpus_file_bytes(*at) > 0
                            ? fmt::format(", a corpus of {}",
                                          twins::format_bytes(
                                              corpus_file_bytes(*at)))
                            : std::string())
          : std::string(),
      ") and ",
      capped ? "this process's cgroup (a job's --mem, a container's limit) "
               "allows "
             : "this machine has ",
      twins::format_bytes(machine),
      "; shrink the model or context, lower --jobs / --threads, or pass "
      "--no-memory-check if you know better");
}

int max_twins_per_group(const twins::PairSpec& spec, int jobs, int threads,
                        double budget) {
  const MemoryEstimate m = estimate_memory(spec);
  const double per_group = budget / double(std::max(1, jobs));
  const double room =
      per_group - double(threads) * m.per_training - m.evaluation;
  const int models =
      m.per_model > 0 ? static_cast<int>(room / m.per_model) : 1 << 20;
  return std::max(1, models - 1);
}

TableCost table_cost(const Table& table, bool share) {
  // The larger, where an unknown estimate (NaN: a CUDA device) makes the
  // answer unknown.
  auto most = [](double a, double b) {
    return std::isnan(b) ? b : std::max(a, b);
  };
  TableCost c;
  c.pairs = table.pairs.size();
  const auto groups = group_pairs(table.pairs, share);
  c.tasks = groups.size();
  for (const auto& g : groups)
    c.most_models = std::max(c.most_models, static_cast<int>(g.size()) + 1);
  for (const auto& g : groups) {
    // Each group trains its copy 1 once: the cost is in distinct models.
    const int k = static_cast<int>(g.size()) + 1;
    const double s = estimate_seconds(g.front(), k);
    c.models += k;
    c.total_s += s;
    c.longest_s = most(c.longest_s, s);
    // At one thread per model the models of a group train side by side:
    // the group takes about one model's time (the rates of sweep/estimate.h
    // are one core's while the other cores train other models).
    c.longest_at_most_s =
        most(c.longest_at_most_s, estimate_seconds(g.front(), 1));
    c.memory_at_most = std::max(
        c.memory_at_most, estimate_memory(g.front()).total(k, c.most_models));
  }
  return c;
}

}  // namespace sweep
