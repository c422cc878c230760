// sinew-bench-pool: Sinew's worker pool (core/parallel/thread_pool.h) against oneTBB, in one
// binary, on the two patterns the server puts on its pool:
//
//   ParallelFor   one LBS frame split over the threads (10k, 100k, 1M vertices; grain 8192 as
//                 the deformers use): our ParallelFor vs tbb::parallel_for (simple partitioner,
//                 same grain) in an arena of the same size.
//   Sessions      50 sessions (streams) × 40 frames of a 20k-vertex LBS rig, all started at
//                 once; a session's frames run in order (one in flight per stream, as in the
//                 service), each split by a nested parallel for: our Submit + nested
//                 ParallelFor vs tbb::task_group::run + nested tbb::parallel_for.
//
// Both sides use the same thread count (--threads, default 2: the calling thread plus one
// worker for ParallelFor, two workers for Sessions) and compute identical outputs (checked).
// The summary prints time(TBB) / time(Sinew): above 1, Sinew's pool is faster.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include "core/lbs/lbs.h"
#include "core/parallel/thread_pool.h"
#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "bench/load_average.h"

namespace sinew {
namespace {

using Clock = std::chrono::steady_clock;

struct Posed {
  Rig rig;
  std::vector<Affine34f> matrices;
};

Posed Make(size_t vertices) {
  LimbOptions o;
  o.segments = 100;
  o.rings = uint32_t(vertices / 100);
  o.bones = 8;
  o.max_influences = 4;
  Posed p{*BuildRig(MakeLimb(o)), {}};
  const Pose pose = LimbPose(p.rig.skeleton, 0.5);
  std::vector<Similarity> world(p.rig.joint_count());
  std::vector<Affine34d> t(p.rig.joint_count());
  SkinningTransforms(p.rig.skeleton, pose, world, t);
  for (const auto& m : t) p.matrices.push_back(m.cast<float>());
  return p;
}

// The fastest of `repeats` runs of fn, in seconds.
template <class F>
double Best(int repeats, F&& fn) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

constexpr size_t kGrain = 8192;

}  // namespace
}  // namespace sinew

int main(int argc, char** argv) {
  const sinew::bench::LoadAverageReport load_average;  // printed before and after the run
  using namespace sinew;
  int threads = 2;
  // Every argument checked (until 2026-12-03 a typo was ignored and "--threads abc" ran 1 thread).
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    char* end = nullptr;
    const long n = a == "--threads" && i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
    if (a != "--threads" || i + 1 >= argc || *end != '\0' || n < 1 || n > 256) {
      std::fprintf(stderr, "usage: sinew-bench-pool [--threads N] (N from 1 to 256; '%s' is not)\n",
                   a == "--threads" && i + 1 < argc ? argv[i + 1] : argv[i]);
      return 2;
    }
    threads = int(n);
    ++i;
  }
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads) + 1);
  tbb::task_arena arena(threads);
  std::printf("sinew-bench-pool: %d threads; time(TBB) / time(Sinew), best of repeats (above 1: Sinew faster)\n",
              threads);

  // ParallelFor: one frame split over the threads.
  ThreadPool pool{size_t(threads - 1)};
  for (size_t n : {size_t{10'000}, size_t{100'000}, size_t{1'000'000}}) {
    Posed p = Make(n);
    std::vector<float> a(p.rig.positions.size()), b(a.size());
    const int frames = int(std::max<size_t>(20, 20'000'000 / n));
    const double ours = Best(5, [&] {
      for (int f = 0; f < frames; ++f) {
        pool.ParallelFor(p.rig.vertex_count(), kGrain, [&](size_t s, size_t e) {
          LinearBlendSkinningRange(p.rig.positions, p.rig.weights, p.matrices, a, s, e);
        });
      }
    });
    const double tbb = Best(5, [&] {
      arena.execute([&] {
        for (int f = 0; f < frames; ++f) {
          tbb::parallel_for(tbb::blocked_range<size_t>(0, p.rig.vertex_count(), kGrain),
                            [&](const tbb::blocked_range<size_t>& r) {
                              LinearBlendSkinningRange(p.rig.positions, p.rig.weights, p.matrices, b, r.begin(), r.end());
                            },
                            tbb::simple_partitioner());
        }
      });
    });
    if (a != b) {
      std::fprintf(stderr, "outputs differ\n");
      return 1;
    }
    std::printf("ParallelFor LBS %7zu vertices: Sinew %8.1f us/frame, TBB %8.1f us/frame, ratio %.2f\n", n,
                1e6 * ours / frames, 1e6 * tbb / frames, tbb / ours);
  }

  // Sessions: many concurrent frames, each splitting itself.
  {
    constexpr int kSessions = 50, kFrames = 40;
    Posed p = Make(20'000);
    const size_t floats = p.rig.positions.size();
    std::vector<std::vector<float>> outs(kSessions, std::vector<float>(floats)), outs_tbb = outs;
    ThreadPool workers{size_t(threads)};
    struct Ctx {
      ThreadPool* pool;
      Posed* p;
      std::vector<float>* out;
      std::atomic<int>* left;
    };
    std::vector<Ctx> ctx(kSessions);
    const double ours = Best(3, [&] {
      std::atomic<int> left{kSessions};
      for (int s = 0; s < kSessions; ++s) {
        ctx[s] = {&workers, &p, &outs[s], &left};
        workers.Submit(
            [](void* arg) {  // one stream: its frames in order, each split by a nested ParallelFor
              auto& c = *static_cast<Ctx*>(arg);
              for (int f = 0; f < kFrames; ++f) {
                c.pool->ParallelFor(c.p->rig.vertex_count(), kGrain, [&](size_t b, size_t e) {
                  LinearBlendSkinningRange(c.p->rig.positions, c.p->rig.weights, c.p->matrices, *c.out, b, e);
                });
              }
              if (c.left->fetch_sub(1) == 1) c.left->notify_all();
            },
            &ctx[s]);
      }
      // Blocked, not spinning: `threads` workers run, as TBB's arena of `threads` (its caller
      // works inside g.wait()). Until 2026-12-03 this thread yielded in a loop: a third runnable
      // thread on 2 cores, against Sinew.
      for (int v; (v = left.load()) > 0;) left.wait(v);
    });
    tbb::task_arena session_arena(threads);
    const double tbb = Best(3, [&] {
      session_arena.execute([&] {
        tbb::task_group g;
        for (int s = 0; s < kSessions; ++s) {
          g.run([&, s] {
            for (int f = 0; f < kFrames; ++f) {
              tbb::parallel_for(tbb::blocked_range<size_t>(0, p.rig.vertex_count(), kGrain),
                                [&](const tbb::blocked_range<size_t>& r) {
                                  LinearBlendSkinningRange(p.rig.positions, p.rig.weights, p.matrices, outs_tbb[s],
                                                           r.begin(), r.end());
                                },
                                tbb::simple_partitioner());
            }
          });
        }
        g.wait();
      });
    });
    if (outs != outs_tbb) {
      std::fprintf(stderr, "outputs differ\n");
      return 1;
    }
    const double frames = kSessions * kFrames;
    std::printf("Sessions %d x %d frames, 20k vertices: Sinew %.0f frames/s, TBB %.0f frames/s, ratio %.2f\n",
                kSessions, kFrames, frames / ours, frames / tbb, tbb / ours);
  }
  return 0;
}
