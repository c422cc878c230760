// Writing a whole file so that readers see the old one or the new one, never half of it: the
// bytes go to PATH.tmp, are synced, and the temporary file is renamed over PATH. What the clients
// write for people and programs to pick up (OBJ frames, shard manifests, .glb clips, PNG
// snapshots, HTML reports) goes through it. No gRPC, no protobuf: the export library uses it too.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace sinew::client {

// On failure PATH is untouched and PATH.tmp removed; the status names the step and the file
// ("write out.glb.tmp: No space left on device").
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace sinew::client
