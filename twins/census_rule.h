// The census's catalogue as the rooms that use it see it (docs/results.md,
// "The census"): one row per rule of the installed optimizer libraries.
// census/ lists the rows (census/census.h); a command hands its catalogue
// to sweep/ (the census table's job list, sweep::TableOverrides::census)
// and its rows to report/ (the census section, report::Expected::census)
// inside the requests they take.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace twins {

struct CensusRule {
  std::string library;  // the distribution, as the predictions name it
  std::string version;  // installed; empty when it is not
  std::vector<std::string> aliases;  // registry names of this one rule
  std::string rule;        // what --opt takes; empty for a missing library
  // The canonical --opt name `rule` resolves to (the name its records
  // carry); empty when it cannot run.
  std::string opt;
  std::string definition;  // the class and the defaults it is built with
  // The prediction: class (equivariant, basis-dependent, distribution,
  // shape), what it means on the Table-3 model, its one-line reason and
  // the source line it rests on; empty where the predictions have no row
  // (a rule newer than them).
  std::string predicted, table3, reason, decided_by;
  // Why it cannot run here ("not installed", "cannot run here: needs
  // CUDA (…)", "raises at step 1: …"); empty when it can.
  std::string cannot_run;

  // Whether the census's job list runs it: it resolved and nothing says it
  // cannot run.
  bool runs() const { return !opt.empty() && cannot_run.empty(); }
};

// The catalogue's rows that `select` names (each "LIBRARY" or
// "LIBRARY:NAME"; empty: every rule), in the census's order; throws a
// one-line error for a library or name it does not list. A null catalogue:
// the program lists no census (a twin-run without Python support).
using CensusCatalogue =
    std::function<std::vector<CensusRule>(const std::vector<std::string>&)>;

}  // namespace twins
