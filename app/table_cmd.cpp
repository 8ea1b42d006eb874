#include "app/table_cmd.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include "app/common.h"
#include "app/flags.h"
#include "census/census.h"

namespace app {

namespace {

// What a census table selects: its rules, and whether other rates are
// tried.
void add_census_flags(CLI::App& cmd, sweep::TableOverrides& overrides) {
  cmd.add_option("--rules", overrides.rules,
                 "census only: its rules of these libraries (timm) or these "
                 "rules (timm:lamb, a library and one of the rule's registry "
                 "names; twin-run census lists them), comma-separated "
                 "[default: every rule]")
      ->delimiter(',')
      ->check(non_empty());
  cmd.add_flag("--default-rates", overrides.default_rates,
               "census only: each rule at its library's default rate alone, "
               "no other rate tried where it does not train");
}

}  // namespace

CLI::App* setup_table(CLI::App& parent, TableFlags& flags) {
  sweep::CommandRequest& r = flags.request;
  r.overrides.census = census::catalogue();  // null without Python support
  CLI::App* cmd = parent.add_subcommand(
      "table",
      "Run one of the paper's tables (docs/protocol.md §7), the optimizer "
      "zoo, the Adam-p dial or the head-merging table, and aggregate it: "
      "resumable (rerun to continue), parallel (--jobs), shardable "
      "(--shard); or re-aggregate results files (--aggregate)");
  const bool census = static_cast<bool>(r.overrides.census);
  cmd->add_option("name", r.table,
                  "Table: " + fmt::format("{}", fmt::join(sweep::table_names(
                                                              census),
                                                          ", ")));
  cmd->add_flag("--list", flags.list,
                "Print every table with its pair and model counts, steps, "
                "estimated wall time on this machine, the array tasks it can "
                "use (its groups) and how long its longest task takes, then "
                "exit");
  cmd->add_option("--aggregate", r.inputs,
                  "Aggregate these results files (e.g. merged shards) "
                  "without running anything; the table comes from the "
                  "records or from NAME, and only records of its job list "
                  "are used (a census's --rules and --default-rates are not "
                  "in its records: give them again)")
      ->check(non_empty());
  add_engine_flags(*cmd, r,
                   "Results file (JSON lines) [default: runs/<name>[-<"
                   "overrides>][-shard<I>of<N>].jsonl]; the .md, .csv and "
                   "figures go beside it");
  cmd->add_option("--shard", r.shard,
                  "Run only shard I of N (I/N, 1 <= I <= N): groups I, I+N, "
                  "I+2N, ... of the job list; the shards cover the table "
                  "once when all run with the same --no-share");
  cmd->add_option("--steps", r.overrides.steps,
                  "Override the training steps (a quick look; the output "
                  "then says it is not the paper's configuration)")
      ->check(whole_number(1, kMaxSteps));
  add_stop_after_flag(*cmd, r.overrides.stop_after);
  add_protocol_flag(*cmd, r.overrides.protocol,
                    "the table's, paper-cpu for table3/multiseed/zoo/"
                    "zoo-modern/dial/merge (twins with --dtype float64), "
                    "paper-gpu for table9-*");
  cmd->add_option("--device", r.overrides.device,
                  "cpu, cuda or cuda:N [default: cpu]");
  cmd->add_option("--dtype", r.overrides.dtype,
                  "Override the dtype: float32 or float64 [default: the "
                  "table's, float32 for table3/multiseed/zoo/dial/merge, "
                  "float64 for table9-*]");
  add_census_flags(*cmd, r.overrides);
  cmd->add_flag("--plot", flags.plot,
                "Also draw Figure 2 and the per-head QK drift (gnuplot) next "
                "to the results; for dial also drift against p");
  return cmd;
}

int run_table(const TableFlags& flags) {
  if (flags.list) {
    fmt::print("{}",
               table_list(flags.request.overrides, flags.request.engine.share));
    return 0;
  }
  sweep::CommandRequest r = flags.request;
  if (!r.inputs.empty()) {
    r.kind = sweep::CommandKind::kAggregate;
    r.layout_of = inferred_layout;
  }
  const sweep::CommandOutcome o = sweep::run_command(r);
  write_aggregate(o, flags.plot);
  fmt::print("{}", outcome_line(o));
  return 0;
}

}  // namespace app
