#include "core/deformer/params.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sinew {
namespace {
std::string Join(std::span<const std::string_view> words) {
  std::string out;
  for (std::string_view w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}
}  // namespace

const ParamValue* ParamSet::Find(std::string_view name) const {
  for (const auto& [n, v] : values) {
    if (n == name) return &v;
  }
  return nullptr;
}

ParamSet& ParamSet::Set(std::string name, ParamValue value) {
  for (auto& [n, v] : values) {
    if (n == name) {
      v = std::move(value);
      return *this;
    }
  }
  values.emplace_back(std::move(name), std::move(value));
  return *this;
}

std::string_view ParamTypeName(ParamSpec::Type type) {
  switch (type) {
    case ParamSpec::Type::kNumber: return "number";
    case ParamSpec::Type::kInteger: return "integer";
    case ParamSpec::Type::kFlag: return "flag";
    case ParamSpec::Type::kChoice: return "choice";
    case ParamSpec::Type::kList: return "list";
  }
  return "?";
}

absl::Status CheckParams(std::span<const ParamSpec> specs, const ParamSet& set, std::string_view field) {
  for (size_t i = 0; i < set.values.size(); ++i) {
    const auto& [name, value] = set.values[i];
    const std::string f = absl::StrCat(std::string(field), ".", name);
    for (size_t k = 0; k < i; ++k) {
      if (set.values[k].first == name) return absl::InvalidArgumentError(absl::StrCat(f, ": given twice"));
    }
    const ParamSpec* spec = nullptr;
    for (const ParamSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const ParamSpec& s : specs) names.emplace_back(s.name);
      return absl::InvalidArgumentError(absl::StrCat(f, ": not a parameter of this method (",
                                                     names.empty() ? "it has none" : absl::StrJoin(names, ", "), ")"));
    }
    using T = ParamSpec::Type;
    using K = ParamValue::Kind;
    const K want = spec->type == T::kNumber || spec->type == T::kInteger ? K::kNumber
                   : spec->type == T::kFlag                               ? K::kFlag
                   : spec->type == T::kChoice                             ? K::kChoice
                                                                          : K::kList;
    if (value.kind != want) {
      return absl::InvalidArgumentError(absl::StrCat(f, ": must be a ", std::string(ParamTypeName(spec->type))));
    }
    if (spec->type == T::kNumber && !std::isfinite(value.number)) {
      return absl::InvalidArgumentError(absl::StrCat(f, ": ", value.number, " is not finite"));
    }
    if (spec->type == T::kInteger &&
        (!(value.number >= 0) || value.number != std::floor(value.number) || value.number > 4294967295.0)) {
      return absl::InvalidArgumentError(absl::StrCat(f, ": ", value.number, " is not a non-negative 32-bit integer"));
    }
    if (spec->type == T::kChoice) {
      bool found = false;
      for (std::string_view c : spec->choices) found |= c == value.choice;
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat(f, ": \"", value.choice, "\" is not one of ",
                                                       Join(spec->choices)));
      }
    }
    if (spec->type == T::kList) {
      for (size_t k = 0; k < value.list.size(); ++k) {
        if (auto st = CheckParams(spec->items, value.list[k], absl::StrCat(f, "[", k, "]")); !st.ok()) return st;
      }
    }
  }
  return absl::OkStatus();
}

std::string ParamReader::Field(std::string_view name) const { return absl::StrCat(field_, ".", std::string(name)); }

ParamReader& ParamReader::Number(std::string_view name, double& out, double lo, double hi, bool open_lo) {
  const ParamValue* v = set_.Find(name);
  if (!status_.ok() || v == nullptr) return *this;
  if (!((open_lo ? v->number > lo : v->number >= lo) && v->number <= hi)) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat(Field(name), ": ", v->number, " is outside ", open_lo ? "(" : "[", lo, ", ", hi, "]"));
    return *this;
  }
  out = v->number;
  return *this;
}

ParamReader& ParamReader::Count(std::string_view name, uint32_t& out, uint32_t lo, uint32_t hi) {
  double d = out;
  Number(name, d, lo, hi);
  if (status_.ok()) out = static_cast<uint32_t>(d);
  return *this;
}

ParamReader& ParamReader::Flag(std::string_view name, bool& out) {
  const ParamValue* v = set_.Find(name);
  if (status_.ok() && v != nullptr) out = v->flag;
  return *this;
}

ParamReader& ParamReader::Choice(std::string_view name, std::span<const std::string_view> choices, int& out) {
  const ParamValue* v = set_.Find(name);
  if (!status_.ok() || v == nullptr) return *this;
  for (size_t k = 0; k < choices.size(); ++k) {
    if (choices[k] == v->choice) {
      out = static_cast<int>(k);
      return *this;
    }
  }
  status_ = absl::InvalidArgumentError(absl::StrCat(Field(name), ": \"", v->choice, "\" is not one of ",
                                                    Join(choices)));
  return *this;
}

std::string KeyNumber(double v) {
  // StrCat's text where it reads back exactly (the keys of common values, and the files
  // --cache-dir already holds, stay as they were), else the shortest text that does.
  std::string text = absl::StrCat(v);
  double back = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), back).ec == std::errc() && back == v) return text;
  char shortest[32];
  const auto [end, ec] = std::to_chars(shortest, shortest + sizeof shortest, v);
  return ec == std::errc() ? std::string(shortest, end) : text;
}

}  // namespace sinew
