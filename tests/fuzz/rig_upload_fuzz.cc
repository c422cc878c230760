// Fuzz target: the bytes of an uploaded rig through the server's parse and validation
// (server::RigFromUpload: the entry-count scan, the protobuf parse, RigFromProto, BuildRig
// under the server's default limits), then the rig's description as UploadRig answers it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/convert.h"
#include "server/options.h"
#include "tests/fuzz/verbose.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinew;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  RigLimits limits;
  limits.max_vertices = server::ServerOptions().max_vertices;
  auto rig = server::RigFromUpload(bytes, limits);
  fuzz::Say("rig", rig.status());
  if (rig.ok()) {
    v1::RigInfo info;
    server::FillRigInfo(*rig, info);
    (void)rig->ResidentBytes();
  }
  return 0;
}
