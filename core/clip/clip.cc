#include "core/clip/clip.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sinew {
namespace {

absl::Status CheckTimes(const std::vector<double>& times, size_t values, const std::string& field) {
  if (times.size() != values) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", times.size(), " key times for ", values, " values"));
  }
  for (size_t i = 0; i < times.size(); ++i) {
    if (!std::isfinite(times[i])) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: time is not finite"));
    }
    if (i > 0 && !(times[i] > times[i - 1])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d]: time %g does not increase (previous %g)", field, i, times[i], times[i - 1]));
    }
  }
  return absl::OkStatus();
}

// Index k such that times[k] <= t < times[k+1], and the blend factor; clamps at the ends. A NaN
// t is the first key (until 2026-12-07 it passed both end tests and read one key past the last).
inline void Locate(const std::vector<double>& times, double t, size_t& k, double& a) {
  if (!(t > times.front())) {
    k = 0;
    a = 0;
    return;
  }
  if (t >= times.back()) {
    k = times.size() - 1;
    a = 0;
    return;
  }
  k = static_cast<size_t>(std::upper_bound(times.begin(), times.end(), t) - times.begin()) - 1;
  a = (t - times[k]) / (times[k + 1] - times[k]);
}

}  // namespace

absl::Status ValidateClip(const Clip& clip, size_t joint_count) {
  if (!std::isfinite(clip.duration) || clip.duration < 0) {
    return absl::InvalidArgumentError("clip.duration: must be a finite number >= 0");
  }
  if (clip.tracks.size() > joint_count) {
    return absl::InvalidArgumentError(absl::StrCat("clip.tracks: ", clip.tracks.size(),
                                                   " tracks for a rig of ", joint_count, " joints"));
  }
  for (size_t j = 0; j < clip.tracks.size(); ++j) {
    if (auto st = ValidateJointTrack(clip.tracks[j], absl::StrCat("clip.tracks[", j, "]")); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status ValidateJointTrack(const JointTrack& tr, const std::string& f) {
  absl::Status st;
  if (!(st = CheckTimes(tr.translation_times, tr.translations.size(), f + ".translation_times")).ok()) return st;
  if (!(st = CheckTimes(tr.rotation_times, tr.rotations.size(), f + ".rotation_times")).ok()) return st;
  if (!(st = CheckTimes(tr.scale_times, tr.scales.size(), f + ".scale_times")).ok()) return st;
  // Poses hold floats: a key is checked as the sampled pose will hold it (1e39 is a finite double
  // and an infinite float; a scale of 1e-50 a float 0), so that a valid clip samples valid poses.
  for (size_t i = 0; i < tr.translations.size(); ++i) {
    if (!tr.translations[i].cast<float>().allFinite()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f, ".translations[", i, "]: not finite", tr.translations[i].allFinite() ? " as a float" : ""));
    }
  }
  for (size_t i = 0; i < tr.rotations.size(); ++i) {
    const double n = tr.rotations[i].norm();
    if (!std::isfinite(n) || std::abs(n - 1) > 1e-3) {
      return absl::InvalidArgumentError(absl::StrFormat("%s.rotations[%d]: quaternion has norm %g, not 1", f, i, n));
    }
  }
  for (size_t i = 0; i < tr.scales.size(); ++i) {
    const float as_float = static_cast<float>(tr.scales[i]);
    if (!std::isfinite(as_float) || !(as_float > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s.scales[%d]: %g is not a positive scale", f, i, tr.scales[i]));
    }
  }
  return absl::OkStatus();
}

void SampleClip(const Clip& clip, const Skeleton& skeleton, double t, Pose& out) {
  const size_t n = skeleton.size();
  t = std::clamp(t, 0.0, clip.duration);
  out.space = PoseSpace::kLocal;
  out.rotations.resize(4 * n);
  out.translations.resize(3 * n);
  out.scales.resize(n);
  for (size_t j = 0; j < n; ++j) {
    Similarity s = skeleton.rest_local[j];
    if (j < clip.tracks.size()) {
      const JointTrack& tr = clip.tracks[j];
      size_t k;
      double a;
      if (!tr.translation_times.empty()) {
        Locate(tr.translation_times, t, k, a);
        s.translation = a == 0 ? tr.translations[k]
                               : ((1 - a) * tr.translations[k] + a * tr.translations[k + 1]).eval();
      }
      if (!tr.rotation_times.empty()) {
        Locate(tr.rotation_times, t, k, a);
        // Eigen's slerp takes the shorter arc.
        s.rotation = a == 0 ? tr.rotations[k].normalized()
                            : tr.rotations[k].normalized().slerp(a, tr.rotations[k + 1].normalized());
      }
      if (!tr.scale_times.empty()) {
        Locate(tr.scale_times, t, k, a);
        s.scale = a == 0 ? tr.scales[k] : (1 - a) * tr.scales[k] + a * tr.scales[k + 1];
      }
    }
    out.set_joint(j, s);
  }
}

void SampleCageClip(const CageClip& clip, double t, std::vector<float>& out) {
  if (clip.times.empty()) {
    out.clear();
    return;
  }
  size_t k;
  double a;
  Locate(clip.times, t, k, a);
  const std::vector<float>& o0 = clip.offsets[k];
  out.resize(o0.size());
  if (a == 0) {
    std::copy(o0.begin(), o0.end(), out.begin());
    return;
  }
  const std::vector<float>& o1 = clip.offsets[k + 1];
  for (size_t i = 0; i < out.size(); ++i) out[i] = float((1 - a) * o0[i] + a * o1[i]);
}

size_t ClipFrameCount(const Clip& clip, double fps) {
  if (!(fps > 0) || !(clip.duration > 0)) return 1;  // (0 · ∞ is NaN)
  const double frames = std::floor(clip.duration * fps + 1e-9);
  // Saturates instead of overflowing for absurd durations (callers bound what they play).
  if (!(frames < 1e18)) return static_cast<size_t>(1e18);
  return static_cast<size_t>(frames) + 1;
}

}  // namespace sinew
