#include "clients/lib/methods.h"

#include <cctype>

namespace sinew::client {

bool MethodFromName(std::string_view name, v1::Method* method) {
  std::string wire = "METHOD_";
  for (char c : name) wire += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return wire != "METHOD_UNSPECIFIED" && v1::Method_Parse(wire, method);
}

std::string MethodName(v1::Method method) {
  if (method == v1::METHOD_UNSPECIFIED || !v1::Method_IsValid(method)) return "?";
  std::string name = v1::Method_Name(method).substr(7);  // after "METHOD_"
  for (char& c : name) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string MethodNames() {
  std::string out;
  const auto* d = v1::Method_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto m = static_cast<v1::Method>(d->value(i)->number());
    if (m == v1::METHOD_UNSPECIFIED) continue;
    if (!out.empty()) out += ", ";
    out += MethodName(m);
  }
  return out;
}

}  // namespace sinew::client
