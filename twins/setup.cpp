#include "twins/setup.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace twins {

std::unique_ptr<data::Task> make_task(const PairSpec& spec,
                                      const torch::Device& device) {
  data::TaskOptions options;
  options.name = spec.task;
  options.data_seed = spec.data_seed;
  options.device = device;
  options.corpus = spec.corpus;
  options.ctx = spec.ctx;
  options.batch = spec.batch;
  options.steps = spec.steps;
  return data::make_task(options);
}

void check_task(const PairSpec& spec) {
  make_task(spec, torch::kCPU);
}

model::ModelConfig model_config(const PairSpec& spec,
                                const data::TaskShape& shape) {
  model::ModelConfig config;
  config.vocab_in = shape.vocab_in;
  config.vocab_out = shape.vocab_out;
  config.n_ctx = shape.n_ctx;
  config.causal = shape.causal;
  config.last_only = shape.last_only;
  config.depth = spec.depth;
  config.d_model = spec.d_model;
  config.heads = spec.heads;
  config.mlp = spec.mlp;
  config.kv_heads = spec.kv_heads;
  config.rope = spec.rope;
  config.rope_base = spec.rope_base;
  config.validate();
  return config;
}

optim::ParamSplit param_split(const model::Transformer& model) {
  using optim::Role;
  optim::ParamSplit split;
  split.matrices = model->matrix_parameters();
  split.others = model->other_parameters();
  // Each parameter's role, matched by identity so that the lists' order
  // need not be known here.
  std::vector<std::pair<torch::Tensor, optim::ParamRole>> roles = {
      {model->tok_emb, {Role::kEmbedding}},
      {model->norm_f->gain, {Role::kGain}},
      {model->head->weight, {Role::kHead}}};
  if (model->pos_emb.defined())  // none under rotary positions
    roles.push_back({model->pos_emb, {Role::kPositional}});
  for (size_t l = 0; l < model->blocks.size(); ++l) {
    const auto& block = model->blocks[l];
    const auto& attention = block->attn;
    const auto layer = static_cast<int64_t>(l);
    split.qk.push_back(attention->wq->weight);
    split.qk.push_back(attention->wk->weight);
    const std::pair<torch::Tensor, Role> in_block[] = {
        {attention->wq->weight, Role::kWq}, {attention->wk->weight, Role::kWk},
        {attention->wv->weight, Role::kWv}, {attention->wo->weight, Role::kWo},
        {block->w1->weight, Role::kW1},     {block->w2->weight, Role::kW2},
        {block->norm1->gain, Role::kGain},  {block->norm2->gain, Role::kGain}};
    for (const auto& [weight, role] : in_block) {
      roles.push_back({weight, {role, layer}});
    }
  }
  for (const auto& p : split.all()) {
    auto it = std::find_if(roles.begin(), roles.end(), [&](const auto& entry) {
      return entry.first.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    });
    TORCH_CHECK(it != roles.end(), "param_split: a parameter of shape ",
                p.sizes(), " has no role");
    split.roles.push_back(it->second);
  }
  split.heads = model->config().heads;
  return split;
}

}  // namespace twins
