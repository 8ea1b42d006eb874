#include "data/modular.h"

#include <ATen/CPUGeneratorImpl.h>

namespace data {

ModularAddition::ModularAddition(int64_t p, uint64_t data_seed,
                                 const torch::Device& device)
    : p_(p) {
  TORCH_CHECK(p >= 2, "Invalid modulus: ", p, " (must be >= 2)");
  auto gen = at::detail::createCPUGenerator(data_seed);
  // Example i is the pair (a, b) = (i / p, i % p).
  torch::Tensor perm = torch::randperm(p * p, gen, torch::kLong);
  torch::Tensor a = perm.div(p, "floor");
  torch::Tensor b = perm.remainder(p);
  torch::Tensor eq = torch::full_like(a, p);
  torch::Tensor x = torch::stack({a, b, eq}, 1);  // (p^2, 3)
  torch::Tensor y = (a + b).remainder(p);         // (p^2)
  const int64_t n_train = (4 * p * p) / 10;      // floor(0.4 p^2)
  train_ = {x.narrow(0, 0, n_train).contiguous().to(device),
            y.narrow(0, 0, n_train).contiguous().to(device)};
  val_ = {x.narrow(0, n_train, p * p - n_train).contiguous().to(device),
          y.narrow(0, n_train, p * p - n_train).contiguous().to(device)};
}

std::string ModularAddition::name() const {
  return "mod" + std::to_string(p_);
}

TaskShape ModularAddition::shape() const {
  TaskShape s;
  s.vocab_in = p_ + 1;
  s.vocab_out = p_;
  s.n_ctx = 3;
  s.causal = false;
  s.last_only = true;
  return s;
}

}  // namespace data
