// `table --aggregate FILES` (CommandKind::kAggregate): the records of
// results files, each with the job list it belongs to — one per table and
// configuration (steps / dtype / device), rebuilt as that configuration
// would run it (the census's second part included), so that missing pairs
// can be named and other configurations' records left out; records of no
// table keep one setting and take the layout request.layout_of names.
// Nothing is run or written: the outcome says where the aggregate goes
// (next to the first file; several files: named after their
// configurations).
#pragma once

#include "sweep/command.h"

namespace sweep {

// Throws a one-line error for --out, for records of two table kinds or of
// one table at two settings, for `table NAME --aggregate` where no record
// is one of NAME's pairs, and for records of no table at several settings.
CommandOutcome resolve_aggregate(const CommandRequest& request);

}  // namespace sweep
