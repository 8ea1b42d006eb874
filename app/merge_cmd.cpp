#include "app/merge_cmd.h"

#include <fmt/format.h>

#include "app/common.h"
#include "app/flags.h"

namespace app {

CLI::App* setup_merge(CLI::App& parent, MergeFlags& flags) {
  CLI::App* cmd = parent.add_subcommand(
      "merge",
      "Head merging (docs/protocol.md §9): train pairs and, at each "
      "--merge-at step, measure the validation loss along the straight line "
      "between the two copies and its barrier, naive and after aligning copy "
      "2's heads to copy 1's by orthogonal Procrustes (per key/value head; "
      "W_V and W_O too for twins that rotate them; under --rope within the "
      "rotations of each frequency pair, the unrestricted fit reported "
      "beside it); or measure pairs saved by --save-models (--models)");
  add_pair_list_flags(*cmd, flags.request, flags.opt_args,
                      "Results file (JSON lines) [default: a new file "
                      "runs/merge-<task>-<date>-<time>.jsonl]");
  add_steps(*cmd, "--merge-at", flags.request.plan.merge_at,
            "Steps at which to merge, comma-separated [default: 1, 100 and "
            "the last step]");
  CLI::Option* models =
      cmd->add_option("--models", flags.request.models,
                      "A directory of pairs saved by --save-models (or one "
                      "saved pair): measure them as saved, without training")
          ->check(non_empty());
  cmd->add_flag("--plot", flags.plot,
                "Also draw the loss along lambda (gnuplot), one panel per "
                "optimizer, naive dashed and aligned solid");
  // Saved pairs are measured as they were saved: a flag that shapes or
  // trains pairs would be ignored, so it is refused beside --models.
  cmd->parse_complete_callback([cmd, models] {
    if (models->count() == 0)
      return;
    for (const CLI::Option* o : cmd->get_options()) {
      const std::string name = o->get_name();
      if (o != models && o->count() > 0 && name != "--out" &&
          name != "--plot" && name != "--device" && name != "--quiet" &&
          name != "--jobs" && name != "--threads" &&
          name != "--no-memory-check") {
        throw CLI::ValidationError(
            name, "does not apply with --models (saved pairs are measured "
                  "as they were saved)");
      }
    }
  });
  return cmd;
}

int run_merge(const MergeFlags& flags) {
  sweep::CommandRequest r = with_python_rules(flags.request, flags.opt_args);
  if (!r.models.empty())
    r.kind = sweep::CommandKind::kMergeSaved;
  const sweep::CommandOutcome o = sweep::run_command(r);
  write_aggregate(o, flags.plot);
  fmt::print("{}", outcome_line(o));
  return 0;
}

}  // namespace app
