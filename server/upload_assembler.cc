#include "server/upload_assembler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sinew/v1/rig_id.h"

namespace sinew::server {

absl::Status UploadAssembler::Add(const v1::UploadRigRequest& m) {
  if (failed_) return absl::FailedPreconditionError("upload: already failed");
  absl::Status st;
  if (!have_header_) {
    if (!m.has_header()) {
      st = absl::InvalidArgumentError("upload: the first message must be a header");
    } else {
      have_header_ = true;
      total_ = m.header().total_bytes();
      sha_ = m.header().sha256();
      if (total_ == 0) {
        st = absl::InvalidArgumentError("header.total_bytes: must be > 0");
      } else if (total_ > max_bytes_) {
        st = absl::ResourceExhaustedError(absl::StrCat("header.total_bytes: ", total_, " bytes exceed the limit of ",
                                                       max_bytes_, " (--max-rig-bytes)"));
      } else if (!sha_.empty() && !v1::IsRigId(sha_)) {
        st = absl::InvalidArgumentError("header.sha256: not 64 lowercase hex digits");
      }
    }
  } else if (m.has_header()) {
    st = absl::InvalidArgumentError("upload: only the first message may be a header");
  } else if (!m.has_chunk()) {  // an empty message (neither set): it said "only the first ... header"
    st = absl::InvalidArgumentError("upload: a message after the header carries no chunk");
  } else if (m.chunk().size() > total_ - data_.size()) {
    st = absl::InvalidArgumentError(absl::StrCat("upload: more than the ", total_, " bytes the header announced"));
  } else {
    // Memory follows the bytes received: doubling (at most kReserveAhead ahead of them), never
    // past the announced total, never the announced total up front. Into a new string: libstdc++'s
    // reserve rounds a request below twice the capacity up to twice it (until 2026-12-07 a 3 MiB
    // upload in 1 MiB chunks held 4 MiB, a 600 MiB one 1 GiB); an empty string's is exact.
    const uint64_t need = data_.size() + m.chunk().size();
    if (need > data_.capacity()) {
      const uint64_t grown = std::min<uint64_t>(2 * data_.capacity(), need + kReserveAhead);
      std::string next;
      next.reserve(std::min<uint64_t>(total_, std::max(need, grown)));
      next.append(data_);
      data_.swap(next);
    }
    data_.append(m.chunk());
  }
  if (!st.ok()) failed_ = true;
  return st;
}

absl::Status UploadAssembler::Finish() const {
  if (failed_) return absl::FailedPreconditionError("upload: already failed");
  if (!have_header_) return absl::InvalidArgumentError("upload: no header was sent");
  if (data_.size() != total_) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload: received ", data_.size(), " bytes, the header announced ", total_));
  }
  return absl::OkStatus();
}

absl::Status UploadAssembler::CheckDigest(const std::string& id) const {
  if (!sha_.empty() && sha_ != id) {
    return absl::InvalidArgumentError(absl::StrCat("header.sha256: the data hashes to ", id, ", the header named ", sha_));
  }
  return absl::OkStatus();
}

}  // namespace sinew::server
