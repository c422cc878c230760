// Method names on the client side, from the wire contract itself (the sinew.v1.Method enum's
// value names), so that a method added to the proto is known to every client without a table:
// METHOD_CAGE_MVC <-> "cage-mvc". What a method takes (parameters, inputs, backends) comes from
// the server's GetServerInfo.
#pragma once

#include <string>
#include <string_view>

#include "clients/lib/args.h"
#include "sinew/v1/sinew.pb.h"

namespace sinew::client {

// The output encoding flags of the command-line programs onto `req`: --encoding f32, f16, q16 or
// delta, and for delta --max-error E (fraction of the rig's diagonal) and --key-interval N. False
// with a message naming the flag when one is malformed. kEncodingHelp is --encoding's help.
bool EncodingFromFlags(Args& args, v1::CreateSessionRequest* req, std::string* error);
inline constexpr const char* kEncodingHelp =
    "positions on the wire: f32 (exact), f16 (half floats), q16 (16 bits in the frame's box), delta "
    "(a grid fixed by --max-error, key frames and predicted changes between them)";

// False for a name that is no method of this client's proto.
bool MethodFromName(std::string_view name, v1::Method* method);
// "?" for METHOD_UNSPECIFIED or an unknown value.
std::string MethodName(v1::Method method);
// Every method's name, comma separated: "lbs, dqs, ...".
std::string MethodNames();

// Sets parameters given as "NAME=VALUE,NAME=VALUE" on `config`'s parameters message
// `params_field` (the method's MethodInfo.params_field from GetServerInfo), by reflection:
// numbers, true/false, and enum values as the words GetServerInfo lists ("clean-union"). False
// with a message naming the parameter when the method has no such parameter or the value does
// not parse. Repeated (list) parameters cannot be set this way.
bool SetParams(v1::DeformerConfig* config, const std::string& params_field, std::string_view assignments,
               std::string* error);

}  // namespace sinew::client
