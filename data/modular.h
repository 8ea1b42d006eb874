// Modular addition (docs/protocol.md §4): inputs (a, b, '=') with '=' the token
// p, target (a + b) mod p. All p^2 pairs, permuted by a CPU generator seeded
// with the data seed; the first floor(0.4 p^2) train, the rest validate.
#pragma once

#include "data/task.h"

namespace data {

class ModularAddition : public Task {
 public:
  ModularAddition(int64_t p, uint64_t data_seed, const torch::Device& device);

  std::string name() const override;
  TaskShape shape() const override;
  Batch train_batch(int64_t /*step*/) const override { return train_; }
  const Batch& validation() const override { return val_; }

  int64_t modulus() const { return p_; }

 private:
  int64_t p_;
  Batch train_;  // full batch: every step sees the whole train split
  Batch val_;
};

}  // namespace data
