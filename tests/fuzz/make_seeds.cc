// Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/): small valid inputs
// of each, from the project's own procedural limb, so that fuzzing starts from the accepted
// paths. Run from the plain build: build/tests/fuzz/sinew-fuzz-seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "clients/lib/client.h"
#include "core/clip/clip.h"
#include "core/procedural/limb.h"
#include "sinew/v1/rig_id.h"
#include "tests/fuzz/session_states.h"

namespace {

using namespace sinew;
namespace fs = std::filesystem;

fs::path root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary) << bytes;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// An upload: header then chunks, each a 2-byte little-endian length and the message.
std::string Sequence(const std::string& rig, size_t chunk, bool sha) {
  std::string out;
  auto add = [&](const v1::UploadRigRequest& m) {
    const std::string b = m.SerializeAsString();
    out += char(b.size() & 0xff);
    out += char(b.size() >> 8);
    out += b;
  };
  v1::UploadRigRequest h;
  h.mutable_header()->set_total_bytes(rig.size());
  if (sha) h.mutable_header()->set_sha256(v1::Sha256Hex(rig));
  add(h);
  for (size_t at = 0; at < rig.size(); at += chunk) {
    v1::UploadRigRequest c;
    c.set_chunk(rig.substr(at, chunk));
    add(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  root = argv[1];
  LimbOptions limb;
  limb.rings = 6;
  limb.segments = 8;
  limb.bones = 3;
  RigInput plain = MakeLimb(limb);
  RigInput caged = MakeLimb(limb);
  caged.rig.cages.push_back(MakeLimbCage(limb, 3));
  const std::string plain_bytes = v1::SerializeRigDeterministic(client::RigToProto(plain));
  const std::string caged_bytes = v1::SerializeRigDeterministic(client::RigToProto(caged));
  Write("rig_upload", "limb-48", plain_bytes);
  Write("rig_upload", "limb-48-cage", caged_bytes);
  Write("upload_sequence", "limb-48-sha-3-chunks", Sequence(plain_bytes, plain_bytes.size() / 3 + 1, true));
  Write("upload_sequence", "limb-48-cage-no-sha", Sequence(caged_bytes, 512, false));

  auto rig = BuildRig(MakeLimb(limb));
  if (!rig.ok()) return 1;
  const Skeleton& sk = rig->skeleton;
  for (int f = 0; f < 3; ++f) {  // frame % 3 picks lbs, dqs, cage-mvc
    v1::DeformRequest r;
    r.set_frame(f);
    if (f < 2) client::PoseToProto(LimbPose(sk, 0.3 * f), *r.mutable_pose());
    if (f == 2) {  // a cage method takes the cage alone
      v1::CagePose* c = r.add_cages();
      c->set_input(v1::CAGE_INPUT_OFFSETS);
      std::vector<float> offsets(caged.rig.cages[0].positions.size(), 0.01f);
      c->set_positions(Floats(offsets));
    }
    if (f == 1) r.set_time_step(1.0 / 30);
    Write("frame_decode", "limb-pose-" + std::to_string(f), r.SerializeAsString());
  }

  Clip clip;
  clip.name = "bend";
  clip.duration = 1;
  clip.tracks.resize(sk.parents.size());
  for (size_t j = 1; j < clip.tracks.size(); ++j) {
    JointTrack& t = clip.tracks[j];
    t.rotation_times = {0, 0.5, 1};
    t.rotations = {Eigen::Quaterniond::Identity(), Eigen::Quaterniond(Eigen::AngleAxisd(0.8, Eigen::Vector3d::UnitZ())),
                   Eigen::Quaterniond::Identity()};
    t.translation_times = {0, 1};
    t.translations = {Eigen::Vector3d(1, 0, 0), Eigen::Vector3d(1.1, 0, 0)};
    t.scale_times = {0.25};
    t.scales = {1.0};
  }
  v1::DeformClipRequest c;
  client::ClipToProto(clip, *c.mutable_clip()->mutable_clip());
  c.mutable_clip()->set_frames_per_second(30);
  Write("clip", "bend-30fps", c.SerializeAsString());
  c.set_first_frame(10);
  c.set_max_frames(5);
  Write("clip", "bend-frames-10-to-14", c.SerializeAsString());
  v1::DeformClipRequest poses;
  for (int f = 0; f < 3; ++f) client::PoseToProto(LimbPose(sk, f / 3.0), *poses.mutable_poses()->add_poses());
  poses.set_time_step(0.1);
  Write("clip", "three-poses", poses.SerializeAsString());
  // Each stateful session's state after a few frames, and at rest.
  auto sessions = fuzz::MakeStatefulSessions();
  for (size_t k = 0; k < sessions.size(); ++k) {
    fuzz::StatefulSession& s = sessions[k];
    const std::string choose(1, char(k));
    auto rest = s.deformer->SaveState();
    if (!rest.ok()) return 1;
    Write("session_state", std::string(s.name) + "-rest", choose + *rest);
    std::vector<float> out(s.rig->positions.size());
    for (int f = 1; f <= 3; ++f) {
      const Pose pose = fuzz::StatefulSessionPose(*s.rig, f / 8.0);
      FrameInput frame;
      frame.pose = &pose;
      if (!s.deformer->Deform(frame, out, nullptr).ok()) return 1;
    }
    auto played = s.deformer->SaveState();
    if (!played.ok()) return 1;
    Write("session_state", std::string(s.name) + "-3-frames", choose + *played);
    // The same with the high bit: the target makes the checksum good (after the mutations).
    Write("session_state", std::string(s.name) + "-3-frames-resealed", std::string(1, char(k | 0x80)) + *played);
  }
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
