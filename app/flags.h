// Flag helpers every command shares: range validators whose message names
// the valid range, the one parser of comma-separated lists, the flags that
// shape a pair and the flags of the engine, each bound straight onto the
// entry point's request (sweep/command.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "sweep/command.h"

namespace app {

// A whole number in [lo, hi]; anything else (a fraction, a word, a number
// too large for 64 bits) is rejected with "V is not a whole number from LO
// to HI" before CLI11 converts it.
CLI::Validator whole_number(int64_t lo, int64_t hi);

// A real number > 0 and finite; beyond a double's range it is "out of
// range", not "not a number".
CLI::Validator positive_real();
// A real number > 1 and finite (a frequency base: --rope-base).
CLI::Validator real_above_one();
// A real number >= 0 and finite.
CLI::Validator non_negative_real();

// A seed: a whole number from 0 to 2^64 - 1, digits only (what the seed
// lists accept).
CLI::Validator seed_number();

constexpr int64_t kMaxSteps = 1000000000;  // 1e9: days on any device

// Comma-separated list flags, every one parsed by the same rules: an empty
// value ("--opt: empty value"), an empty element ("--opt: empty element in
// 'adam,,sgd'"), an element given twice ("--rows: 'x' appears twice in
// 'x,x'") and an element not of the list's kind ("--init-seed: '4x2'
// is not a seed (a non-negative integer)") are one-line errors naming the
// flag, at parse time. A comma inside braces, brackets or quotes (a Python
// rule's JSON arguments) separates nothing. The list replaces `out` when
// the flag is given.
CLI::Option* add_names(CLI::App& app, const std::string& flag,
                       std::vector<std::string>& out, const std::string& help);
CLI::Option* add_seeds(CLI::App& app, const std::string& flag,
                       std::vector<uint64_t>& out, const std::string& help);
CLI::Option* add_reals(CLI::App& app, const std::string& flag,
                       std::vector<double>& out, const std::string& help);
CLI::Option* add_steps(CLI::App& app, const std::string& flag,
                       std::vector<int64_t>& out, const std::string& help);
// For an option that takes several values (files): an empty one is refused
// as a list's empty value is ("--aggregate: empty value").
CLI::Validator non_empty();

// --protocol (docs/protocol.md §2a), its default shown as `default_text`,
// and --stop-after: also the table command's overrides.
CLI::Option* add_protocol_flag(CLI::App& app, std::string& out,
                               const std::string& default_text);
CLI::Option* add_stop_after_flag(CLI::App& app, int64_t& out);

// The flags that shape every pair (--task, --protocol, --steps,
// --stop-after, --lr, --dtype,
// --device, --depth, --d-model, --heads, --mlp, --data-seed, --ctx,
// --batch, --data), bound to `plan`. The defaults shown in --help are the
// tasks' own (data::task_defaults).
void add_pair_flags(CLI::App& app, sweep::PlanRequest& plan);

// --opt-args: the keyword arguments of the Python rules of --opt, one JSON
// object, resolved into their names by resolved_rules (app/common.h).
void add_opt_args(CLI::App& app, std::string& opt_args);

// --opt, --opt-args (into `opt_args`), --twin, --init-seed, --twin-seed,
// --noise-scale, --p, the pair flags and the engine flags (results file
// default `out_help`), bound to `request`: what every command that takes a
// list of pairs accepts.
void add_pair_list_flags(CLI::App& app, sweep::CommandRequest& request,
                         std::string& opt_args, const std::string& out_help);

// --allow-mixed-env: records of another numeric environment are mixed with
// a warning, not refused (sweep::check_one_environment).
CLI::Option* add_allow_mixed_env_flag(CLI::App& app, bool& out);

// --out (with `out_help`), --jobs, --threads (default
// sweep::default_threads(request.kind)), --no-share, --quiet,
// --no-memory-check, --checkpoint-minutes (default 10), --checkpoint-every,
// --checkpoint-restart, --allow-mixed-env, --portable-kernels (read by
// main() itself), --save-models, bound to request.engine.
void add_engine_flags(CLI::App& app, sweep::CommandRequest& request,
                      const std::string& out_help);

}  // namespace app
