// What an error message repeats of an id, key or name the client sent: the whole of a short one,
// and the first 64 bytes of a long one with its length. Error messages travel in gRPC trailers,
// whose size is limited: a 1 MB session_id copied whole made the client see a metadata-size
// error instead of NOT_FOUND.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace sinew::server {

inline constexpr size_t kMaxEchoedIdBytes = 64;

// "abc" for a short id; "abcd... (1048577 bytes)" for a long one.
inline std::string EchoId(std::string_view id) {
  if (id.size() <= kMaxEchoedIdBytes) return std::string(id);
  return absl::StrCat(absl::string_view(id.data(), kMaxEchoedIdBytes), "... (", id.size(), " bytes)");
}

}  // namespace sinew::server
