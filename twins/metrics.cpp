#include "twins/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/loss.h"

namespace twins {

double relative_distance(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor x = a.to(torch::kDouble), y = b.to(torch::kDouble);
  const double num = (x - y).norm().item<double>();
  const double den = 0.5 * (x.norm().item<double>() + y.norm().item<double>());
  return num / (den + 1e-12);
}

namespace {

// (H, hd, d): the key (or value) head of each of the H query heads.
torch::Tensor per_query_head(const torch::Tensor& w, int64_t heads,
                             int64_t hd) {
  const int64_t kv = w.size(0) / hd, d = w.size(1);
  torch::Tensor blocks = w.view({kv, hd, d});
  return kv == heads
             ? blocks
             : model::repeat_heads(blocks.unsqueeze(0), heads / kv).squeeze(0);
}

// (H, d, d): P_h = W_Q,h^T W_K,h for every head of one layer.
torch::Tensor qk_products(const model::Block& block, int64_t heads) {
  const auto& wq = block->attn->wq->weight;  // (d, d), rows = heads x hd
  const int64_t d = wq.size(1), hd = wq.size(0) / heads;
  torch::Tensor q = wq.view({heads, hd, d});
  torch::Tensor k = per_query_head(block->attn->wk->weight, heads, hd);
  return torch::bmm(q.transpose(1, 2), k);  // (H, d, d)
}

// (H, d, d): M_h = W_O,h W_V,h for every head of one layer.
torch::Tensor vo_products(const model::Block& block, int64_t heads) {
  const auto& wo = block->attn->wo->weight;  // (d, d), columns = heads x hd
  const int64_t d = wo.size(0), hd = wo.size(1) / heads;
  torch::Tensor o = wo.view({d, heads, hd}).permute({1, 0, 2});  // (H, d, hd)
  torch::Tensor v = per_query_head(block->attn->wv->weight, heads, hd);
  return torch::bmm(o, v);  // (H, d, d)
}

using Products = torch::Tensor (*)(const model::Block&, int64_t);

std::vector<double> drift_per_head(const model::Transformer& m1,
                                   const model::Transformer& m2,
                                   Products products) {
  torch::NoGradGuard no_grad;
  const int64_t heads = m1->config().heads;
  std::vector<torch::Tensor> per_layer;
  for (size_t l = 0; l < m1->blocks.size(); ++l) {
    torch::Tensor p1 = products(m1->blocks[l], heads).to(torch::kDouble);
    torch::Tensor p2 = products(m2->blocks[l], heads).to(torch::kDouble);
    auto n1 = p1.flatten(1).norm(2, {1}), n2 = p2.flatten(1).norm(2, {1});
    auto diff = (p1 - p2).flatten(1).norm(2, {1});
    // 0 where the two products are bitwise equal (also when both are 0).
    per_layer.push_back(diff / (0.5 * (n1 + n2) + 1e-12));
  }
  torch::Tensor all = torch::cat(per_layer).cpu();
  return std::vector<double>(all.data_ptr<double>(),
                             all.data_ptr<double>() + all.numel());
}

}  // namespace

void summarise(const std::vector<double>& per_head, double* mean, double* max) {
  if (per_head.empty()) {
    *mean = *max = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  double sum = 0, mx = 0;
  for (double v : per_head) {
    sum += v;
    if (std::isnan(v) || v > mx)
      mx = v;
  }
  *mean = sum / double(per_head.size());
  *max = mx;
}

std::vector<double> qk_drift_per_head(const model::Transformer& m1,
                                      const model::Transformer& m2) {
  return drift_per_head(m1, m2, qk_products);
}

std::vector<double> vo_drift_per_head(const model::Transformer& m1,
                                      const model::Transformer& m2) {
  return drift_per_head(m1, m2, vo_products);
}

Evaluation evaluate(model::Transformer& model, const data::Task& task) {
  torch::NoGradGuard no_grad;
  const data::Batch& val = task.validation();
  Evaluation e;
  e.logits = model->forward(val.x);
  e.loss = model::cross_entropy(e.logits, val.y).item<double>();
  e.accuracy =
      e.logits.argmax(-1).eq(val.y).to(torch::kDouble).mean().item<double>();
  return e;
}

CurvePoint compare(const Evaluation& e1, const model::Transformer& m1,
                   const Evaluation& e2, const model::Transformer& m2,
                   int64_t step, bool vo) {
  torch::NoGradGuard no_grad;
  CurvePoint c;
  c.step = step;
  c.logit_drift = relative_distance(e1.logits, e2.logits);
  c.val_loss = {e1.loss, e2.loss};
  c.val_acc = {e1.accuracy, e2.accuracy};
  summarise(qk_drift_per_head(m1, m2), &c.qk_drift_mean, &c.qk_drift_max);
  if (vo)
    summarise(vo_drift_per_head(m1, m2), &c.vo_drift_mean, &c.vo_drift_max);
  c.train_loss = {std::numeric_limits<double>::quiet_NaN(),
                  std::numeric_limits<double>::quiet_NaN()};
  return c;
}

std::vector<int64_t> checkpoint_steps(int64_t steps,
                                      const std::vector<int64_t>& extra,
                                      int64_t stop_after) {
  std::vector<int64_t> out;
  for (int64_t s :
       {0, 1, 2, 3, 5, 10, 50, 100, 300, 600, 1000, 1500, 2000, 3000}) {
    if (s <= steps)
      out.push_back(s);
  }
  out.push_back(steps);
  for (int64_t s : extra) {
    if (s >= 0 && s <= steps)
      out.push_back(s);
  }
  if (stop_after > 0) {
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&](int64_t s) { return s > stop_after; }),
              out.end());
    out.push_back(stop_after);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double Commutation::largest(int64_t* step) const {
  double most = std::numeric_limits<double>::quiet_NaN();
  int64_t where = -1;
  for (size_t k = 0; k < errors.size(); ++k) {
    if (where < 0 || errors[k] > most || std::isnan(errors[k])) {
      most = errors[k];
      where = moved_at + static_cast<int64_t>(k);
      if (std::isnan(most))
        break;
    }
  }
  if (step)
    *step = where;
  return most;
}

}  // namespace twins
