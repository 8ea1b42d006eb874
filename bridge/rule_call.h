// A call into a Python rule that a stop signal reaches (docs/clusters.md,
// "A Python rule's step that does not return"). While a RuleCall lives, a
// watchdog thread watches for a stop request (twins/stop.h): when one came
// and the call has not returned `stop_grace_s()` seconds later, it raises
// isolation.StopRequested inside the rule's thread (a Python loop, a
// sleep in a loop, stops at its next instruction), and the call throws
// twins::Stopped: the group's last checkpoint stands, the step that was
// cut is not saved. A call that still has not returned after twice the
// grace (native code that blocks, a rule that catches BaseException) ends
// twin-run with one line and exit 75 (130 for SIGINT); inside a Python
// process that imported twins the call is left to the user.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace bridge {

// The grace a rule's call has after a stop signal: $TWINS_STOP_GRACE_S
// (seconds, a positive number), 10 without it.
double stop_grace_s();

class RuleCall {
 public:
  // Registers the calling thread, which holds the GIL, as inside `rule`'s
  // `what` ("step()") at step `step`.
  RuleCall(std::string rule, const char* what, int64_t step);
  ~RuleCall();
  RuleCall(const RuleCall&) = delete;
  RuleCall& operator=(const RuleCall&) = delete;

  // Whether the watchdog raised StopRequested in this call.
  bool interrupted() const;
  // Throws twins::Stopped naming the rule, the call and the signal.
  [[noreturn]] void throw_stopped() const;

  struct Entry;

 private:
  Entry* entry_;
};

}  // namespace bridge
