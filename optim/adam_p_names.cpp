#include "optim/adam_p_names.h"

#include <fmt/format.h>

#include <cctype>

#include "optim/adam_p.h"
#include "optim/registry.h"

namespace optim {

namespace {

// A plain decimal number: digits, '.', and an exponent (adam-p1e-3); no
// sign, space, nan, inf or hex.
bool plain_decimal(const std::string& digits) {
  bool ok =
      !digits.empty() &&
      (std::isdigit(static_cast<unsigned char>(digits[0])) || digits[0] == '.');
  for (char c : digits) {
    ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
                c == 'e' || c == 'E' || c == '-' || c == '+');
  }
  return ok;
}

}  // namespace

std::string adam_p_name(double p) {
  check_adam_p_exponent(p);
  return fmt::format("{}{}", kAdamPPrefix, p);
}

std::optional<double> adam_p_exponent(const std::string& name) {
  const std::string prefix = kAdamPPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  if (name == prefix)
    return kDefaultAdamP;
  const std::string digits = name.substr(prefix.size());
  size_t used = 0;
  double p = 0;
  if (plain_decimal(digits)) {
    try {
      p = std::stod(digits, &used);
    } catch (const std::exception&) {
      used = 0;
    }
  }
  TORCH_CHECK(used != 0 && used == digits.size(), "Malformed optimizer name: '",
              name,
              "' (the Adam-p dial is adam-p<p> with p in [0, 1], e.g. "
              "adam-p0.5)");
  TORCH_CHECK(p >= 0 && p <= 1, "Invalid Adam-p exponent: ", digits, " in '",
              name, "' (must be in [0, 1])");
  return p;
}

std::vector<std::string> resolve_optimizer_names(
    const std::vector<std::string>& names, const std::vector<double>& ps) {
  for (double p : ps)
    check_adam_p_exponent(p);
  std::vector<std::string> out;
  bool bare = false;
  for (const auto& name : names) {
    if (name == kAdamPPrefix) {
      bare = true;
      if (ps.empty())
        out.push_back(adam_p_name(kDefaultAdamP));
      for (double p : ps)
        out.push_back(adam_p_name(p));
    } else if (const std::optional<double> p = adam_p_exponent(name)) {
      out.push_back(adam_p_name(*p));
    } else {
      find_optimizer(name);  // throws for an unknown name
      out.push_back(name);
    }
  }
  TORCH_CHECK(ps.empty() || bare,
              "--p applies to a bare 'adam-p' in the "
              "optimizer list, and there is none (give --opt adam-p, or name "
              "the exponent as adam-p0.5)");
  return out;
}

}  // namespace optim
