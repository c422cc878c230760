#include "server/params_proto.h"

#include <cctype>

#include <google/protobuf/descriptor.h>

namespace sinew::server {
namespace {

using google::protobuf::FieldDescriptor;

// "JointOperator" -> "JOINT_OPERATOR_".
std::string EnumPrefix(const std::string& type_name) {
  std::string out;
  for (size_t i = 0; i < type_name.size(); ++i) {
    const char ch = type_name[i];
    if (i > 0 && std::isupper(static_cast<unsigned char>(ch))) out += '_';
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  return out + "_";
}

std::string ChoiceWord(const google::protobuf::EnumValueDescriptor& value) {
  std::string name = value.name();
  const std::string prefix = EnumPrefix(value.type()->name());
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& ch : name) ch = ch == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

ParamValue Scalar(const google::protobuf::Message& m, const FieldDescriptor& f) {
  const google::protobuf::Reflection& r = *m.GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: return ParamValue::Number(r.GetInt32(m, &f));
    case FieldDescriptor::CPPTYPE_INT64: return ParamValue::Number(static_cast<double>(r.GetInt64(m, &f)));
    case FieldDescriptor::CPPTYPE_UINT32: return ParamValue::Number(r.GetUInt32(m, &f));
    case FieldDescriptor::CPPTYPE_UINT64: return ParamValue::Number(static_cast<double>(r.GetUInt64(m, &f)));
    case FieldDescriptor::CPPTYPE_DOUBLE: return ParamValue::Number(r.GetDouble(m, &f));
    case FieldDescriptor::CPPTYPE_FLOAT: return ParamValue::Number(r.GetFloat(m, &f));
    case FieldDescriptor::CPPTYPE_BOOL: return ParamValue::Flag(r.GetBool(m, &f));
    case FieldDescriptor::CPPTYPE_ENUM: {
      const google::protobuf::EnumValueDescriptor* v = r.GetEnum(m, &f);
      // A value this build does not know (an open enum) keeps its number, and fails the choice.
      return ParamValue::Choice(v->type()->FindValueByNumber(v->number()) == v ? ChoiceWord(*v)
                                                                                  : std::to_string(v->number()));
    }
    case FieldDescriptor::CPPTYPE_STRING: return ParamValue::Choice(r.GetString(m, &f));
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      ParamValue list;
      list.kind = ParamValue::Kind::kList;
      list.list.push_back(ParamSetFromMessage(r.GetMessage(m, &f)));
      return list;
    }
  }
  return {};
}

}  // namespace

ParamSet ParamSetFromMessage(const google::protobuf::Message& message) {
  ParamSet set;
  const google::protobuf::Descriptor& d = *message.GetDescriptor();
  const google::protobuf::Reflection& r = *message.GetReflection();
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    if (f.is_repeated()) {
      const int n = r.FieldSize(message, &f);
      if (n == 0) continue;
      ParamValue list;
      list.kind = ParamValue::Kind::kList;
      for (int k = 0; k < n; ++k) {
        if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          list.list.push_back(ParamSetFromMessage(r.GetRepeatedMessage(message, &f, k)));
        }
      }
      set.values.emplace_back(f.name(), std::move(list));
      continue;
    }
    if (!r.HasField(message, &f)) continue;  // no presence: HasField is "not the default"
    set.values.emplace_back(f.name(), Scalar(message, f));
  }
  return set;
}

}  // namespace sinew::server
