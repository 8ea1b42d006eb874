// Mean cross-entropy written as log-softmax times a one-hot target: its
// backward is elementwise, hence deterministic on every device (the gather /
// scatter behind nll_loss is not on CUDA).
#pragma once

#include <torch/torch.h>

namespace model {

// logits (..., V), targets (...) int64 -> scalar mean over all positions.
inline torch::Tensor cross_entropy(const torch::Tensor& logits,
                                   const torch::Tensor& targets) {
  const int64_t V = logits.size(-1);
  auto logp = torch::log_softmax(logits.reshape({-1, V}), -1);  // (N, V)
  auto onehot = torch::nn::functional::one_hot(targets.reshape({-1}), V)
                    .to(logp.dtype());  // (N, V)
  return -(logp * onehot).sum(-1).mean();
}

}  // namespace model
