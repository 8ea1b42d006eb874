// Flag helpers every command shares: range validators whose message names
// the valid range, the flags that shape a pair, the flags of the engine,
// and the strict parsing of comma-separated lists.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "sweep/engine.h"
#include "sweep/plan.h"

namespace app {

// A whole number in [lo, hi]; anything else (a fraction, a word, a number
// too large for 64 bits) is rejected with "V is not a whole number from LO
// to HI" before CLI11 converts it.
CLI::Validator whole_number(int64_t lo, int64_t hi);

// A real number > 0 and finite.
CLI::Validator positive_real();

constexpr int64_t kMaxSteps = 1000000000;  // 1e9: days on any device

// The flags that shape every pair (--task, --steps, --lr, --dtype,
// --device, --depth, --d-model, --heads, --mlp, --data-seed, --ctx,
// --batch, --data), bound to `plan`. The defaults shown in --help are the
// tasks' own (data::task_defaults).
void add_pair_flags(CLI::App& app, sweep::PlanRequest& plan);

// What every command that trains takes besides the pairs.
struct EngineFlags {
  std::string out;        // results file; empty: a command's default
  int jobs = 1;           // groups at once
  int threads = 0;        // models of a group at once; 0: the command's
  bool no_share = false;  // train every pair's copy 1 itself
  bool quiet = false;
  bool no_memory_check = false;
  std::string save_models;  // directory for both copies of every pair
};
// --out (with `out_help`), --jobs, --threads (default `threads`), --no-share,
// --quiet, --no-memory-check, --save-models.
void add_engine_flags(CLI::App& app, EngineFlags& flags,
                      const std::string& out_help, int threads);
// The engine's options from the flags, for results file `path`.
sweep::EngineOptions engine_options(const EngineFlags& flags,
                                    const std::string& path, int threads);

// Splits a comma-separated list; an empty list or element is an error
// naming `flag`.
std::vector<std::string> split_list(const std::string& flag,
                                    const std::string& text);
std::vector<uint64_t> parse_seeds(const std::string& flag,
                                  const std::string& text);
std::vector<double> parse_reals(const std::string& flag,
                                const std::string& text);
std::vector<int64_t> parse_steps(const std::string& flag,
                                 const std::string& text);

}  // namespace app
