// sinew-bench-baseline: baseline skinning of point sets (seed 003) against LBS, DQS and memcpy in
// the same binary, on the paper's striped bar (core/procedural/point_bar.h) at the paper's size.
//   encode:  seconds to encode the points once (the rig's preparation), 2 threads.
//   GPU:     with a CUDA device, the device stage's frames (one session, each frame waited for)
//            and its largest difference from the CPU's exact joints.
//   frames:  points/s of each method on 1 and 2 threads over a bend-and-twist clip, and
//            baseline ÷ LBS, baseline ÷ DQS (the paper's Table 1: 1.4–6.3× DQS's time,
//            0.41–1.49 M points/s on a 4-core i7-4790K), and the baseline's bytes/s ÷ memcpy of
//            the bytes a frame touches (its codes, its output).
// Then the same on a real character made into a point set of as many points
// (clients/import/point_set.h), over 16 poses of its first clip.
// Usage: sinew-bench-baseline [points] [--dump FILE] [--character FILE|none] [--emulated-gpu]
//   points: default 520000 (the paper's models have 0.46–0.54 M)
//   --dump FILE: also writes the bar's baseline points for the clip's 16 poses (float32,
//                pose-major) to FILE, to compare two builds of the method (bench/compare_dump.py).
//   --character FILE: an assimp-readable rigged asset (default assimp-testmodels' Testwuson.X);
//                none: the bar only.
//   --emulated-gpu: run the GPU part on the CPU emulation of a device (checks the path and the
//                device's numbers; its speed means nothing).
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include "clients/import/asset_import.h"
#include "clients/import/point_set.h"
#include "core/baseline/baseline.h"
#include "core/clip/clip.h"
#include "gpu/backend.h"
#include "gpu/kernels.h"
#include "core/deformer/deformer.h"
#include "core/procedural/point_bar.h"
#include "core/rig/pose.h"
#include "core/parallel/thread_pool.h"

namespace sinew {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 16 poses: each joint bent up to 100° about z and twisted up to 120° about its bone.
std::vector<Pose> BarClip(const Skeleton& sk) {
  std::vector<Pose> poses;
  for (int k = 0; k < 16; ++k) {
    const double t = std::sin(std::numbers::pi * k / 15);
    Pose p = RestPose(sk);
    for (size_t j = 1; j < sk.size(); ++j) {
      const Eigen::Quaterniond bend(Eigen::AngleAxisd(t * 100 * std::numbers::pi / 180 / double(sk.size() - 1), Eigen::Vector3d::UnitZ()));
      const Eigen::Quaterniond twist(Eigen::AngleAxisd(t * 120 * std::numbers::pi / 180 / double(sk.size() - 1), Eigen::Vector3d::UnitX()));
      p.set_rotation(j, bend * twist);
    }
    poses.push_back(p);
  }
  return poses;
}

// Frames per second of `d` over the clip: one untimed frame first (its first touch of the
// output and the deformer's scratch), then at least 1 s and 8 frames (until 2026-12-03 the cold
// first frame was timed, and at half a second a frame the figure came from 3 or 4 frames).
double Rate(Deformer& d, const std::vector<Pose>& clip, size_t points, ThreadPool* pool) {
  std::vector<float> out(3 * points);
  auto deform = [&](size_t k) {
    const auto st = d.Deform({&clip[k % clip.size()], {}}, out, pool);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      std::exit(1);
    }
  };
  deform(0);
  int frames = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (Seconds(t0) < 1.0 || frames < 8) deform(size_t(++frames));
  return frames / Seconds(t0);
}

// memcpy of `bytes` (split in 2 on 2 threads), copies per second.
double Copy(size_t bytes, ThreadPool* pool) {
  std::vector<char> a(bytes, 1), b(bytes);
  int copies = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (Seconds(t0) < 0.5 || copies < 4) {
    const size_t chunk = 1 << 20;
    const size_t chunks = (bytes + chunk - 1) / chunk;
    ParallelFor(pool, chunks, 1, [&](size_t c0, size_t c1) {
      for (size_t c = c0; c < c1; ++c) {
        const size_t off = c * chunk, n = std::min(chunk, bytes - off);
        std::memcpy(b.data() + off, a.data() + off, n);
      }
    });
    ++copies;
  }
  if (b[bytes / 2] != 1) std::abort();
  return copies / Seconds(t0);
}

// Frames per second of `d`'s device stage on `backend` (one session, frames submitted one after
// another, each waited for), and the largest difference from `cpu` over the clip; 0 when the
// stage cannot be set up (printed).
double GpuRate(gpu::GpuBackend& backend, const Rig& rig, Deformer& d, Deformer& cpu, const std::vector<Pose>& clip,
               double* worst) {
  auto kernel = gpu::KernelByName(d.device_stage().kernel);
  auto on_gpu = backend.Upload(rig);
  std::vector<float> rows;
  uint32_t cols = 0;
  d.DeviceCoefficients(rows, cols);
  if (!kernel.ok() || !on_gpu.ok()) return 0;
  auto coeffs = backend.UploadCoefficients(**on_gpu, rows, cols);
  if (!coeffs.ok()) return 0;
  gpu::SessionSpec spec;
  spec.method = *kernel;
  spec.coefficients = *coeffs;
  spec.frame_floats = uint32_t(d.device_param_count());
  auto session = backend.CreateSession(*on_gpu, spec);
  if (!session.ok()) {
    std::printf("GPU: %s\n", std::string(session.status().message()).c_str());
    return 0;
  }
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::Status status;
  };
  std::vector<float> params, out(rig.positions.size()), want(out.size());
  auto frame = [&](const Pose& pose) {
    if (!d.DeviceFrame({&pose, {}}, params).ok()) std::abort();
    Wait w;
    backend.Submit(**session, params, out.data(), gpu::OutputFormat::kFloat32,
                   [](void* c, const absl::Status& st) {
                     auto* w = static_cast<Wait*>(c);
                     std::lock_guard<std::mutex> lock(w->mu);
                     w->status = st;
                     w->done = true;
                     w->cv.notify_one();
                   },
                   &w);
    std::unique_lock<std::mutex> lock(w.mu);
    w.cv.wait(lock, [&] { return w.done; });
    if (!w.status.ok()) std::abort();
  };
  *worst = 0;
  for (const Pose& pose : clip) {
    frame(pose);
    if (!cpu.Deform({&pose, {}}, want, nullptr).ok()) std::abort();
    for (size_t i = 0; i < out.size(); ++i) *worst = std::max(*worst, double(std::fabs(out[i] - want[i])));
  }
  int frames = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (Seconds(t0) < 1.0 || frames < 4) frame(clip[frames++ % clip.size()]);
  return frames / Seconds(t0);
}

// Encodes `rig`, then times baseline skinning (joint tables, exact joints), LBS, DQS and memcpy
// over `clip` on 1 and 2 threads; `dump`: also writes the baseline's points for the clip.
int Run(const char* what, std::shared_ptr<const Rig> rig, const std::vector<Pose>& clip, ThreadPool& pool,
        const char* dump, gpu::GpuBackend* gpu) {
  const size_t n = rig->vertex_count();
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  std::printf("%s: %zu points, %zu bones, LBS/DQS with Gaussian weights (<= 4 a point); load average %.2f\n", what, n,
              rig->sphere_mesh.bone_count(), load[0]);
  auto t0 = std::chrono::steady_clock::now();
  auto prepared = PrepareBaseline(*rig, DeformerConfig("baseline"), &pool, {});
  if (!prepared.ok()) {
    std::fprintf(stderr, "%s\n", std::string(prepared.status().message()).c_str());
    return 1;
  }
  const double encode = Seconds(t0);
  std::printf("encode: %.2f s on 2 threads (%.2f M points/s); %s\n", encode, n / encode / 1e6, (*prepared)->Summary().c_str());

  auto base = CreateBaselineDeformer(rig, *prepared, DeformerConfig("baseline"));
  auto exact_params = std::make_shared<BaselineParams>();
  exact_params->exact_joints = true;
  auto exact = CreateBaselineDeformer(rig, *prepared, DeformerConfig("baseline", exact_params));
  auto lbs = CreateDeformer(rig, DeformerConfig("lbs"));
  auto dqs = CreateDeformer(rig, DeformerConfig("dqs"));
  if (!base.ok() || !exact.ok() || !lbs.ok() || !dqs.ok()) return 1;
  {  // the joint tables against every point's own solve, over the clip
    std::vector<float> a(3 * n), b(3 * n);
    double worst = 0;
    for (const Pose& pose : clip) {
      if (!(*base)->Deform({&pose, {}}, a, &pool).ok() || !(*exact)->Deform({&pose, {}}, b, &pool).ok()) return 1;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    }
    std::printf("joint tables vs exact joints: largest difference %.2e over the clip (bounding diagonal %.2f)\n", worst,
                rig->bbox_diagonal());
  }
  if (dump != nullptr) {
    std::FILE* f = std::fopen(dump, "wb");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", dump);
      return 1;
    }
    std::vector<float> out(3 * n);
    for (const Pose& pose : clip) {
      if (!(*base)->Deform({&pose, {}}, out, &pool).ok()) return 1;
      std::fwrite(out.data(), sizeof(float), out.size(), f);
    }
    std::fclose(f);
  }
  // A frame reads each point's code and writes its position (the sphere-mesh is a few hundred bytes).
  const size_t bytes = n * (sizeof(baseline::PointCode) + 12);
  for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const int count = threads ? 2 : 1;
    const double b = Rate(**base, clip, n, threads);
    const double x = Rate(**exact, clip, n, threads);
    const double l = Rate(**lbs, clip, n, threads);
    const double d = Rate(**dqs, clip, n, threads);
    const double c = Copy(bytes, threads);
    std::printf("%d thread%s: baseline %.3f s/frame (%.2f M points/s; exact joints %.3f s, %.2f M/s), LBS %.3f s, "
                "DQS %.3f s; baseline time ÷ LBS %.1f, ÷ DQS %.1f; baseline bytes/s ÷ memcpy %.3f\n",
                count, count > 1 ? "s" : " ", 1 / b, n * b / 1e6, 1 / x, n * x / 1e6, 1 / l, 1 / d, l / b, d / b, b / c);
  }
  if (gpu != nullptr) {
    double worst = 0;
    const double g = GpuRate(*gpu, *rig, **base, **exact, clip, &worst);
    const double l = Rate(**lbs, clip, n, &pool);
    if (g > 0) {
      std::printf("GPU (%s): baseline %.4f s/frame (%.1f M points/s, one frame at a time, transfers included), "
                  "largest difference from the CPU's exact joints %.2e; CPU LBS on 2 threads %.4f s\n",
                  gpu->Devices()[0].name.c_str(), 1 / g, n * g / 1e6, worst, 1 / l);
    }
  } else {
    std::printf("GPU: no CUDA device here; skipped\n");
  }
  if (getloadavg(load, 3) >= 0) std::printf("load average after: %.2f\n\n", load[0]);
  return 0;
}

}  // namespace
}  // namespace sinew

int main(int argc, char** argv) {
  using namespace sinew;
  size_t target = 520000;
  const char* dump = nullptr;
  bool emulated = false;
  std::string character = std::string(SINEW_ASSIMP_MODELS) + "/X/Testwuson.X";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc) {
      dump = argv[++i];
    } else if (std::strcmp(argv[i], "--emulated-gpu") == 0) {
      emulated = true;
    } else if (std::strcmp(argv[i], "--character") == 0 && i + 1 < argc) {
      character = argv[++i];
    } else if (std::isdigit(static_cast<unsigned char>(argv[i][0]))) {
      // Digits only, and a count a frame can hold: "5e5" was read as 5 and "100k" as 100.
      char* end = nullptr;
      target = std::strtoul(argv[i], &end, 10);
      if (*end != '\0' || target < 100 || target > 50'000'000) {
        std::fprintf(stderr, "sinew-bench-baseline: points: '%s' is not a whole number from 100 to 50000000\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: sinew-bench-baseline [points] [--dump FILE] [--character FILE|none] [--emulated-gpu]\n");
      return 2;
    }
  }
  ThreadPool pool(1);  // one worker and the calling thread: the "2 threads" printed below
  gpu::GpuOptions gpu_options;
  gpu_options.emulate_devices = emulated ? 1 : 0;
  auto backend = gpu::GpuBackend::Create(gpu_options);
  gpu::GpuBackend* gpu = backend.ok() ? backend->get() : nullptr;
  PointBarOptions o;
  o.xs = {0, 2, 4, 6, 8};
  o.radii = {0.6, 0.55, 0.6, 0.5, 0.55};
  o.around = 256;
  o.scattered = true;  // as a scan: every point on its own baseline
  o.rings = uint32_t(std::max<size_t>(8, target / o.around));
  auto bar = BuildRig(MakePointBar(o));
  if (!bar.ok()) {
    std::fprintf(stderr, "%s\n", std::string(bar.status().message()).c_str());
    return 1;
  }
  auto bar_rig = std::make_shared<const Rig>(std::move(*bar));
  if (int rc = Run("striped bar, scattered", bar_rig, BarClip(bar_rig->skeleton), pool, dump, gpu); rc != 0) return rc;
  if (character == "none") return 0;
  if (!std::filesystem::exists(character)) {
    std::printf("%s: not installed (scripts/install-deps.sh installs assimp-testmodels); skipped\n", character.c_str());
    return 0;
  }
  auto asset = ImportAsset(character);
  if (!asset.ok() || asset->clips.empty()) {
    std::fprintf(stderr, "%s: %s\n", character.c_str(), asset.ok() ? "no clip" : std::string(asset.status().message()).c_str());
    return 1;
  }
  PointSetOptions po;
  po.points = target;
  auto in = PointSetFromCharacter(asset->rig, po);
  auto rig = in.ok() ? BuildRig(std::move(*in)) : absl::StatusOr<Rig>(in.status());
  if (!rig.ok()) {
    std::fprintf(stderr, "%s: %s\n", character.c_str(), std::string(rig.status().message()).c_str());
    return 1;
  }
  auto points = std::make_shared<const Rig>(std::move(*rig));
  std::vector<Pose> clip(16);
  for (int k = 0; k < 16; ++k) SampleClip(asset->clips[0], points->skeleton, asset->clips[0].duration * k / 15, clip[k]);
  const std::string what = std::filesystem::path(character).filename().string() + " as a point set";
  return Run(what.c_str(), points, clip, pool, nullptr, gpu);
}
