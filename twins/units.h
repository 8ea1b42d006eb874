// How every layer writes an amount of time and of memory: the estimates
// of a sweep (sweep/estimate.h), its refusals, and the table listing
// (report/command_lines.h) say them alike.
#pragma once

#include <string>

namespace twins {

// "45 s", "12 min", "3.4 h", "2.1 days"; "unknown" for NaN.
std::string format_duration(double seconds);
// "850 MB", "3.2 GB", "1.2 TB".
std::string format_bytes(double bytes);

}  // namespace twins
