// Fuzz target: the UploadRig message sequence (server::UploadAssembler, as UploadCall drives it)
// with the server's default --max-rig-bytes. The input is a list of messages, each a 2-byte
// little-endian length and that many bytes of a serialized UploadRigRequest (an unparsable one
// ends the client's sending). After the client finishes: Finish, the digest check and, for a
// complete upload, the rig parse (server::RigFromUpload), as the worker pool does.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/convert.h"
#include "server/options.h"
#include "server/upload_assembler.h"
#include "sinew/v1/rig_id.h"
#include "tests/fuzz/verbose.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinew;
  const server::ServerOptions options;
  server::UploadAssembler upload(options.max_rig_bytes);
  v1::UploadRigRequest message;
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t n = size_t{data[at]} | size_t{data[at + 1]} << 8;
    at += 2;
    if (n > size - at) break;
    const bool parsed = message.ParseFromArray(data + at, static_cast<int>(n));
    at += n;
    if (!parsed) break;
    const absl::Status added = upload.Add(message);
    if (!added.ok()) return fuzz::Say("message", added), 0;
  }
  absl::Status st = upload.Finish();
  if (st.ok()) st = upload.CheckDigest(v1::Sha256Hex(upload.data()));
  fuzz::Say("upload", st);
  if (!st.ok()) return 0;
  RigLimits limits;
  limits.max_vertices = options.max_vertices;
  fuzz::Say("rig", server::RigFromUpload(upload.data(), limits).status());
  return 0;
}
