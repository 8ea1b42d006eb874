#include "optim/registry.h"

#include <cmath>
#include <deque>
#include <mutex>

#include "optim/builtins.h"

namespace optim {

namespace {

struct Registry {
  std::deque<OptimizerInfo> entries;   // registration order; stable refs
  std::deque<OptimizerInfo> resolved;  // built by a resolver on first use
  std::vector<NameFamily> families;    // the resolvers, by prefix
  std::mutex mutex;
};

bool begins(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0;
}

// The family whose prefix `name` extends (is longer than), or null.
const NameFamily* family_of(const Registry& r, const std::string& name) {
  for (const auto& f : r.families) {
    if (name.size() > f.prefix.size() && begins(name, f.prefix))
      return &f;
  }
  return nullptr;
}

const OptimizerInfo* find_in(const std::deque<OptimizerInfo>& entries,
                             const std::string& name) {
  for (const auto& e : entries) {
    if (e.name == name)
      return &e;
  }
  return nullptr;
}

// The checks of register_optimizer, with the lock held.
void add_entry(Registry& r, OptimizerInfo info) {
  TORCH_CHECK(!info.name.empty(), "register_optimizer: empty name");
  TORCH_CHECK(info.make, "register_optimizer: '", info.name,
              "' has no factory");
  const NameFamily* f = family_of(r, info.name);
  TORCH_CHECK(f == nullptr, "register_optimizer: '", info.name,
              "' is reserved for the names resolved under '",
              f ? f->prefix : "", "'");
  TORCH_CHECK(find_in(r.entries, info.name) == nullptr, "register_optimizer: '",
              info.name, "' is already registered");
  r.entries.push_back(std::move(info));
}

// The checks of register_resolver, with the lock held.
void add_family(Registry& r, NameFamily family) {
  const std::string& prefix = family.prefix;
  TORCH_CHECK(!prefix.empty(), "register_resolver: empty prefix");
  TORCH_CHECK(family.resolve, "register_resolver: '", prefix,
              "' has no resolver");
  for (const auto& f : r.families) {
    TORCH_CHECK(!begins(f.prefix, prefix) && !begins(prefix, f.prefix),
                "register_resolver: prefix '", prefix, "' overlaps '", f.prefix,
                "'");
  }
  for (const auto& e : r.entries) {
    TORCH_CHECK(!(e.name.size() > prefix.size() && begins(e.name, prefix)),
                "register_resolver: prefix '", prefix,
                "' would claim the registered '", e.name, "'");
  }
  r.families.push_back(std::move(family));
}

Registry& registry() {
  static Registry r;
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& e : builtin_optimizers())
      add_entry(r, std::move(e));
    for (auto& f : builtin_name_families())
      add_family(r, std::move(f));
  });
  return r;
}

std::string known_names(const Registry& r) {
  std::string s;
  for (const auto& e : r.entries)
    s += (s.empty() ? "" : ", ") + e.name;
  return s;
}

}  // namespace

std::vector<torch::Tensor> ParamSplit::all() const {
  std::vector<torch::Tensor> out = matrices;
  out.insert(out.end(), others.begin(), others.end());
  return out;
}

std::optional<ParamRole> ParamSplit::role_of(const torch::Tensor& p) const {
  const std::vector<torch::Tensor> every = all();
  for (size_t i = 0; i < every.size() && i < roles.size(); ++i) {
    if (every[i].unsafeGetTensorImpl() == p.unsafeGetTensorImpl())
      return roles[i];
  }
  return std::nullopt;
}

const char* to_string(Role role) {
  // In the order of Role.
  static const char* const kNames[] = {"wq",   "wk",  "wv",        "wo",
                                       "w1",   "w2",  "embedding", "positional",
                                       "gain", "head"};
  return kNames[static_cast<int>(role)];
}

Hparams hparams_of(const torch::optim::AdamOptions& options) {
  return {{"beta1", std::get<0>(options.betas())},
          {"beta2", std::get<1>(options.betas())},
          {"eps", options.eps()},
          {"weight_decay", options.weight_decay()},
          {"amsgrad", options.amsgrad() ? 1.0 : 0.0}};
}

Hparams hparams_of(const torch::optim::SGDOptions& options) {
  return {{"momentum", options.momentum()},
          {"dampening", options.dampening()},
          {"nesterov", options.nesterov() ? 1.0 : 0.0},
          {"weight_decay", options.weight_decay()}};
}

const char* to_string(Equivariance equivariance) {
  return equivariance == Equivariance::kEquivariant ? "equivariant"
                                                    : "basis-dependent";
}

const char* to_string(const std::optional<Equivariance>& equivariance) {
  return equivariance ? to_string(*equivariance) : "none";
}

bool register_optimizer(OptimizerInfo info) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  add_entry(r, std::move(info));
  return true;
}

bool register_resolver(std::string prefix, Resolver resolve) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  add_family(r, {std::move(prefix), std::move(resolve)});
  return true;
}

const OptimizerInfo& find_optimizer(const std::string& name) {
  auto& r = registry();
  Resolver resolve;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (const OptimizerInfo* e = find_in(r.entries, name))
      return *e;
    if (const OptimizerInfo* e = find_in(r.resolved, name))
      return *e;
    const NameFamily* f = family_of(r, name);
    TORCH_CHECK(f != nullptr, "Unknown optimizer: '", name,
                "' (known: ", known_names(r), ")");
    resolve = f->resolve;
  }
  // Unlocked: a resolver may take long (loading a file) or use the registry.
  std::optional<OptimizerInfo> info = resolve(name);
  std::lock_guard<std::mutex> lock(r.mutex);
  TORCH_CHECK(info.has_value(), "Unknown optimizer: '", name,
              "' (known: ", known_names(r), ")");
  TORCH_CHECK(info->name == name && info->make, "the resolver of '", name,
              "' returned an entry named '", info->name,
              info->make ? "'" : "' without a factory");
  if (const OptimizerInfo* e = find_in(r.resolved, name))
    return *e;  // another thread resolved it meanwhile
  r.resolved.push_back(std::move(*info));
  return r.resolved.back();
}

bool has_optimizer(const std::string& name) {
  try {
    find_optimizer(name);
    return true;
  } catch (const c10::Error&) {
    return false;  // unknown, or malformed for its family
  }
}

bool has_resolver(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return family_of(r, name) != nullptr;
}

std::vector<std::string> optimizer_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& e : r.entries)
    out.push_back(e.name);
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const std::string& name, const ParamSplit& params, double lr) {
  TORCH_CHECK(lr > 0 && std::isfinite(lr), "Invalid learning rate: ", lr,
              " (must be positive and finite)");
  return find_optimizer(name).make(params, lr);
}

}  // namespace optim
