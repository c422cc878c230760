#include "clients/lib/methods.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include <google/protobuf/descriptor.h>

namespace sinew::client {

bool EncodingFromFlags(Args& args, v1::CreateSessionRequest* req, std::string* error) {
  const std::string e = args.Get("encoding");
  if (e == "f32") req->set_encoding(v1::OUTPUT_ENCODING_FLOAT32);
  else if (e == "f16") req->set_encoding(v1::OUTPUT_ENCODING_FLOAT16);
  else if (e == "q16") req->set_encoding(v1::OUTPUT_ENCODING_QUANTIZED16);
  else if (e == "delta") req->set_encoding(v1::OUTPUT_ENCODING_DELTA);
  else {
    *error = "--encoding: f32, f16, q16 or delta";
    return false;
  }
  if (e != "delta") {
    if (args.Has("max-error") || args.Has("key-interval")) {
      *error = "--max-error, --key-interval: only with --encoding delta";
      return false;
    }
    return true;
  }
  double max_error = 1e-4;
  long long interval = 30;
  if (!args.GetDouble("max-error", &max_error, 1e-7, 1e-2) || !args.GetInt("key-interval", &interval, 1, 100000)) {
    *error = args.error();
    return false;
  }
  req->set_max_error(max_error);
  req->set_key_frame_interval(static_cast<uint32_t>(interval));
  return true;
}

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

namespace {

// "JointOperator" -> "JOINT_OPERATOR_" (the prefix of its value names).
std::string EnumPrefix(const std::string& type) {
  std::string out;
  for (size_t i = 0; i < type.size(); ++i) {
    if (i > 0 && std::isupper(static_cast<unsigned char>(type[i]))) out += '_';
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(type[i])));
  }
  return out + "_";
}

bool SetOne(google::protobuf::Message* m, std::string_view name, std::string_view value, std::string* error) {
  using google::protobuf::FieldDescriptor;
  const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(std::string(name));
  const std::string where = "--param " + std::string(name);
  if (f == nullptr) {
    *error = where + ": not a parameter of this method (`sinew info` lists them)";
    return false;
  }
  if (f->is_repeated() || f->message_type() != nullptr) {
    *error = where + ": a list or vector parameter; set it through the API";
    return false;
  }
  const google::protobuf::Reflection* r = m->GetReflection();
  const std::string v(value);
  char* end = nullptr;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') break;
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) r->SetDouble(m, f, d);
      else r->SetFloat(m, f, float(d));
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: {
      // Whole numbers in the field's range only: until 2026-12-01 a value past it was cut
      // silently (max_iterations=4294967297 became 1).
      const auto type = f->cpp_type();
      const bool is_unsigned = type == FieldDescriptor::CPPTYPE_UINT32 || type == FieldDescriptor::CPPTYPE_UINT64;
      const bool is_32 = type == FieldDescriptor::CPPTYPE_UINT32 || type == FieldDescriptor::CPPTYPE_INT32;
      if (v.empty() || (is_unsigned && v[0] == '-')) break;
      errno = 0;
      const unsigned long long u = is_unsigned ? std::strtoull(v.c_str(), &end, 10) : 0;
      const long long i = is_unsigned ? 0 : std::strtoll(v.c_str(), &end, 10);
      if (*end != '\0') break;
      const bool in_range = errno != ERANGE && (!is_32 || (is_unsigned ? u <= UINT32_MAX : i >= INT32_MIN && i <= INT32_MAX));
      if (!in_range) {
        *error = where + ": " + v + " is out of range for " + f->cpp_type_name() + " (" +
                 (type == FieldDescriptor::CPPTYPE_UINT32   ? "0 to 4294967295"
                  : type == FieldDescriptor::CPPTYPE_UINT64 ? "0 to 18446744073709551615"
                  : type == FieldDescriptor::CPPTYPE_INT32  ? "-2147483648 to 2147483647"
                                                            : "-9223372036854775808 to 9223372036854775807") +
                 ")";
        return false;
      }
      if (type == FieldDescriptor::CPPTYPE_UINT32) r->SetUInt32(m, f, uint32_t(u));
      else if (type == FieldDescriptor::CPPTYPE_UINT64) r->SetUInt64(m, f, uint64_t(u));
      else if (type == FieldDescriptor::CPPTYPE_INT32) r->SetInt32(m, f, int32_t(i));
      else r->SetInt64(m, f, i);
      return true;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (v == "true" || v == "1") r->SetBool(m, f, true);
      else if (v == "false" || v == "0") r->SetBool(m, f, false);
      else break;
      return true;
    case FieldDescriptor::CPPTYPE_ENUM: {
      std::string wire = EnumPrefix(f->enum_type()->name());
      for (char c : v) wire += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (const auto* e = f->enum_type()->FindValueByName(wire)) {
        r->SetEnum(m, f, e);
        return true;
      }
      break;
    }
    default:
      break;
  }
  *error = where + ": '" + v + "' is not a valid " + f->cpp_type_name() + " value";
  return false;
}

}  // namespace

bool SetParams(v1::DeformerConfig* config, const std::string& params_field, std::string_view assignments,
               std::string* error) {
  if (assignments.empty()) return true;
  const google::protobuf::FieldDescriptor* field = config->GetDescriptor()->FindFieldByName(params_field);
  if (params_field.empty() || field == nullptr || field->message_type() == nullptr) {
    *error = "--param: this method has no parameters";
    return false;
  }
  google::protobuf::Message* params = config->GetReflection()->MutableMessage(config, field);
  while (!assignments.empty()) {
    const size_t comma = assignments.find(',');
    const std::string_view item = assignments.substr(0, comma);
    assignments = comma == std::string_view::npos ? std::string_view() : assignments.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      *error = "--param: NAME=VALUE[,NAME=VALUE...], not '" + std::string(item) + "'";
      return false;
    }
    if (!SetOne(params, item.substr(0, eq), item.substr(eq + 1), error)) return false;
  }
  return true;
}

}  // namespace sinew::client
