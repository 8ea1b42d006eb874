#include "model/small_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/lanes.h"

namespace model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows of a (B, T, d) tensor whose last dimension is contiguous.
template <typename scalar_t>
struct Rows {
  const scalar_t* data;
  int64_t batch_stride, row_stride;
  const scalar_t* at(int64_t b, int64_t t) const {
    return data + b * batch_stride + t * row_stride;
  }
};

template <typename scalar_t>
Rows<scalar_t> rows_of(const torch::Tensor& t) {
  return {t.data_ptr<scalar_t>(), t.stride(0), t.stride(1)};
}

using lanes::axpy;
using lanes::dot;

struct Shape {
  int64_t B, Tq, T, heads, hd, d;
  bool causal;
  double scale;
  // The last key position query i sees.
  int64_t last_key(int64_t i) const { return causal ? T - Tq + i : T - 1; }
};

Shape shape_of(const torch::Tensor& q, const torch::Tensor& k, int64_t heads,
               bool causal) {
  Shape s;
  s.B = k.size(0);
  s.T = k.size(1);
  s.d = k.size(2);
  s.Tq = q.size(1);
  s.heads = heads;
  s.hd = s.d / heads;
  s.causal = causal;
  s.scale = 1.0 / std::sqrt(double(s.hd));
  return s;
}

// Batches per task of the thread pool: enough work to pay for a task.
constexpr int64_t kGrain = 16;

template <typename scalar_t>
void forward_kernel(const Shape& s, const torch::Tensor& q,
                    const torch::Tensor& k, const torch::Tensor& v,
                    torch::Tensor& probs, torch::Tensor& y) {
  const auto Q = rows_of<scalar_t>(q), K = rows_of<scalar_t>(k),
             V = rows_of<scalar_t>(v);
  scalar_t* P = probs.data_ptr<scalar_t>();  // (B, heads, Tq, T)
  scalar_t* Y = y.data_ptr<scalar_t>();      // (B, Tq, d), zeros
  const auto scale = static_cast<scalar_t>(s.scale);
  at::parallel_for(0, s.B, kGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t off = h * s.hd;
        for (int64_t i = 0; i < s.Tq; ++i) {
          const scalar_t* qi = Q.at(b, i) + off;
          scalar_t* p = P + ((b * s.heads + h) * s.Tq + i) * s.T;
          const int64_t last = s.last_key(i);
          scalar_t m = -std::numeric_limits<scalar_t>::infinity();
          for (int64_t j = 0; j <= last; ++j) {
            p[j] = dot(qi, K.at(b, j) + off, s.hd) * scale;
            m = std::max(m, p[j]);
          }
          scalar_t sum = 0;
          for (int64_t j = 0; j <= last; ++j) {
            p[j] = std::exp(p[j] - m);
            sum += p[j];
          }
          scalar_t* yi = Y + (b * s.Tq + i) * s.d + off;
          for (int64_t j = 0; j <= last; ++j) {
            p[j] /= sum;
            axpy(p[j], V.at(b, j) + off, yi, s.hd);
          }
          for (int64_t j = last + 1; j < s.T; ++j) p[j] = 0;
        }
      }
    }
  });
}

// With S = scale Q K^T, P = softmax(S), Y = P V and G = dL/dY, per head:
// dV = P^T G, dP = G V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale dS K,
// dK = scale dS^T Q.
template <typename scalar_t>
void backward_kernel(const Shape& s, const torch::Tensor& q,
                     const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& probs, const torch::Tensor& gy,
                     torch::Tensor& gq, torch::Tensor& gk, torch::Tensor& gv) {
  const auto Q = rows_of<scalar_t>(q), K = rows_of<scalar_t>(k),
             V = rows_of<scalar_t>(v);
  const scalar_t* P = probs.data_ptr<scalar_t>();
  const scalar_t* G = gy.data_ptr<scalar_t>();  // (B, Tq, d) contiguous
  scalar_t* GQ = gq.data_ptr<scalar_t>();       // zeros, contiguous
  scalar_t* GK = gk.data_ptr<scalar_t>();
  scalar_t* GV = gv.data_ptr<scalar_t>();
  const auto scale = static_cast<scalar_t>(s.scale);
  at::parallel_for(0, s.B, kGrain, [&](int64_t b0, int64_t b1) {
    scalar_t ds[kSmallAttentionMaxPositions];
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t off = h * s.hd;
        for (int64_t i = 0; i < s.Tq; ++i) {
          const scalar_t* p = P + ((b * s.heads + h) * s.Tq + i) * s.T;
          const scalar_t* gi = G + (b * s.Tq + i) * s.d + off;
          const int64_t last = s.last_key(i);
          scalar_t pdp = 0;  // rowsum(P * dP)
          for (int64_t j = 0; j <= last; ++j) {
            ds[j] = dot(gi, V.at(b, j) + off, s.hd);  // dP
            pdp += p[j] * ds[j];
          }
          scalar_t* gqi = GQ + (b * s.Tq + i) * s.d + off;
          const scalar_t* qi = Q.at(b, i) + off;
          for (int64_t j = 0; j <= last; ++j) {
            ds[j] = p[j] * (ds[j] - pdp) * scale;
            axpy(ds[j], K.at(b, j) + off, gqi, s.hd);
            axpy(ds[j], qi, GK + (b * s.T + j) * s.d + off, s.hd);
            axpy(p[j], gi, GV + (b * s.T + j) * s.d + off, s.hd);
          }
        }
      }
    }
  });
}

torch::Tensor last_dim_contiguous(const torch::Tensor& t) {
  return t.stride(2) == 1 ? t : t.contiguous();
}

class SmallAttention : public torch::autograd::Function<SmallAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q,
                               torch::Tensor k, torch::Tensor v,
                               int64_t heads, bool causal) {
    q = last_dim_contiguous(q);
    k = last_dim_contiguous(k);
    v = last_dim_contiguous(v);
    const Shape s = shape_of(q, k, heads, causal);
    torch::Tensor probs = torch::empty({s.B, s.heads, s.Tq, s.T}, q.options());
    torch::Tensor y = torch::zeros({s.B, s.Tq, s.d}, q.options());
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "small_attention", [&] {
      forward_kernel<scalar_t>(s, q, k, v, probs, y);
    });
    ctx->save_for_backward({q, k, v, probs});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["causal"] = causal;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2],
                        &probs = saved[3];
    const Shape s = shape_of(q, k, ctx->saved_data["heads"].toInt(),
                             ctx->saved_data["causal"].toBool());
    const torch::Tensor gy = grads[0].contiguous();
    torch::Tensor gq = torch::zeros({s.B, s.Tq, s.d}, q.options());
    torch::Tensor gk = torch::zeros({s.B, s.T, s.d}, q.options());
    torch::Tensor gv = torch::zeros({s.B, s.T, s.d}, q.options());
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "small_attention_backward",
                               [&] {
                                 backward_kernel<scalar_t>(s, q, k, v, probs,
                                                           gy, gq, gk, gv);
                               });
    return {gq, gk, gv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor small_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t heads,
                              bool causal) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
              "small_attention: q, k, v must be (B, T, d), got ", q.sizes(),
              ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2),
              "small_attention: mismatched shapes q ", q.sizes(), ", k ",
              k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(q.size(1) >= 1 && q.size(1) <= k.size(1) &&
                  k.size(1) <= kSmallAttentionMaxPositions,
              "small_attention: needs 1 <= Tq <= T <= ",
              kSmallAttentionMaxPositions, ", got Tq ", q.size(1), ", T ",
              k.size(1));
  TORCH_CHECK(heads >= 1 && k.size(2) % heads == 0, "small_attention: d ",
              k.size(2), " is not divisible by heads ", heads);
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() &&
                  v.device().is_cpu(),
              "small_attention: CPU tensors only");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() &&
                  q.scalar_type() == v.scalar_type(),
              "small_attention: q, k, v of one dtype");
  return SmallAttention::apply(q, k, v, heads, causal);
}

}  // namespace model
