// The command-line flags of the client programs: declared with help text, parsed by CLI11
// (`--name VALUE` or `--name=VALUE`, boolean switches, positional arguments — the command words
// and their operands — and its errors for unknown flags and missing values), read back as
// strings or range-checked numbers.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sinew::client {

class Args {
 public:
  // `value_name` empty declares a switch (no value).
  Args& Flag(const std::string& name, const std::string& value_name, const std::string& def,
             const std::string& help);
  // Parses argv[first..]; returns false and sets error() on an unknown flag or missing value.
  bool Parse(int argc, char** argv, int first);
  const std::string& error() const { return error_; }
  std::string Help() const;

  // A flag with a value: given on the command line (any value, 0 included); a switch: set.
  bool Has(const std::string& name) const;
  std::string Get(const std::string& name) const;
  // Numeric values; set error() and return false when malformed.
  bool GetInt(const std::string& name, long long* out, long long min, long long max);
  bool GetDouble(const std::string& name, double* out, double min, double max);
  // An output file's path (empty when not given; `-` where `allow_stdout`): its folder must exist
  // and be writable, checked before a run whose result it would hold, not after; sets error().
  bool GetOutputPath(const std::string& name, std::string* out, bool allow_stdout = false);
  const std::vector<std::string>& positional() const { return positional_; }
  // The flags given on the command line (Has), in name order.
  std::vector<std::string> Given() const;

 private:
  struct Spec {
    std::string value_name, def, help;
  };
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> switches_;
  std::vector<std::string> positional_;
  std::string error_;
};

}  // namespace sinew::client
