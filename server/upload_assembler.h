// The UploadRig message sequence, apart from gRPC: a header (total_bytes, optional sha256), then
// chunks whose bytes add up to exactly total_bytes. UploadCall feeds it each message as it is
// read; the fuzz target tests/fuzz/upload_sequence_fuzz.cc feeds it arbitrary sequences.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "sinew/v1/sinew.pb.h"

namespace sinew::server {

class UploadAssembler {
 public:
  // `max_bytes`: the largest total_bytes accepted (--max-rig-bytes).
  explicit UploadAssembler(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // One message, in the order read. An error ends the upload (the message that broke the
  // sequence is named); calls after an error keep failing.
  absl::Status Add(const v1::UploadRigRequest& message);
  // The client finished sending: OK when a header came and exactly total_bytes followed.
  absl::Status Finish() const;
  // After Finish: the data hashes to the header's sha256 when it named one; INVALID_ARGUMENT
  // naming both otherwise. `id` is Sha256Hex(data()).
  absl::Status CheckDigest(const std::string& id) const;

  bool has_header() const { return have_header_; }
  const std::string& sha256() const { return sha_; }  // as the header named it ("" if not)
  uint64_t total() const { return total_; }
  uint64_t received() const { return data_.size(); }
  std::string& data() { return data_; }

  // The most memory reserved ahead of the bytes received: a header announcing a large upload
  // costs nothing until its bytes come (an up-front reservation of --max-rig-bytes per upload
  // let a client take the server's address space with headers alone; issue 17, fuzzing).
  static constexpr uint64_t kReserveAhead = uint64_t{4} << 20;

 private:
  uint64_t max_bytes_;
  bool have_header_ = false;
  bool failed_ = false;
  uint64_t total_ = 0;
  std::string sha_;
  std::string data_;
};

}  // namespace sinew::server
