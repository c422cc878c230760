// The UploadRig message sequence's buffer (server/upload_assembler.h): memory follows the bytes
// received and never passes the announced total.
#include "server/upload_assembler.h"

#include <gtest/gtest.h>

namespace sinew::server {
namespace {

v1::UploadRigRequest Header(uint64_t total) {
  v1::UploadRigRequest m;
  m.mutable_header()->set_total_bytes(total);
  return m;
}

v1::UploadRigRequest Chunk(size_t bytes) {
  v1::UploadRigRequest m;
  m.set_chunk(std::string(bytes, 'x'));
  return m;
}

// Chunks of 1 MiB, 64 KiB and 1 byte into totals that the standard library's doubling would pass
// (until 2026-12-07 a 3 MiB upload in 1 MiB chunks held 4 MiB).
TEST(UploadAssembler, TheBufferNeverPassesTheAnnouncedTotal) {
  for (const uint64_t total : {uint64_t{3} << 20, (uint64_t{5} << 20) + 17, uint64_t{100} << 10}) {
    for (const size_t chunk : {size_t{1} << 20, size_t{64} << 10, size_t{1}}) {
      if (total / chunk > 200000) continue;
      UploadAssembler upload(uint64_t{1} << 30);
      ASSERT_TRUE(upload.Add(Header(total)).ok());
      EXPECT_LT(upload.data().capacity(), 64u) << "nothing reserved for a header alone";
      for (uint64_t sent = 0; sent < total;) {
        const size_t n = size_t(std::min<uint64_t>(chunk, total - sent));
        ASSERT_TRUE(upload.Add(Chunk(n)).ok());
        sent += n;
        ASSERT_LE(upload.data().capacity(), total) << "total " << total << ", chunks of " << chunk << ", after " << sent;
        ASSERT_LE(upload.data().capacity(), sent + UploadAssembler::kReserveAhead + 64);
      }
      EXPECT_TRUE(upload.Finish().ok());
      EXPECT_EQ(upload.data(), std::string(total, 'x'));
    }
  }
}

}  // namespace
}  // namespace sinew::server
