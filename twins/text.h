// Small text helpers shared by the floors that print errors.
#pragma once

#include <string>

namespace twins {

// The first line of a message (LibTorch and Python append backtraces and
// tracebacks after it).
inline std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace twins
