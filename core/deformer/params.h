// A method's parameters, method-neutral: how a host (the server, a test, a tool) hands a method
// its settings without knowing the method's types.
//
// Each method owns a parameters struct derived from MethodParams (its defaults in the member
// initialisers) and a parser from a ParamSet, the neutral form: named numbers, flags, choices
// (lowercase words with dashes: "clean-union") and lists of nested sets. The host fills a
// ParamSet from its own representation (the server: the method's protobuf message, by
// reflection) and never sees the struct. A method also lists its parameters as ParamSpecs, which
// is what hosts show their users (GetServerInfo, `sinew methods`) and what the ParamSet is
// checked against before the method's parser runs (unknown names and wrong types are refused,
// naming the field).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace sinew {

// Base of every method's own parameters struct.
struct MethodParams {
  virtual ~MethodParams() = default;
};

struct ParamSet;

struct ParamValue {
  enum class Kind { kNumber, kFlag, kChoice, kList };
  Kind kind = Kind::kNumber;
  double number = 0;
  bool flag = false;
  std::string choice;
  std::vector<ParamSet> list;

  static ParamValue Number(double v);
  static ParamValue Flag(bool v);
  static ParamValue Choice(std::string v);

  // The special members are defined after ParamSet: ParamValue and ParamSet hold each other
  // (through vectors), and defined here they would instantiate one inside the other, which
  // clang with libstdc++ 12 rejects.
  ParamValue();
  ParamValue(const ParamValue&);
  ParamValue(ParamValue&&) noexcept;
  ParamValue& operator=(const ParamValue&);
  ParamValue& operator=(ParamValue&&) noexcept;
  ~ParamValue();
};

// Named values; a name appears at most once. Absent names take the method's defaults.
struct ParamSet {
  std::vector<std::pair<std::string, ParamValue>> values;

  const ParamValue* Find(std::string_view name) const;
  ParamSet& Set(std::string name, ParamValue value);  // replaces a value of the same name
  bool empty() const { return values.empty(); }
};

inline ParamValue::ParamValue() = default;
inline ParamValue::ParamValue(const ParamValue&) = default;
inline ParamValue::ParamValue(ParamValue&&) noexcept = default;
inline ParamValue& ParamValue::operator=(const ParamValue&) = default;
inline ParamValue& ParamValue::operator=(ParamValue&&) noexcept = default;
inline ParamValue::~ParamValue() = default;

inline ParamValue ParamValue::Number(double v) {
  ParamValue p;
  p.number = v;
  return p;
}
inline ParamValue ParamValue::Flag(bool v) {
  ParamValue p;
  p.kind = Kind::kFlag;
  p.flag = v;
  return p;
}
inline ParamValue ParamValue::Choice(std::string v) {
  ParamValue p;
  p.kind = Kind::kChoice;
  p.choice = std::move(v);
  return p;
}

// One parameter of a method, as shown to users and checked by CheckParams.
struct ParamSpec {
  enum class Type { kNumber, kInteger, kFlag, kChoice, kList };
  std::string_view name;
  Type type = Type::kNumber;
  std::string_view default_value;  // as text, for users ("0.35", "contact", "" for none)
  std::string_view description;
  std::span<const std::string_view> choices = {};  // kChoice: the accepted words
  std::span<const ParamSpec> items = {};            // kList: the fields of each item
};

std::string_view ParamTypeName(ParamSpec::Type type);

// A number as a preparation key writes it: StrCat's text where it reads back as the same double
// (0.0001, 0.25), else the shortest text that does (0.01234564, not StrCat's six digits
// 0.0123456, which gave two voxel sizes one key and the second session the first one's weights,
// from memory and --cache-dir, until 2026-12-03).
std::string KeyNumber(double v);

// INVALID_ARGUMENT naming `field`.name (e.g. "deformer.implicit.sigma") for a name that is not a
// parameter, a value of the wrong kind, a non-integer or negative integer, a word not among the
// choices; recursively for list items ("deformer.implicit.joints[2].op").
absl::Status CheckParams(std::span<const ParamSpec> specs, const ParamSet& set, std::string_view field);

// Reads checked values into a method's struct, leaving defaults where a name is absent; range
// errors name the field. Usage: ParamReader r(set, field); r.Number("sigma", p.sigma, 0, 1, false)...
class ParamReader {
 public:
  ParamReader(const ParamSet& set, std::string_view field) : set_(set), field_(field) {}

  // A number in [lo, hi] (lo excluded when `open_lo`).
  ParamReader& Number(std::string_view name, double& out, double lo, double hi, bool open_lo = false);
  ParamReader& Count(std::string_view name, uint32_t& out, uint32_t lo, uint32_t hi);
  ParamReader& Flag(std::string_view name, bool& out);
  // The index of the word in `choices`.
  ParamReader& Choice(std::string_view name, std::span<const std::string_view> choices, int& out);
  // Calls item(set, "field.name[k]") for every item; stops at the first error.
  template <class F>
  ParamReader& List(std::string_view name, F&& item) {
    const ParamValue* v = set_.Find(name);
    if (!status_.ok() || v == nullptr) return *this;
    for (size_t k = 0; k < v->list.size() && status_.ok(); ++k) {
      status_ = item(v->list[k], Field(name) + "[" + std::to_string(k) + "]");
    }
    return *this;
  }
  absl::Status status() const { return status_; }
  std::string Field(std::string_view name) const;

 private:
  const ParamSet& set_;
  std::string field_;
  absl::Status status_;
};

}  // namespace sinew
