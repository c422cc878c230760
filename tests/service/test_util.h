// Helpers for the service suites: rigs as wire messages, in-process reference results, and
// raw (generic) gRPC calls for services Sinew does not define (health, reflection).
#pragma once

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "clients/lib/client.h"
#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"

namespace sinew::testing {

inline LimbOptions LimbOf(size_t vertices, uint32_t bones = 3, uint32_t influences = 2) {
  return client::LimbWithVertices(vertices, bones, influences);
}

// Deforms in-process with core, the reference every server result must equal.
inline std::vector<float> CoreDeform(const LimbOptions& limb, const std::string& method, const Pose& pose) {
  auto rig = BuildRig(MakeLimb(limb));
  EXPECT_TRUE(rig.ok()) << rig.status();
  auto shared = std::make_shared<const Rig>(std::move(*rig));
  auto d = CreateDeformer(shared, {method, nullptr});
  EXPECT_TRUE(d.ok()) << d.status();
  std::vector<float> out(shared->positions.size());
  EXPECT_TRUE((*d)->Deform({&pose, {}}, out, nullptr).ok());
  return out;
}

// Largest coordinate difference between two position arrays (which must be equally long).
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

// Elastic implicit parameters that make a deep jump run for about an hour (1 024 sub-steps of
// 0.001 rad, each relaxed for up to 1 000 rounds with no tolerance): a frame that is surely still
// running when a test acts on it, and that only a stop (a deadline, a cancel, a drain) ends.
inline void MakeElasticSlow(v1::ImplicitParams& p) {
  p.set_relaxation_rounds(1000);
  p.set_relaxation_tolerance(0);
  p.set_max_substeps(1024);
  p.set_min_substep_radians(0.001);
  p.set_max_substep_radians(0.001);
}

inline Skeleton LimbSkeleton(const LimbOptions& limb) {
  auto rig = BuildRig(MakeLimb(limb));
  return rig->skeleton;
}

inline v1::DeformRequest Frame(const std::string& session, uint64_t frame, const Pose& pose) {
  v1::DeformRequest r;
  r.set_session_id(session);
  r.set_frame(frame);
  client::PoseToProto(pose, *r.mutable_pose());
  return r;
}

// Plays a DeformClip batch; returns its frames' positions by frame number.
inline std::map<uint64_t, std::vector<float>> PlayClip(client::Client& c, const v1::DeformClipRequest& batch) {
  std::map<uint64_t, std::vector<float>> frames;
  const absl::Status st = c.DeformClip(batch, [&](const v1::DeformClipResponse& f) {
    return client::DecodePositions(f, frames[f.frame()]);
  });
  EXPECT_TRUE(st.ok()) << st;
  return frames;
}

// A stateful session's batch resumed at `first` gives the same frames as the whole batch played
// from its start (the server replays the skipped frames unsent).
inline void ExpectResumedBatchEqualsWhole(client::Client& c, v1::DeformClipRequest batch, uint64_t first) {
  batch.set_first_frame(0);
  const auto whole = PlayClip(c, batch);
  ASSERT_EQ(whole.size(), size_t(batch.poses().poses_size()));
  batch.set_first_frame(first);
  // Progress messages of the replay, asked for (every millisecond: at least one, after its first
  // frame): before any frame, counting up, carrying nothing but the count and the clip's length.
  batch.set_replay_progress_ms(1);
  std::map<uint64_t, std::vector<float>> resumed;
  std::vector<uint64_t> replayed;
  const absl::Status st = c.DeformClip(batch, [&](const v1::DeformClipResponse& f) {
    if (f.replayed() > 0) {
      EXPECT_TRUE(resumed.empty()) << "a replay message after a frame";
      EXPECT_TRUE(f.positions().empty() && f.frame() == 0);
      EXPECT_EQ(f.total_frames(), whole.size());
      replayed.push_back(f.replayed());
      return absl::OkStatus();
    }
    return client::DecodePositions(f, resumed[f.frame()]);
  });
  EXPECT_TRUE(st.ok()) << st;
  ASSERT_FALSE(replayed.empty()) << "no replay progress";
  EXPECT_EQ(replayed.front(), 1u);
  EXPECT_TRUE(std::is_sorted(replayed.begin(), replayed.end()) && replayed.back() <= first);
  EXPECT_EQ(resumed.size(), whole.size() - first);
  for (const auto& [frame, positions] : resumed) EXPECT_EQ(positions, whole.at(frame)) << "frame " << frame;
}

// GetRig's preparation of `rig_id` whose key contains `key_part` (nullopt when none is listed).
inline std::optional<v1::Preparation> FindPreparation(client::Client& c, const std::string& rig_id,
                                                      std::string_view key_part) {
  auto info = c.GetRig(rig_id);
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return std::nullopt;
  for (const v1::Preparation& p : info->preparations()) {
    if (p.key().find(key_part) != std::string::npos) return p;
  }
  return std::nullopt;
}

// Waits, at most two minutes, until that preparation is listed as done (successfully or not):
// its entry, or nullopt when it never was. Only the outcome is asserted on, never how long it took.
inline std::optional<v1::Preparation> WaitForPreparation(client::Client& c, const std::string& rig_id,
                                                         std::string_view key_part) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  for (;;) {
    auto p = FindPreparation(c, rig_id, key_part);
    if (p && p->done()) return p;
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::string ToBytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  (void)b.Dump(&slices);
  std::string s;
  for (auto& sl : slices) s.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return s;
}

// An upload the test holds open, so that the server is inside its call: its header (announcing
// `total_bytes`, and naming `sha256` when that is not empty) and then `chunk` are written. The
// caller authorizes `ctx` first where the server wants a token, and waits for the chunk to be
// counted (WaitForMetric on sinew_upload_bytes_total) before relying on the server having it: a
// Write only hands the message to the client's transport. Cancel ends it from the client's side.
struct HeldUpload {
  std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
  v1::UploadRigResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadRigRequest>> writer;

  // False when either Write failed (the call already over).
  bool Start(v1::Sinew::Stub& stub, uint64_t total_bytes, const std::string& chunk,
             const std::string& sha256 = {}) {
    writer = stub.UploadRig(ctx.get(), &response);
    v1::UploadRigRequest part;
    part.mutable_header()->set_total_bytes(total_bytes);
    if (!sha256.empty()) part.mutable_header()->set_sha256(sha256);
    if (!writer->Write(part)) return false;
    part.clear_header();
    part.set_chunk(chunk);
    return writer->Write(part);
  }
  grpc::Status Cancel() {
    ctx->TryCancel();
    return writer->Finish();
  }
};

// One unary call by method name with raw serialized bytes.
inline grpc::Status GenericUnary(const std::string& target, const std::string& method,
                                 const std::string& request, std::string* response) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status s) { done.set_value(s); });
  grpc::Status st = done.get_future().get();
  *response = ToBytes(resp);
  return st;
}

// One request/response exchange on a bidirectional streaming method by name.
inline std::string GenericBidiOnce(const std::string& target, const std::string& method,
                                   const std::string& request) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  call->Write(req, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  call->Read(&resp, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  const std::string out = ok ? ToBytes(resp) : "";
  call->WritesDone(reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

}  // namespace sinew::testing
