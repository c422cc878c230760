// A method's parameters message (any message of the DeformerConfig `params` oneof) in the
// method-neutral form core parses (core/deformer/params.h), by protobuf reflection: the server
// never names a method's fields.
//
//   numbers (any integer or floating type) -> number      bool -> flag
//   enum -> choice: the value's name without its type's prefix, lowercase, '_' as '-'
//           (JOINT_OPERATOR_CLEAN_UNION -> "clean-union", METHOD_DQS -> "dqs")
//   repeated message -> list of sets                       string -> choice, as is
// A field without presence (plain proto3 scalar) is left out when it holds its default value (0,
// false, the enum's 0), so that the method's own default applies; `optional` fields are present
// when set.
#pragma once

#include <google/protobuf/message.h>

#include "core/deformer/params.h"

namespace sinew::server {

ParamSet ParamSetFromMessage(const google::protobuf::Message& message);

}  // namespace sinew::server
