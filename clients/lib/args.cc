#include "clients/lib/args.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace sinew::client {

Args& Args::Flag(const std::string& name, const std::string& value_name, const std::string& def,
                 const std::string& help) {
  order_.push_back(name);
  specs_[name] = {value_name, def, help};
  return *this;
}

// CLI11 does the parsing (`--name VALUE`, `--name=VALUE`, switches, `--` before positionals,
// unknown flags and missing values refused); the flags are declared from the specs, and every
// argument that is not a flag is a positional (the command words and their operands).
bool Args::Parse(int argc, char** argv, int first) {
  CLI::App app;
  app.set_help_flag();  // the programs declare their own `help`
  app.allow_windows_style_options(false);
  std::map<std::string, CLI::Option*> options;
  for (const std::string& name : order_) {
    const Spec& s = specs_.at(name);
    CLI::Option* o = s.value_name.empty() ? app.add_flag("--" + name, switches_[name], s.help)
                                          : app.add_option("--" + name, values_[name], s.help);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    options[name] = o;
  }
  app.add_option("positional", positional_)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::vector<std::string> rest;
  for (int i = first; i < argc; ++i) {
    // A flag's value that starts with '-' (`--snapshot-view -y,+z`, `--fps -1`) is its value, not
    // a short option: CLI11 would take "-y,+z" for one and report the value missing. Given as
    // --name=VALUE it cannot be misread.
    const std::string a = argv[i];
    const bool takes_value = a.rfind("--", 0) == 0 && a.find('=') == std::string::npos && specs_.contains(a.substr(2)) &&
                             !specs_.at(a.substr(2)).value_name.empty();
    if (takes_value && i + 1 < argc && argv[i + 1][0] == '-' && argv[i + 1][1] != '-' && argv[i + 1][1] != '\0') {
      rest.push_back(a + "=" + argv[++i]);
    } else {
      rest.push_back(a);
    }
  }
  std::reverse(rest.begin(), rest.end());  // CLI11 takes the arguments as a stack
  try {
    app.parse(rest);
  } catch (const CLI::ParseError& e) {
    error_ = e.what();
    return false;
  }
  for (const auto& [name, o] : options) {
    if (o->count() == 0) values_.erase(name);
    if (!specs_.at(name).value_name.empty()) continue;
    if (o->count() > 0) values_[name] = switches_[name] ? "1" : "0";
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
  if (it == values_.end()) return false;
  // A flag with a value is given whatever the value (`--shard 0` is a shard, to be checked, not
  // an absent flag); a switch is set unless given as 0 or false.
  auto spec = specs_.find(name);
  if (spec != specs_.end() && !spec->second.value_name.empty()) return true;
  return it->second != "0" && it->second != "false";
}

std::vector<std::string> Args::Given() const {
  std::vector<std::string> out;
  for (const auto& [name, value] : values_) {
    if (Has(name)) out.push_back(name);
  }
  return out;
}

std::string Args::Get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end()) return it->second.def;
  return "";
}

bool Args::GetInt(const std::string& name, long long* out, long long min, long long max) {
  const std::string v = Get(name);
  long long x = 0;
  // Decimal, whole: CLI11's cast reads a leading 0 as octal and 0x as hex (--max-frames 000500
  // was 320 frames until 2026-12-03, --key-interval 08 "not an integer").
  const auto [end, parsed] = std::from_chars(v.data(), v.data() + v.size(), x, 10);
  if (v.empty() || parsed != std::errc() || end != v.data() + v.size() || x < min || x > max) {
    error_ = "--" + name + ": '" + v + "' is not an integer in [" + std::to_string(min) + ", " +
             std::to_string(max) + "]";
    return false;
  }
  *out = x;
  return true;
}

bool Args::GetDouble(const std::string& name, double* out, double min, double max) {
  const std::string v = Get(name);
  double x = 0;
  if (!CLI::detail::lexical_cast(v, x) || !(x >= min && x <= max)) {
    error_ = absl::StrCat("--", name, ": '", v, "' is not a number in [", min, ", ", max, "]");
    return false;
  }
  *out = x;
  return true;
}

bool Args::GetOutputPath(const std::string& name, std::string* out, bool allow_stdout) {
  const std::string v = Get(name);
  if (v.empty() || (allow_stdout && v == "-")) {
    *out = v;
    return true;
  }
  std::error_code ec;
  const std::filesystem::path path(v);
  if (std::filesystem::is_directory(path, ec)) {
    error_ = absl::StrCat("--", name, ": '", v, "' is a directory; give a file's path");
    return false;
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(dir, ec)) {
    error_ = absl::StrCat("--", name, ": the folder '", dir.string(), "' does not exist");
    return false;
  }
  if (access(dir.c_str(), W_OK) != 0) {
    error_ = absl::StrCat("--", name, ": the folder '", dir.string(), "' is not writable: ", std::strerror(errno));
    return false;
  }
  *out = v;
  return true;
}

}  // namespace sinew::client
