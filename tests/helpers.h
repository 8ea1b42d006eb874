// Small shared fixtures for the tests: a tiny mod-p model and its task, and
// the check that misuse is refused naming the value.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "data/modular.h"
#include "model/transformer.h"
#include "twins/spec.h"

namespace testing_helpers {

// mod11, 2 blocks, d 16, 4 heads (hd 4): fast enough for exact checks.
inline model::ModelConfig tiny_mod_config(int64_t p = 11) {
  model::ModelConfig c;
  c.vocab_in = p + 1;
  c.vocab_out = p;
  c.n_ctx = 3;
  c.depth = 2;
  c.d_model = 16;
  c.heads = 4;
  c.mlp = 64;
  c.last_only = true;
  return c;
}

inline twins::PairSpec tiny_spec(const std::string& opt, twins::TwinKind kind,
                                 int64_t steps, torch::Dtype dtype) {
  twins::PairSpec s;
  s.task = "mod11";
  s.opt = opt;
  s.twin = kind;
  s.steps = steps;
  s.dtype = dtype;
  // As a plan resolves it: float64 pairs draw in float64 (protocol §2a).
  s.protocol = twins::default_protocol(twins::Protocol::kPaperCpu, dtype);
  s.depth = 2;
  s.d_model = 16;
  s.heads = 4;
  s.mlp = 64;
  s.twin_seed = kind == twins::TwinKind::kNoise ? 888 : 777;
  return s;
}

// Runs `f` and expects a one-line error (c10::Error) whose message, without
// its backtrace, names `value`.
template <class F>
void expect_throw_naming(F&& f, const std::string& value) {
  try {
    f();
    FAIL() << "no exception; expected one naming " << value;
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find(value), std::string::npos) << message;
  }
}

}  // namespace testing_helpers
