#include "clients/lib/args.h"

#include <cerrno>
#include <cstdlib>

namespace sinew::client {

Args& Args::Flag(const std::string& name, const std::string& value_name, const std::string& def,
                 const std::string& help) {
  order_.push_back(name);
  specs_[name] = {value_name, def, help};
  return *this;
}

bool Args::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      error_ = "unknown flag --" + name;
      return false;
    }
    if (it->second.value_name.empty()) {
      values_[name] = has_value ? value : "1";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        error_ = "--" + name + " needs a value " + it->second.value_name;
        return false;
      }
      value = argv[++i];
    }
    values_[name] = value;
  }
  return true;
}

std::string Args::Help() const {
  std::string out;
  for (const std::string& n : order_) {
    const Spec& s = specs_.at(n);
    out += "  --" + n + (s.value_name.empty() ? "" : " " + s.value_name) + "\n      " + s.help;
    if (!s.def.empty()) out += " (default " + s.def + ")";
    out += "\n";
  }
  return out;
}

bool Args::Has(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() && it->second != "0" && it->second != "false";
}

std::string Args::Get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end()) return it->second.def;
  return "";
}

bool Args::GetInt(const std::string& name, long long* out, long long min, long long max) {
  const std::string v = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < min || x > max) {
    error_ = "--" + name + ": '" + v + "' is not an integer in [" + std::to_string(min) + ", " +
             std::to_string(max) + "]";
    return false;
  }
  *out = x;
  return true;
}

bool Args::GetDouble(const std::string& name, double* out, double min, double max) {
  const std::string v = Get(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= min && x <= max)) {
    error_ = "--" + name + ": '" + v + "' is not a number in [" + std::to_string(min) + ", " +
             std::to_string(max) + "]";
    return false;
  }
  *out = x;
  return true;
}

}  // namespace sinew::client
