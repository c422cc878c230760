// Method names on the client side, from the wire contract itself (the sinew.v1.Method enum's
// value names), so that a method added to the proto is known to every client without a table:
// METHOD_CAGE_MVC <-> "cage-mvc". What a method takes (parameters, inputs, backends) comes from
// the server's GetServerInfo.
#pragma once

#include <string>
#include <string_view>

#include "sinew/v1/sinew.pb.h"

namespace sinew::client {

// False for a name that is no method of this client's proto.
bool MethodFromName(std::string_view name, v1::Method* method);
// "?" for METHOD_UNSPECIFIED or an unknown value.
std::string MethodName(v1::Method method);
// Every method's name, comma separated: "lbs, dqs, ...".
std::string MethodNames();

}  // namespace sinew::client
