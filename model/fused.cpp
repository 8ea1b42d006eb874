#include "model/fused.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/gemm.h"
#include "model/lanes.h"
#include "model/small_attention.h"

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

// The gradient a residual branch adds into x's (RmsNormKeep): every row's
// (period 0) or, with period T, the last position's of each sequence, and
// + 0 to the other rows (as the sum with a zero-filled slice gradient
// does: -0 becomes +0).
template <typename scalar_t>
struct ResidualGrad {
  const scalar_t* g = nullptr;
  int64_t period = 0;
  // Row n's gradient, or null where only 0 is added.
  const scalar_t* row(int64_t n, int64_t d) const {
    if (period == 0)
      return g + n * d;
    return n % period == period - 1 ? g + (n / period) * d : nullptr;
  }
};

// With `residual`, x's gradient is the norm's plus the residual's.
template <typename scalar_t>
void rms_backward(const scalar_t* x, const scalar_t* g, const scalar_t* gy,
                  scalar_t* gx, scalar_t* gg, int64_t rows, int64_t d,
                  const ResidualGrad<scalar_t>* residual) {
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
    if (residual != nullptr) {  // the sum autograd would make, a + b
      if (const scalar_t* add = residual->row(n, d)) {
        for (int64_t j = 0; j < d; ++j)
          gx[j] += add[j];
      } else {
        for (int64_t j = 0; j < d; ++j)
          gx[j] += scalar_t(0);
      }
    }
  }
  for (int64_t j = 0; j < d; ++j) gg[j] = static_cast<scalar_t>(gain_sum[j]);
}

// The norm of a contiguous x by rms_forward.
torch::Tensor rms_norm_of(const torch::Tensor& x, const torch::Tensor& gain) {
  const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
  torch::Tensor y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rms_norm", [&] {
    rms_forward(x.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(),
                y.data_ptr<scalar_t>(), rows, d);
  });
  return y;
}

// {dx, dgain} by rms_backward; with a defined `residual_grad` (x's shape,
// or (B, 1, d) with `last`) x's gradient takes it in.
variable_list rms_gradients(const torch::Tensor& x, const torch::Tensor& gain,
                            const torch::Tensor& grad,
                            const torch::Tensor& residual_grad, bool last) {
  const torch::Tensor gy = grad.contiguous();
  const torch::Tensor gr =
      residual_grad.defined() ? residual_grad.contiguous() : torch::Tensor();
  const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
  torch::Tensor gx = torch::empty_like(x);
  torch::Tensor gg = torch::empty_like(gain);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_rms_norm_backward", [&] {
    ResidualGrad<scalar_t> residual;
    if (gr.defined()) {
      residual.g = gr.data_ptr<scalar_t>();
      residual.period = last ? x.size(1) : 0;
    }
    rms_backward(x.data_ptr<scalar_t>(), gain.data_ptr<scalar_t>(),
                 gy.data_ptr<scalar_t>(), gx.data_ptr<scalar_t>(),
                 gg.data_ptr<scalar_t>(), rows, d,
                 gr.defined() ? &residual : nullptr);
  });
  return {gx, gg};
}

class RmsNorm : public torch::autograd::Function<RmsNorm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor gain) {
    x = x.contiguous();
    gain = gain.contiguous();
    ctx->save_for_backward({x, gain});
    return rms_norm_of(x, gain);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return rms_gradients(saved[0], saved[1], grads[0], {}, false);
  }
};

// RMSNorm of x (B, T, d) that also hands x on as a residual branch's
// input: all of x (a view of it), or with `last` its last position (B, 1,
// d, a copy). x then has one consumer, and its gradient — the norm's plus
// the residual's — is made in the norm's backward loop, where autograd
// summed the two in a pass of its own after the slice's zero-filled
// gradient (the last position) or the other branch's: the same sums.
class RmsNormKeep : public torch::autograd::Function<RmsNormKeep> {
 public:
  static variable_list forward(AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor gain, bool last) {
    x = x.contiguous();
    gain = gain.contiguous();
    ctx->save_for_backward({x, gain});
    ctx->saved_data["last"] = last;
    const int64_t T = x.size(1);
    return {rms_norm_of(x, gain),
            last ? x.narrow(1, T - 1, 1).contiguous() : x.view_as(x)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool last = ctx->saved_data["last"].toBool();
    // An unused residual (no gradient) adds nothing, not even the + 0.
    variable_list out =
        rms_gradients(saved[0], saved[1], grads[0], grads[1], last);
    out.push_back(torch::Tensor());
    return out;
  }
};

// ---------------------------------------------------------------------------
// Rows of a table gathered by index: index_select's function, with a
// backward that adds each gathered row's gradient into its table row in
// index order, as index_select's backward (index_add_ into zeros) does,
// in one loop instead of a LibTorch operation per row.

template <typename scalar_t>
void add_rows(const scalar_t* grad, const int64_t* rows, int64_t n,
              int64_t width, scalar_t* table_grad) {
  for (int64_t i = 0; i < n; ++i, grad += width) {
    scalar_t* out = table_grad + rows[i] * width;
    for (int64_t c = 0; c < width; ++c)
      out[c] += grad[c];
  }
}

class GatherRows : public torch::autograd::Function<GatherRows> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& table,
                               const torch::Tensor& rows) {
    ctx->save_for_backward({rows});
    ctx->saved_data["table_rows"] = table.size(0);
    return table.index_select(0, rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor rows = ctx->get_saved_variables()[0];
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor table_grad = torch::zeros(
        {ctx->saved_data["table_rows"].toInt(), g.size(1)}, g.options());
    AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "gather_rows_backward", [&] {
      add_rows(g.data_ptr<scalar_t>(), rows.data_ptr<int64_t>(), g.size(0),
               g.size(1), table_grad.data_ptr<scalar_t>());
    });
    return {table_grad, torch::Tensor()};
  }
};

// ---------------------------------------------------------------------------
// The forward pass: reference_forward's operations, each speed path where
// `paths` takes it.

namespace F = torch::nn::functional;

torch::Tensor norm(RMSNorm& module, const torch::Tensor& x,
                   const SpeedPaths& paths) {
  return paths.fused_norm ? fused_rms_norm(x, module->gain) : module(x);
}

// The norm of x (B, T, d) and the residual branch's input beside it: x, or
// with `last` its last position (B, 1, d). By the fused kernel one tensor
// hands both on (RmsNormKeep).
struct Normed {
  torch::Tensor n, residual;
};

Normed norm_keep(RMSNorm& module, const torch::Tensor& x, bool last,
                 const SpeedPaths& paths) {
  if (paths.fused_norm) {
    const auto out = fused_rms_norm_keep(x, module->gain, last);
    return {out.first, out.second};
  }
  return {module(x), last ? x.narrow(1, x.size(1) - 1, 1) : x};
}

// x W^T: by the FMA-chain kernels or by LibTorch's linear.
torch::Tensor product(const torch::Tensor& x, const torch::Tensor& weight,
                      const SpeedPaths& paths) {
  return paths.fma_chain ? chain_linear(x, weight) : F::linear(x, weight);
}

torch::Tensor linear(torch::nn::Linear& module, const torch::Tensor& x,
                     const SpeedPaths& paths) {
  return paths.fma_chain ? chain_linear(x, module->weight) : module(x);
}

// residual + x W^T: on the kernels the sum is in the product's stores.
torch::Tensor residual_linear(const torch::Tensor& residual,
                              torch::nn::Linear& module, const torch::Tensor& x,
                              const SpeedPaths& paths) {
  return paths.fma_chain ? chain_linear(x, module->weight, residual)
                         : residual + module(x);
}

// residual + BlockImpl::mlp's W2 silu(W1 n); on the kernels with SiLU and
// the sum in their stores.
torch::Tensor residual_mlp(const torch::Tensor& residual, BlockImpl& block,
                           const torch::Tensor& n, const SpeedPaths& paths) {
  return paths.fma_chain
             ? chain_mlp(n, block.w1->weight, block.w2->weight, residual)
             : residual + block.mlp(n);
}

// Embedding and positional: (B, T, d).
torch::Tensor embed(TransformerImpl& model, const torch::Tensor& tokens,
                    const SpeedPaths& paths) {
  const ModelConfig& config = model.config();
  const int64_t B = tokens.size(0), T = tokens.size(1);
  torch::Tensor x;
  if (paths.one_hot_embedding) {
    x = torch::matmul(
        F::one_hot(tokens, config.vocab_in).to(model.tok_emb.dtype()),
        model.tok_emb);  // (B, T, d)
  } else {
    x = model.tok_emb.index_select(0, tokens.reshape({-1}))
            .view({B, T, config.d_model});  // (B, T, d)
  }
  return model.pos_emb.defined() ? x + model.pos_emb.narrow(1, 0, T) : x;
}

// A block's queries, keys and values as its projection leaves them: packed
// [Q | K | V] in one tensor's columns (the stacked product's output), Q
// apart and [K | V] packed (the stacked product of the last query's
// block), or three tensors. The small-attention kernel reads the packed
// forms as they are, and its gradient is theirs: no split's backward
// gathers three gradients into one.
struct Projected {
  torch::Tensor qkv;  // (B, T, d + 2 kv)
  torch::Tensor kv;   // (B, T, 2 kv), with q below
  Qkv parts;          // q alone beside kv
};

// Projected's three tensors, for the reference attention; with `last` Q of
// the last position only.
Qkv unpack(const Projected& p, bool last, int64_t d) {
  if (p.qkv.defined()) {
    const int64_t kv = (p.qkv.size(-1) - d) / 2;
    const auto parts = p.qkv.split_with_sizes({d, kv, kv}, -1);
    const int64_t T = parts[0].size(1);
    return {last ? parts[0].narrow(1, T - 1, 1) : parts[0], parts[1], parts[2]};
  }
  if (p.kv.defined()) {
    const auto k_v = p.kv.split(p.kv.size(-1) / 2, -1);
    return {p.parts.q, k_v[0], k_v[1]};
  }
  return p.parts;
}

// Q, K and V of the normed input n (B, T, d); with `last`, Q of the last
// position only (B, 1, d).
Projected project(BlockImpl& block, const torch::Tensor& n, bool last,
                  const SpeedPaths& paths) {
  AttentionImpl& attention = *block.attn;
  const int64_t T = n.size(1);
  const torch::Tensor q_in = last ? n.narrow(1, T - 1, 1) : n;
  Projected p;
  if (!paths.fused_qkv) {
    p.parts = {linear(attention.wq, q_in, paths),
               linear(attention.wk, n, paths), linear(attention.wv, n, paths)};
  } else if (last) {
    p.parts.q = linear(attention.wq, q_in, paths);
    p.kv = product(n, torch::cat({attention.wk->weight, attention.wv->weight}),
                   paths);
  } else {
    p.qkv = product(n,
                    torch::cat({attention.wq->weight, attention.wk->weight,
                                attention.wv->weight}),
                    paths);
  }
  return p;
}

// residual + the attention's output (B, T or 1, d), W_O applied.
torch::Tensor attention_output(const torch::Tensor& residual, BlockImpl& block,
                               const Projected& p, bool last,
                               const SpeedPaths& paths) {
  AttentionImpl& attention = *block.attn;
  const int64_t d = attention.wq->weight.size(0);  // Q's width
  if (!paths.small_attention)
    return residual + attention.attend(unpack(p, last, d));
  const int64_t heads = attention.heads();
  const bool causal = attention.causal();
  torch::Tensor attended;
  if (p.qkv.defined() && p.qkv.size(-1) == 3 * d) {
    attended = small_attention_packed(p.qkv, heads, causal, last);
  } else if (p.kv.defined() && p.kv.size(-1) == 2 * d) {
    attended = small_attention_kv(p.parts.q, p.kv, heads, causal);
  } else {  // three tensors (keys and values of another width are refused)
    const Qkv qkv = unpack(p, last, d);
    attended = small_attention(qkv.q, qkv.k, qkv.v, heads, causal);
  }
  return residual_linear(residual, attention.wo, attended, paths);
}

// The block's second half on h, the attention's output with its residual.
torch::Tensor block_mlp(BlockImpl& block, const torch::Tensor& h,
                        const SpeedPaths& paths) {
  const Normed n2 = norm_keep(block.norm2, h, false, paths);
  return residual_mlp(n2.residual, block, n2.n, paths);
}

// The block from its attention's projections and the attention's
// residual (x, or its last position with `last`): (B, T or 1, d).
torch::Tensor finish_block(BlockImpl& block, const torch::Tensor& residual,
                           const Projected& projected, bool last,
                           const SpeedPaths& paths) {
  return block_mlp(
      block, attention_output(residual, block, projected, last, paths), paths);
}

// The first block with its token-wise work done once per row of a table of
// (position, token): row t * V + v holds token v at position t.
torch::Tensor first_block_by_table(TransformerImpl& model,
                                   const torch::Tensor& tokens, bool last,
                                   const SpeedPaths& paths) {
  const ModelConfig& config = model.config();
  const int64_t B = tokens.size(0), T = tokens.size(1), V = config.vocab_in,
                d = config.d_model;
  const torch::Tensor table = (model.pos_emb.narrow(1, 0, T).transpose(0, 1) +
                               model.tok_emb.unsqueeze(0))
                                  .reshape({T * V, d});
  const torch::Tensor rows =  // each input position's table row, (B T)
      (tokens + torch::arange(T, tokens.options()).mul_(V).unsqueeze(0))
          .reshape({-1});
  BlockImpl& block = *model.blocks.front();
  AttentionImpl& attention = *block.attn;
  const torch::Tensor n = norm(block.norm1, table, paths);
  // [Q | K | V] per table row.
  const torch::Tensor projected =
      paths.fused_qkv
          ? product(n,
                    torch::cat({attention.wq->weight, attention.wk->weight,
                                attention.wv->weight}),
                    paths)
          : torch::cat(
                {linear(attention.wq, n, paths), linear(attention.wk, n, paths),
                 linear(attention.wv, n, paths)},
                1);
  const torch::Tensor x = gather_rows(table, rows).view({B, T, d});
  if (paths.table_attention && paths.small_attention && !last &&
      projected.size(1) == 3 * d && at::get_num_threads() == 1) {
    // The kernel reads each position's [Q | K | V] in the table and adds
    // its gradient there: the gather's bits, without the gathered rows.
    // Its backward runs on one thread, hence only where the model does.
    const torch::Tensor attended = small_attention_table(
        projected, rows, T, attention.heads(), attention.causal());
    return block_mlp(block, residual_linear(x, attention.wo, attended, paths),
                     paths);
  }
  // Gathered apart: each gather's backward adds its rows into its own
  // table's gradient.
  Projected p;
  p.qkv = gather_rows(projected, rows).view({B, T, -1});
  return finish_block(block, last ? x.narrow(1, T - 1, 1) : x, p, last, paths);
}

}  // namespace

bool uses_token_table(const ModelConfig& config, int64_t sequences, bool cuda) {
  // Its table holds (position, token) sums of the learned positions.
  return !cuda && sequences > config.vocab_in && !config.rope;
}

SpeedPaths speed_paths(const ModelConfig& config, int64_t sequences,
                       int64_t positions, bool cuda) {
  SpeedPaths paths;
  paths.fused_norm = !cuda;
  paths.one_hot_embedding = cuda;
  paths.token_table = uses_token_table(config, sequences, cuda);
  paths.fused_qkv = true;
  // The kernel has one key/value head per query head and no rotation.
  paths.small_attention = !cuda && positions <= kSmallAttentionMaxPositions &&
                          !config.rope && !config.grouped();
  paths.last_query = true;
  paths.table_attention = paths.token_table && paths.small_attention;
  paths.fma_chain = !cuda && matmul() == Matmul::kFmaChain;
  return paths;
}

torch::Tensor fast_forward(TransformerImpl& model, const torch::Tensor& tokens,
                           const SpeedPaths& paths) {
  const ModelConfig& config = model.config();
  const int64_t T = tokens.size(1);
  const size_t depth = model.blocks.size();
  // In the last block of a last-position model only the last query matters.
  auto last = [&](size_t layer) {
    return paths.last_query && config.last_only && layer + 1 == depth;
  };
  size_t layer = 0;
  torch::Tensor x;  // (B, T, d)
  if (paths.token_table) {
    x = first_block_by_table(model, tokens, last(0), paths);
    layer = 1;
  } else {
    x = embed(model, tokens, paths);
  }
  for (; layer < depth; ++layer) {
    BlockImpl& block = *model.blocks[layer];
    const Normed n1 = norm_keep(block.norm1, x, last(layer), paths);
    const Projected projected = project(block, n1.n, last(layer), paths);
    x = finish_block(block, n1.residual, projected, last(layer), paths);
  }
  x = norm(model.norm_f, x, paths);
  if (config.last_only)  // (B, d)
    x = paths.last_query ? x.squeeze(1) : x.select(1, T - 1);
  return linear(model.head, x, paths);
}

torch::Tensor fast_forward(TransformerImpl& model,
                           const torch::Tensor& tokens) {
  return fast_forward(model, tokens,
                      speed_paths(model.config(), tokens.size(0),
                                  tokens.size(1), tokens.is_cuda()));
}

namespace {

void check_norm_inputs(const torch::Tensor& x, const torch::Tensor& gain,
                       const char* what) {
  check_cpu_float(x, what);
  TORCH_CHECK(x.dim() >= 1 && gain.dim() == 1 && gain.size(0) == x.size(-1),
              what, ": gain ", gain.sizes(), " does not match x ", x.sizes());
  TORCH_CHECK(
      gain.device() == x.device() && gain.scalar_type() == x.scalar_type(),
      what, ": gain and x differ in device or dtype");
}

}  // namespace

torch::Tensor fused_rms_norm(const torch::Tensor& x,
                             const torch::Tensor& gain) {
  check_norm_inputs(x, gain, "fused_rms_norm");
  return RmsNorm::apply(x, gain);
}

std::pair<torch::Tensor, torch::Tensor> fused_rms_norm_keep(
    const torch::Tensor& x, const torch::Tensor& gain, bool last) {
  check_norm_inputs(x, gain, "fused_rms_norm_keep");
  TORCH_CHECK(x.dim() == 3 && x.size(1) >= 1,
              "fused_rms_norm_keep: x must be (B, T, d), got ", x.sizes());
  const auto out = RmsNormKeep::apply(x, gain, last);
  return {out[0], out[1]};
}

torch::Tensor gather_rows(const torch::Tensor& table,
                          const torch::Tensor& rows) {
  check_cpu_float(table, "gather_rows");
  TORCH_CHECK(table.dim() == 2 && rows.dim() == 1 &&
                  rows.scalar_type() == torch::kLong && rows.device().is_cpu(),
              "gather_rows: needs a (R, w) table and int64 CPU rows, got ",
              table.sizes(), " and ", rows.sizes(), " ", rows.scalar_type());
  return GatherRows::apply(table, rows.contiguous());
}

}  // namespace model
