#include "optim/scalar_adam.h"

namespace optim {

torch::Tensor ScalarAdam::denominator(const torch::Tensor&, double,
                                      const torch::Tensor& rms,
                                      const ScalarAdamOptions& options) const {
  return rms + options.eps();
}

}  // namespace optim
