#include "model/fused.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/lanes.h"

namespace model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_cpu_float(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), what, ": CPU tensors only, got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat ||
                  t.scalar_type() == torch::kDouble,
              what, ": float32 or float64 only, got ", t.scalar_type());
}

// ---------------------------------------------------------------------------
// RMSNorm: y = x r g per row, r = sqrt(d) / ||x||. With t = dL/dy * g:
// dL/dx = r t - (r^3 / d) (t . x) x and dL/dg = sum over rows of dL/dy x r.

template <typename scalar_t>
scalar_t row_factor(const scalar_t* x, int64_t d) {
  return static_cast<scalar_t>(std::sqrt(double(d))) /
         std::sqrt(lanes::dot(x, x, d));
}

template <typename scalar_t>
void rms_forward(const scalar_t* x, const scalar_t* g, scalar_t* y,
                 int64_t rows, int64_t d) {
  for (int64_t n = 0; n < rows; ++n, x += d, y += d) {
    const scalar_t r = row_factor(x, d);
    for (int64_t j = 0; j < d; ++j) y[j] = x[j] * r * g[j];
  }
}

template <typename scalar_t>
void rms_backward(const scalar_t* x, const scalar_t* g, const scalar_t* gy,
                  scalar_t* gx, scalar_t* gg, int64_t rows, int64_t d) {
  std::vector<scalar_t> t(d);
  std::vector<double> gain_sum(d, 0.0);  // in row order, in double
  for (int64_t n = 0; n < rows; ++n, x += d, gy += d, gx += d) {
    const scalar_t r = row_factor(x, d);
    for (int64_t j = 0; j < d; ++j) t[j] = gy[j] * g[j];
    const scalar_t c = r * r * r / static_cast<scalar_t>(d) *
                       lanes::dot(t.data(), x, d);
    for (int64_t j = 0; j < d; ++j) {
      gx[j] = r * t[j] - c * x[j];
      gain_sum[j] += static_cast<double>(gy[j] * x[j] * r);
    }
  }
  for (int64_t j = 0; j < d; ++j) gg[j] = static_cast<scalar_t>(gain_sum[j]);
}

class RmsNorm : public torch::autograd::Function<RmsNorm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor gain) {
    x = x.contiguous();
    gain = gain.contiguous();
    const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
    torch::Tensor y = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rms_norm", [&] {
      rms_forward(x.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(),
                  y.data_ptr<scalar_t>(), rows, d);
    });
    ctx->save_for_backward({x, gain});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &gain = saved[1];
    const torch::Tensor gy = grads[0].contiguous();
    const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
    torch::Tensor gx = torch::empty_like(x);
    torch::Tensor gg = torch::empty_like(gain);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rms_norm_backward",
                               [&] {
                                 rms_backward(x.data_ptr<scalar_t>(),
                                              gain.data_ptr<scalar_t>(),
                                              gy.data_ptr<scalar_t>(),
                                              gx.data_ptr<scalar_t>(),
                                              gg.data_ptr<scalar_t>(), rows,
                                              d);
                               });
    return {gx, gg};
  }
};

}  // namespace

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& gain) {
  check_cpu_float(x, "fused_rms_norm");
  TORCH_CHECK(x.dim() >= 1 && gain.dim() == 1 && gain.size(0) == x.size(-1),
              "fused_rms_norm: gain ", gain.sizes(), " does not match x ",
              x.sizes());
  TORCH_CHECK(gain.device() == x.device() &&
                  gain.scalar_type() == x.scalar_type(),
              "fused_rms_norm: gain and x differ in device or dtype");
  return RmsNorm::apply(x, gain);
}

}  // namespace model
