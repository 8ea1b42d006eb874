// Small shared fixtures for the tests: a tiny mod-p model and its task, and
// the check that misuse is refused naming the value.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "data/modular.h"
#include "model/transformer.h"
#include "twins/defaults.h"
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

// The largest absolute entry of `t`.
inline double max_abs(const torch::Tensor& t) {
  return t.abs().max().item<double>();
}

// The i-th entry of `t` in row-major order.
inline double at(const torch::Tensor& t, int64_t i) {
  return t.reshape({-1})[i].item<double>();
}

// A float64 tensor of the given values.
inline torch::Tensor t64(std::vector<double> v) {
  return torch::tensor(v, torch::kDouble);
}

// A float64 normal draw of `shape` from the global stream seeded `seed`.
inline torch::Tensor randn64(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kDouble);
}

// A random n x n orthogonal matrix (float64): Q of a normal draw's QR.
inline torch::Tensor random_orthogonal(int64_t n, uint64_t seed) {
  return std::get<0>(torch::linalg_qr(randn64({n, n}, seed)));
}

// The Table-3 model's mod47 pair of `opt` in float64, drawn in float64
// (protocol §2a).
inline twins::PairSpec mod47_float64(const std::string& opt, int64_t steps) {
  twins::PairSpec s = twins::default_spec("mod47", opt);
  s.steps = steps;
  s.dtype = torch::kDouble;
  s.protocol = twins::Protocol::kTwins;
  return s;
}

}  // namespace testing_helpers
