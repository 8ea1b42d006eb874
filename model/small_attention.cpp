#include "model/small_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/lanes.h"

namespace model {

namespace {

std::atomic<int64_t> g_table_calls{0};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows of a (B, T, width) tensor whose last dimension is contiguous, from
// a column offset on: a head's block of Q, K or V, or of their gradients.
template <typename P>
struct Rows {
  P* data;
  int64_t batch_stride, row_stride;
  P* at(int64_t b, int64_t t) const {
    return data + b * batch_stride + t * row_stride;
  }
};

template <typename P>
Rows<P> rows_of(const torch::Tensor& t, int64_t column = 0,
                int64_t first_row = 0) {
  return {
      t.data_ptr<std::remove_const_t<P>>() + column + first_row * t.stride(1),
      t.stride(0), t.stride(1)};
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

Shape shape_of(int64_t B, int64_t Tq, int64_t T, int64_t d, int64_t heads,
               bool causal) {
  Shape s;
  s.B = B;
  s.T = T;
  s.d = d;
  s.Tq = Tq;
  s.heads = heads;
  s.hd = s.d / heads;
  s.causal = causal;
  s.scale = 1.0 / std::sqrt(double(s.hd));
  return s;
}

// Where a pass finds each query, key and value row (B, Tq or T, d), and
// where the backward adds their gradients.
template <typename P>
struct Blocks {
  Rows<P> q, k, v;
};

// Batches ahead of the one a kernel works on whose rows it asks the
// cache for: a batch's rows are a few kilobytes spread over Q, K, V and
// their gradients, read once per pass, and the hardware's prefetch does
// not run far enough ahead of so short a walk per row.
constexpr int64_t kPrefetchAhead = 2;

// Asks for rows first .. first + n - 1 of batch b in `r`, `width` elements
// each from its column; `write` where the kernel will write them.
template <typename P>
void prefetch_rows(const Rows<P>& r, int64_t b, int64_t first, int64_t n,
                   int64_t width, bool write) {
  constexpr int64_t kLine = 64 / sizeof(P);
  for (int64_t t = first; t < first + n; ++t) {
    const P* row = r.at(b, t);
    for (int64_t c = 0; c < width; c += kLine) {
      if (write)
        __builtin_prefetch(row + c, 1, 3);
      else
        __builtin_prefetch(row + c, 0, 3);
    }
  }
}

// Batch b's query, key and value rows (`in`), or their gradients' (`out`).
template <typename P>
void prefetch_blocks(const Shape& s, const Blocks<P>& blocks, int64_t b,
                     bool write) {
  prefetch_rows(blocks.q, b, 0, s.Tq, s.d, write);
  prefetch_rows(blocks.k, b, 0, s.T, s.d, write);
  prefetch_rows(blocks.v, b, 0, s.T, s.d, write);
}

// Batches per task of the thread pool: enough work to pay for a task.
constexpr int64_t kGrain = 16;

// The head width as a compile-time constant where it is one the models use
// (16: the Table-3 model's 64 / 4; 32), so that the dot products and row
// updates unroll and vectorise; 0 where it is only known at run time.
template <int kHd>
using HeadWidth = std::integral_constant<int, kHd>;

template <typename F>
void with_head_width(int64_t hd, F&& f) {
  if (hd == 16)
    return f(HeadWidth<16>{});
  if (hd == 32)
    return f(HeadWidth<32>{});
  f(HeadWidth<0>{});
}

template <int kHd>
int64_t head_width(const Shape& s) {
  return kHd > 0 ? kHd : s.hd;
}

// Each output row's head block is set to zero where the kernel first
// writes it, then accumulated in the order of the sums below: no pass of
// its own zeroes the outputs, and the bits are those of accumulating into
// a zeroed tensor.
template <typename scalar_t>
void zero(scalar_t* row, int64_t n) {
  std::fill(row, row + n, scalar_t(0));
}

// Batch b's probabilities P (B, heads, Tq, T) and output rows Y (B, Tq, d).
template <typename scalar_t, int kHd>
void forward_batch(const Shape& s, const Blocks<const scalar_t>& in,
                   scalar_t* P, scalar_t* Y, int64_t b) {
  const auto scale = static_cast<scalar_t>(s.scale);
  const int64_t hd = head_width<kHd>(s);
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t off = h * hd;
    for (int64_t i = 0; i < s.Tq; ++i) {
      const scalar_t* qi = in.q.at(b, i) + off;
      scalar_t* p = P + ((b * s.heads + h) * s.Tq + i) * s.T;
      const int64_t last = s.last_key(i);
      scalar_t m = -std::numeric_limits<scalar_t>::infinity();
      for (int64_t j = 0; j <= last; ++j) {
        p[j] = dot(qi, in.k.at(b, j) + off, hd) * scale;
        m = std::max(m, p[j]);
      }
      scalar_t sum = 0;
      for (int64_t j = 0; j <= last; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      scalar_t* yi = Y + (b * s.Tq + i) * s.d + off;
      zero(yi, hd);
      for (int64_t j = 0; j <= last; ++j) {
        p[j] /= sum;
        axpy(p[j], in.v.at(b, j) + off, yi, hd);
      }
      for (int64_t j = last + 1; j < s.T; ++j)
        p[j] = 0;
    }
  }
}

template <typename scalar_t, int kHd>
void forward_kernel(const Shape& s, const Blocks<const scalar_t>& in,
                    torch::Tensor& probs, torch::Tensor& y) {
  scalar_t* P = probs.data_ptr<scalar_t>();
  scalar_t* Y = y.data_ptr<scalar_t>();
  at::parallel_for(0, s.B, kGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      if (b + kPrefetchAhead < b1)
        prefetch_blocks(s, in, b + kPrefetchAhead, false);
      forward_batch<scalar_t, kHd>(s, in, P, Y, b);
    }
  });
}

// With S = scale Q K^T, P = softmax(S), Y = P V and G = dL/dY, per head:
// dV = P^T G, dP = G V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale dS K,
// dK = scale dS^T Q. Batch b's rows of `out`'s K and V blocks and its Tq
// query rows are written (zeroed first, then summed into).
template <typename scalar_t, int kHd>
void backward_batch(const Shape& s, const Blocks<const scalar_t>& in,
                    const scalar_t* P, const scalar_t* G,
                    const Blocks<scalar_t>& out, int64_t b) {
  const auto scale = static_cast<scalar_t>(s.scale);
  const int64_t hd = head_width<kHd>(s);
  scalar_t ds[kSmallAttentionMaxPositions];
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t off = h * hd;
    for (int64_t j = 0; j < s.T; ++j) {
      zero(out.k.at(b, j) + off, hd);
      zero(out.v.at(b, j) + off, hd);
    }
    for (int64_t i = 0; i < s.Tq; ++i) {
      const scalar_t* p = P + ((b * s.heads + h) * s.Tq + i) * s.T;
      const scalar_t* gi = G + (b * s.Tq + i) * s.d + off;
      const int64_t last = s.last_key(i);
      scalar_t pdp = 0;  // rowsum(P * dP)
      for (int64_t j = 0; j <= last; ++j) {
        ds[j] = dot(gi, in.v.at(b, j) + off, hd);  // dP
        pdp += p[j] * ds[j];
      }
      scalar_t* gqi = out.q.at(b, i) + off;
      const scalar_t* qi = in.q.at(b, i) + off;
      zero(gqi, hd);
      for (int64_t j = 0; j <= last; ++j) {
        ds[j] = p[j] * (ds[j] - pdp) * scale;
        axpy(ds[j], in.k.at(b, j) + off, gqi, hd);
        axpy(ds[j], qi, out.k.at(b, j) + off, hd);
        axpy(p[j], gi, out.v.at(b, j) + off, hd);
      }
    }
  }
}

// Every batch's gradients into `out`'s rows (see backward_batch).
template <typename scalar_t, int kHd>
void backward_kernel(const Shape& s, const Blocks<const scalar_t>& in,
                     const torch::Tensor& probs, const torch::Tensor& gy,
                     const Blocks<scalar_t>& out) {
  const scalar_t* P = probs.data_ptr<scalar_t>();
  const scalar_t* G = gy.data_ptr<scalar_t>();  // (B, Tq, d) contiguous
  const Rows<const scalar_t> g_rows{G, s.Tq * s.d, s.d};
  at::parallel_for(0, s.B, kGrain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      if (b + kPrefetchAhead < b1) {
        const int64_t a = b + kPrefetchAhead;
        prefetch_blocks(s, in, a, false);
        prefetch_rows(g_rows, a, 0, s.Tq, s.d, false);
        prefetch_blocks(s, out, a, true);
      }
      backward_batch<scalar_t, kHd>(s, in, P, G, out, b);
    }
  });
}

// The forward pass on `in`: Y (B, Tq, d) and the probabilities the
// backward reads.
struct Attended {
  torch::Tensor y, probs;
};

template <typename scalar_t>
Attended forward_pass(const Shape& s, const Blocks<const scalar_t>& in,
                      const torch::TensorOptions& options) {
  Attended out{torch::empty({s.B, s.Tq, s.d}, options),
               torch::empty({s.B, s.heads, s.Tq, s.T}, options)};
  with_head_width(s.hd, [&](auto width) {
    forward_kernel<scalar_t, decltype(width)::value>(s, in, out.probs, out.y);
  });
  return out;
}

// The backward pass into `out`'s rows (see backward_kernel).
template <typename scalar_t>
void backward_pass(const Shape& s, const Blocks<const scalar_t>& in,
                   const torch::Tensor& probs, const torch::Tensor& gy,
                   const Blocks<scalar_t>& out) {
  with_head_width(s.hd, [&](auto width) {
    backward_kernel<scalar_t, decltype(width)::value>(s, in, probs, gy, out);
  });
}

// ---------------------------------------------------------------------------
// Attention on a table's rows: position t of batch b is the table's row
// index[b T + t], [Q | K | V] in its 3d columns. Each batch's rows are
// copied into a buffer of T rows that the kernels above read as a batch
// of its own (batch stride 0): they stay in the L1 cache, and nothing of
// the size of the batch is written.

// Q, K and V blocks of a (T, 3d) buffer, whatever the batch.
template <typename P>
Blocks<P> buffer_blocks(P* buffer, int64_t d) {
  return {
      {buffer, 0, 3 * d}, {buffer + d, 0, 3 * d}, {buffer + 2 * d, 0, 3 * d}};
}

template <typename scalar_t>
void copy_batch(const Shape& s, const scalar_t* table, const int64_t* index,
                int64_t b, scalar_t* buffer) {
  const int64_t width = 3 * s.d;
  for (int64_t t = 0; t < s.T; ++t) {
    const scalar_t* row = table + index[b * s.T + t] * width;
    std::copy(row, row + width, buffer + t * width);
  }
}

template <typename scalar_t>
Attended table_forward(const Shape& s, const scalar_t* table,
                       const int64_t* index,
                       const torch::TensorOptions& options) {
  Attended out{torch::empty({s.B, s.Tq, s.d}, options),
               torch::empty({s.B, s.heads, s.Tq, s.T}, options)};
  scalar_t* P = out.probs.data_ptr<scalar_t>();
  scalar_t* Y = out.y.data_ptr<scalar_t>();
  with_head_width(s.hd, [&](auto hd) {
    at::parallel_for(0, s.B, kGrain, [&](int64_t b0, int64_t b1) {
      std::vector<scalar_t> buffer(s.T * 3 * s.d);
      const auto in = buffer_blocks<const scalar_t>(buffer.data(), s.d);
      for (int64_t b = b0; b < b1; ++b) {
        copy_batch(s, table, index, b, buffer.data());
        forward_batch<scalar_t, decltype(hd)::value>(s, in, P, Y, b);
      }
    });
  });
  return out;
}

// Batch by batch, in order and on this thread: its [Q | K | V] gradient
// rows into a buffer, then each row added into its table row's gradient,
// in the order of the rows. The bits of writing the gathered rows'
// gradient and adding it into the table by gather_rows' backward.
template <typename scalar_t>
void table_backward(const Shape& s, const scalar_t* table, const int64_t* index,
                    const torch::Tensor& probs, const torch::Tensor& gy,
                    scalar_t* table_grad) {
  const scalar_t* P = probs.data_ptr<scalar_t>();
  const scalar_t* G = gy.data_ptr<scalar_t>();  // (B, T, d) contiguous
  const int64_t width = 3 * s.d;
  std::vector<scalar_t> rows(s.T * width), grads(s.T * width);
  const auto in = buffer_blocks<const scalar_t>(rows.data(), s.d);
  const auto out = buffer_blocks<scalar_t>(grads.data(), s.d);
  with_head_width(s.hd, [&](auto hd) {
    for (int64_t b = 0; b < s.B; ++b) {
      copy_batch(s, table, index, b, rows.data());
      backward_batch<scalar_t, decltype(hd)::value>(s, in, P, G, out, b);
      for (int64_t t = 0; t < s.T; ++t) {
        const scalar_t* g = grads.data() + t * width;
        scalar_t* row = table_grad + index[b * s.T + t] * width;
        for (int64_t c = 0; c < width; ++c)
          row[c] += g[c];
      }
    }
  });
}

torch::Tensor last_dim_contiguous(const torch::Tensor& t) {
  return t.stride(-1) == 1 ? t : t.contiguous();
}

void save_shape(AutogradContext* ctx, int64_t heads, bool causal) {
  ctx->saved_data["heads"] = heads;
  ctx->saved_data["causal"] = causal;
}

// q (B, Tq, d), k and v (B, T, d): small_attention.
class SmallAttention : public torch::autograd::Function<SmallAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q,
                               torch::Tensor k, torch::Tensor v,
                               int64_t heads, bool causal) {
    q = last_dim_contiguous(q);
    k = last_dim_contiguous(k);
    v = last_dim_contiguous(v);
    const Shape s =
        shape_of(k.size(0), q.size(1), k.size(1), k.size(2), heads, causal);
    Attended a;
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "small_attention", [&] {
      a = forward_pass<scalar_t>(
          s,
          {rows_of<const scalar_t>(q), rows_of<const scalar_t>(k),
           rows_of<const scalar_t>(v)},
          q.options());
    });
    ctx->save_for_backward({q, k, v, a.probs});
    save_shape(ctx, heads, causal);
    return a.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2],
                        &probs = saved[3];
    const Shape s = shape_of(k.size(0), q.size(1), k.size(1), k.size(2),
                             ctx->saved_data["heads"].toInt(),
                             ctx->saved_data["causal"].toBool());
    const torch::Tensor gy = grads[0].contiguous();
    torch::Tensor gq = torch::empty({s.B, s.Tq, s.d}, q.options());
    torch::Tensor gk = torch::empty({s.B, s.T, s.d}, q.options());
    torch::Tensor gv = torch::empty({s.B, s.T, s.d}, q.options());
    AT_DISPATCH_FLOATING_TYPES(
        q.scalar_type(), "small_attention_backward", [&] {
          backward_pass<scalar_t>(
              s,
              {rows_of<const scalar_t>(q), rows_of<const scalar_t>(k),
               rows_of<const scalar_t>(v)},
              probs, gy,
              {rows_of<scalar_t>(gq), rows_of<scalar_t>(gk),
               rows_of<scalar_t>(gv)});
        });
    return {gq, gk, gv, torch::Tensor(), torch::Tensor()};
  }
};

// Attention on packed inputs: K and V in the last 2d columns of `kv`
// (B, T, width); Q in its first d columns (width 3d, the last Tq positions'
// rows) where `q` is null, else *q (B, Tq, d).
template <typename P>
Blocks<P> packed_blocks(const Shape& s, const torch::Tensor* q,
                        const torch::Tensor& kv) {
  const int64_t width = kv.size(2);
  return {q ? rows_of<P>(*q) : rows_of<P>(kv, 0, s.T - s.Tq),
          rows_of<P>(kv, width - 2 * s.d), rows_of<P>(kv, width - s.d)};
}

Attended packed_forward(const Shape& s, const torch::Tensor* q,
                        const torch::Tensor& kv) {
  Attended a;
  AT_DISPATCH_FLOATING_TYPES(kv.scalar_type(), "small_attention", [&] {
    a = forward_pass<scalar_t>(s, packed_blocks<const scalar_t>(s, q, kv),
                               kv.options());
  });
  return a;
}

// The gradients into *gq (where q is given) and gkv, kv's shape, both
// written whole: the packed layout is kept, so no split's backward gathers
// Q's, K's and V's gradients into one. Where Q sits in gkv for the last Tq
// positions only, the earlier positions' Q rows are zero.
void packed_backward(const Shape& s, const torch::Tensor* q,
                     const torch::Tensor& kv, const torch::Tensor& probs,
                     const torch::Tensor& gy, torch::Tensor* gq,
                     torch::Tensor& gkv) {
  if (gq == nullptr && s.Tq < s.T)
    gkv.narrow(1, 0, s.T - s.Tq).narrow(2, 0, s.d).zero_();
  AT_DISPATCH_FLOATING_TYPES(kv.scalar_type(), "small_attention_backward", [&] {
    backward_pass<scalar_t>(s, packed_blocks<const scalar_t>(s, q, kv), probs,
                            gy.contiguous(),
                            packed_blocks<scalar_t>(s, gq, gkv));
  });
}

// [Q | K | V] (B, T, 3d), queries at the last `tq` positions:
// small_attention_packed.
class PackedAttention : public torch::autograd::Function<PackedAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor qkv,
                               int64_t heads, bool causal, int64_t tq) {
    qkv = last_dim_contiguous(qkv);
    const Shape s = shape(qkv, heads, causal, tq);
    const Attended a = packed_forward(s, nullptr, qkv);
    ctx->save_for_backward({qkv, a.probs});
    save_shape(ctx, heads, causal);
    ctx->saved_data["tq"] = tq;
    return a.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &qkv = saved[0], &probs = saved[1];
    const Shape s = shape(qkv, ctx->saved_data["heads"].toInt(),
                          ctx->saved_data["causal"].toBool(),
                          ctx->saved_data["tq"].toInt());
    torch::Tensor g = torch::empty_like(qkv);
    packed_backward(s, nullptr, qkv, probs, grads[0], nullptr, g);
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  static Shape shape(const torch::Tensor& qkv, int64_t heads, bool causal,
                     int64_t tq) {
    return shape_of(qkv.size(0), tq, qkv.size(1), qkv.size(2) / 3, heads,
                    causal);
  }
};

// q (B, Tq, d) and [K | V] (B, T, 2d): small_attention_kv.
class KvAttention : public torch::autograd::Function<KvAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q,
                               torch::Tensor kv, int64_t heads, bool causal) {
    q = last_dim_contiguous(q);
    kv = last_dim_contiguous(kv);
    const Attended a = packed_forward(shape(q, kv, heads, causal), &q, kv);
    ctx->save_for_backward({q, kv, a.probs});
    save_shape(ctx, heads, causal);
    return a.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &kv = saved[1], &probs = saved[2];
    const Shape s = shape(q, kv, ctx->saved_data["heads"].toInt(),
                          ctx->saved_data["causal"].toBool());
    torch::Tensor gq = torch::empty_like(q);
    torch::Tensor gkv = torch::empty_like(kv);
    packed_backward(s, &q, kv, probs, grads[0], &gq, gkv);
    return {gq, gkv, torch::Tensor(), torch::Tensor()};
  }

 private:
  static Shape shape(const torch::Tensor& q, const torch::Tensor& kv,
                     int64_t heads, bool causal) {
    return shape_of(kv.size(0), q.size(1), kv.size(1), q.size(2), heads,
                    causal);
  }
};

// [Q | K | V] rows of a (R, 3d) table, batch b's position t at the table's
// row rows[b T + t]: small_attention_table.
class TableAttention : public torch::autograd::Function<TableAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor table,
                               const torch::Tensor& rows, int64_t positions,
                               int64_t heads, bool causal) {
    table = table.contiguous();
    const Shape s = shape(table, rows, positions, heads, causal);
    Attended a;
    AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "small_attention", [&] {
      a = table_forward<scalar_t>(s, table.data_ptr<scalar_t>(),
                                  rows.data_ptr<int64_t>(), table.options());
    });
    ctx->save_for_backward({table, rows, a.probs});
    save_shape(ctx, heads, causal);
    ctx->saved_data["positions"] = positions;
    return a.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &table = saved[0], &rows = saved[1], &probs = saved[2];
    const Shape s = shape(table, rows, ctx->saved_data["positions"].toInt(),
                          ctx->saved_data["heads"].toInt(),
                          ctx->saved_data["causal"].toBool());
    const torch::Tensor gy = grads[0].contiguous();
    torch::Tensor table_grad = torch::zeros_like(table);
    AT_DISPATCH_FLOATING_TYPES(
        table.scalar_type(), "small_attention_backward", [&] {
          table_backward<scalar_t>(s, table.data_ptr<scalar_t>(),
                                   rows.data_ptr<int64_t>(), probs, gy,
                                   table_grad.data_ptr<scalar_t>());
        });
    return {table_grad, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }

 private:
  static Shape shape(const torch::Tensor& table, const torch::Tensor& rows,
                     int64_t positions, int64_t heads, bool causal) {
    return shape_of(rows.size(0) / positions, positions, positions,
                    table.size(1) / 3, heads, causal);
  }
};

void check_inputs(const torch::Tensor& q, const torch::Tensor& k,
                  const torch::Tensor& v, int64_t heads) {
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
}

}  // namespace

torch::Tensor small_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, int64_t heads,
                              bool causal) {
  check_inputs(q, k, v, heads);
  return SmallAttention::apply(q, k, v, heads, causal);
}

torch::Tensor small_attention_packed(const torch::Tensor& qkv, int64_t heads,
                                     bool causal, bool last_query) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0,
              "small_attention_packed: qkv must be (B, T, 3d), got ",
              qkv.sizes());
  const auto parts = qkv.chunk(3, -1);
  const int64_t T = qkv.size(1), tq = last_query ? 1 : T;
  check_inputs(parts[0].narrow(1, T - tq, tq), parts[1], parts[2], heads);
  return PackedAttention::apply(qkv, heads, causal, tq);
}

torch::Tensor small_attention_kv(const torch::Tensor& q,
                                 const torch::Tensor& kv, int64_t heads,
                                 bool causal) {
  TORCH_CHECK(kv.dim() == 3 && kv.size(2) % 2 == 0,
              "small_attention_kv: kv must be (B, T, 2d), got ", kv.sizes());
  const auto parts = kv.chunk(2, -1);
  check_inputs(q, parts[0], parts[1], heads);
  return KvAttention::apply(q, kv, heads, causal);
}

torch::Tensor small_attention_table(const torch::Tensor& table,
                                    const torch::Tensor& rows,
                                    int64_t positions, int64_t heads,
                                    bool causal) {
  TORCH_CHECK(
      table.device().is_cpu() && (table.scalar_type() == torch::kFloat ||
                                  table.scalar_type() == torch::kDouble),
      "small_attention_table: a float32 or float64 CPU table, got ",
      table.scalar_type(), " on ", table.device());
  TORCH_CHECK(table.dim() == 2 && table.size(1) % 3 == 0 && table.size(1) > 0,
              "small_attention_table: table must be (R, 3d), got ",
              table.sizes());
  TORCH_CHECK(rows.dim() == 1 && rows.scalar_type() == torch::kLong &&
                  rows.device().is_cpu(),
              "small_attention_table: rows must be int64 CPU (B T), got ",
              rows.sizes(), " ", rows.scalar_type());
  TORCH_CHECK(positions >= 1 && positions <= kSmallAttentionMaxPositions &&
                  rows.size(0) % positions == 0,
              "small_attention_table: ", rows.size(0),
              " rows are not whole sequences of ", positions, " positions");
  if (rows.numel() > 0) {
    const auto [low, high] = at::aminmax(rows);
    TORCH_CHECK(
        low.item<int64_t>() >= 0 && high.item<int64_t>() < table.size(0),
        "small_attention_table: a row outside the table's ", table.size(0));
  }
  const int64_t d = table.size(1) / 3;
  TORCH_CHECK(heads >= 1 && d % heads == 0, "small_attention_table: d ", d,
              " is not divisible by heads ", heads);
  ++g_table_calls;
  return TableAttention::apply(table, rows.contiguous(), positions, heads,
                               causal);
}

int64_t small_attention_table_calls() {
  return g_table_calls;
}

}  // namespace model
