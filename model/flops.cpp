#include "model/flops.h"

#include "model/fused.h"

namespace model {

namespace {

// x W^T with W (out x in) on `rows` rows: forward, dX, dW.
void linear(std::vector<MatmulShape>& out, int64_t rows, int64_t in,
            int64_t outd) {
  out.push_back({rows, in, outd});   // Y = X W^T
  out.push_back({rows, outd, in});   // dX = dY W
  out.push_back({outd, rows, in, 1, true});  // dW = dY^T X
}

// Per sequence and head: S = Q K^T (tq x hd)(hd x t), Y = A V (tq x t)(t x
// hd), and backward dA = dY V^T, dV = A^T dY, dQ = dS K, dK = dS^T Q.
void attention(std::vector<MatmulShape>& out, int64_t batch, int64_t tq,
               int64_t t, int64_t hd) {
  out.push_back({tq, hd, t, batch});
  out.push_back({tq, t, hd, batch});
  out.push_back({tq, hd, t, batch});
  out.push_back({t, tq, hd, batch});
  out.push_back({tq, t, hd, batch});
  out.push_back({t, tq, hd, batch});
}

}  // namespace

std::vector<MatmulShape> training_step_matmuls(const ModelConfig& cfg,
                                               int64_t sequences, int64_t len,
                                               bool cuda) {
  std::vector<MatmulShape> out;
  const int64_t d = cfg.d_model, all = sequences * len;
  const bool table = uses_token_table(cfg, sequences, cuda);
  for (int64_t l = 0; l < cfg.depth; ++l) {
    const bool last = cfg.last_only && l + 1 == cfg.depth;
    const int64_t q_rows = last ? sequences : all;
    // The first block's projections on the token table: one row per
    // (token, position), queries included.
    const int64_t kv_in = l == 0 && table ? cfg.vocab_in * len : all;
    const int64_t q_in = l == 0 && table ? kv_in : q_rows;
    linear(out, q_in, d, d);   // W_Q
    const int64_t kv = cfg.kv_head_count() * cfg.head_dim();
    linear(out, kv_in, d, kv);  // W_K
    linear(out, kv_in, d, kv);  // W_V
    attention(out, sequences * cfg.heads, last ? 1 : len, len,
              cfg.head_dim());
    linear(out, q_rows, d, d);        // W_O
    linear(out, q_rows, d, cfg.mlp);  // W1
    linear(out, q_rows, cfg.mlp, d);  // W2
  }
  linear(out, cfg.last_only ? sequences : all, d, cfg.vocab_out);  // head
  return out;
}

double total_flops(const std::vector<MatmulShape>& shapes) {
  double f = 0;
  for (const auto& s : shapes) f += s.flops();
  return f;
}

}  // namespace model
