// Names read from users' files (asset and node names, file stems, SuperCages joint names) go
// into protobuf `string` fields and glTF's JSON, both of which must be UTF-8: a Latin-1 name
// failed an upload ("not a serialized sinew.v1.Rig") and made the glTF writer throw. ValidUtf8
// keeps valid UTF-8 as it is and replaces each byte that does not start or continue a valid
// sequence (overlong forms, surrogates and code points past U+10FFFF included) by U+FFFD.
#pragma once

#include <string>
#include <string_view>

namespace sinew {

std::string ValidUtf8(std::string_view s);

}  // namespace sinew
