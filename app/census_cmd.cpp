#include "app/census_cmd.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> only before fmt 11)

#include <string>
#include <vector>

#include "app/flags.h"
#include "census/census.h"

namespace app {

namespace {

// Markdown's table cell: a '|' would end it.
std::string cell(std::string text) {
  for (size_t at = text.find('|'); at != std::string::npos;
       at = text.find('|', at + 2))
    text.replace(at, 1, "\\|");
  return text;
}

}  // namespace

CLI::App* setup_census(CLI::App& parent, CensusFlags& flags) {
  CLI::App* cmd = parent.add_subcommand(
      "census",
      "List the census's rules: every optimizer the installed libraries "
      "register (torch.optim, pytorch-optimizer, timm, heavyball, "
      "torch-optimizer, schedulefree, lion-pytorch, kron-torch, prodigyopt, "
      "adam-mini, emerging-optimizers, muon-optimizer, bitsandbytes, "
      "torch-optimi, dadaptation, torch-adopt, adam-atan2-pytorch, "
      "came-pytorch, sophia-opt, grokadamw, galore-torch, apollo-torch), "
      "read from their own registries, aliases of one rule "
      "together, each with the --opt name that runs it and the class "
      "predicted for it (docs/results.md, \"The census\")");
  cmd->add_flag("--probe", flags.probe,
                "Also train each rule two steps on a one-block model through "
                "the protocol and say why one cannot run here");
  cmd->add_option("--library", flags.library,
                  "Only this library's rules (as the census names it: torch, "
                  "pytorch_optimizer, timm, heavyball, torch-optimizer, "
                  "schedulefree, lion-pytorch, kron-torch, prodigyopt, "
                  "adam_mini, emerging-optimizers, muon-optimizer, "
                  "bitsandbytes, torch-optimi, dadaptation, torch-adopt, "
                  "adam-atan2-pytorch, came-pytorch, sophia-opt, grokadamw, "
                  "galore-torch, apollo-torch)")
      ->check(non_empty());
  return cmd;
}

int run_census(const CensusFlags& flags) {
  const std::vector<twins::CensusRule> rules =
      census::rules(flags.probe, flags.library.empty()
                                            ? std::vector<std::string>{}
                                            : std::vector<std::string>{flags.library});
  fmt::print("| library | aliases | --opt | predicted (on Table 3) | {} |\n",
             flags.probe ? "runs here" : "loads");
  fmt::print("|---|---|---|---|---|\n");
  struct Count {
    std::string library;
    int rules = 0, aliases = 0, cannot = 0;
    bool installed = true;
  };
  std::vector<Count> counts;  // in the census's order
  for (const auto& rule : rules) {
    const std::string library =
        rule.version.empty() ? rule.library
                             : rule.library + "==" + rule.version;
    const std::string predicted =
        rule.predicted.empty() ? "none (not in the predictions)"
        : rule.predicted == rule.table3
            ? rule.predicted
            : rule.predicted + " (" + rule.table3 + ")";
    fmt::print("| {} | {} | {} | {} | {} |\n", library,
               cell(fmt::format("{}", fmt::join(rule.aliases, ", "))), cell(rule.rule),
               rule.rule.empty() ? "" : predicted,
               rule.cannot_run.empty() ? "yes" : cell(rule.cannot_run));
    if (counts.empty() || counts.back().library != library)
      counts.push_back({library});
    Count& count = counts.back();
    count.installed = !rule.rule.empty();
    count.rules += count.installed;
    count.aliases += static_cast<int>(rule.aliases.size());
    count.cannot += count.installed && !rule.cannot_run.empty();
  }
  fmt::print("\n");
  Count total{"all"};
  for (const Count& count : counts) {
    if (!count.installed) {
      fmt::print("{}: not installed\n", count.library);
      continue;
    }
    fmt::print("{}: {} rules ({} names), {} {}\n", count.library, count.rules,
               count.aliases, count.cannot,
               flags.probe ? "cannot run here" : "do not load");
    total.rules += count.rules;
    total.aliases += count.aliases;
    total.cannot += count.cannot;
  }
  fmt::print("census: {} rules ({} names), {} {}\n", total.rules,
             total.aliases, total.cannot,
             flags.probe ? "cannot run here" : "do not load");
  return 0;
}

}  // namespace app
