#include "twins/units.h"

#include <fmt/format.h>

#include <cmath>

namespace twins {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds))
    return "unknown";
  if (seconds < 90)
    return fmt::format("{:.0f} s", seconds);
  if (seconds < 90 * 60)
    return fmt::format("{:.0f} min", seconds / 60);
  if (seconds < 48 * 3600)
    return fmt::format("{:.1f} h", seconds / 3600);
  return fmt::format("{:.1f} days", seconds / 86400);
}

std::string format_bytes(double bytes) {
  if (bytes < 1e9)
    return fmt::format("{:.0f} MB", bytes / 1e6);
  if (bytes < 1e12)
    return fmt::format("{:.1f} GB", bytes / 1e9);
  return fmt::format("{:.1f} TB", bytes / 1e12);
}

}  // namespace twins
