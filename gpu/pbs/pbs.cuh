// Position-based skinning's frame on a device (core/pbs/, seed 002): the same steps as core's
// SolvePbsFrame — LBS prediction of the particles (inertia for painted ones), Gauss–Seidel sweeps
// colour by colour (stretch, volume with the corrected gradients, bind; PBD or XPBD), the
// recovery passes for inverted tets, the velocities — then the render vertices from their tets.
//
// One frame is one team of threads: a CUDA block per session (gpu/pbs/pbs_cuda.cu), or one host
// thread in the emulation (gpu/pbs/device_program.cc). The team splits each colour among its
// threads (a colour's constraints share no particle, so any split gives the serial result) and
// meets at a barrier between colours: `Exec` provides For (the split), Sync (the barrier) and
// Any (a barrier that also says whether any thread saw something).
#pragma once

#include <cstdint>
#include <string>

#include "core/pbs/device_layout.h"
#include "gpu/runtime/device_api.h"
#include "gpu/runtime/hd.h"

namespace sinew::gpu {

// Core's constraint records (core/pbs/constraints.h, core/pbs/pbs.h), uploaded as they are.
struct PbsStretch {
  uint32_t a, b;
  float rest;
};
struct PbsVolume {
  uint32_t p[4];
  float rest;
};
struct PbsBind {
  uint32_t from, to;
  float rest;  // < 0: no bind
};

// A rig's pbs model on the device (core's PbsModel).
struct PbsModelView {
  const float* rest;            // 3 per particle
  const uint32_t* w_offsets;    // particles + 1
  const uint16_t* w_joints;
  const float* w_weights;
  const PbsStretch* stretch;    // in colour order
  const uint32_t* stretch_colours;  // colour offsets (colours + 1)
  const PbsVolume* volume;
  const uint32_t* volume_colours;
  const PbsBind* bind;          // per particle, or null
  const float* joint_rest;      // 3 per joint
  const float* alpha;           // per particle (painted jiggle), or null
  const uint8_t* stretch_jiggles;  // per constraint: touches a painted particle (null without alpha)
  const uint8_t* volume_jiggles;
  const uint32_t* tets;         // 4 per tet
  const uint32_t* embed_tet;    // per render vertex
  const float* embed_beta;      // 4 per render vertex
  uint32_t particles, vertices, joint_count;
  uint32_t stretch_count, volume_count;
  uint32_t stretch_colour_offsets, volume_colour_offsets;  // entries of the colour arrays
};

// One session's frame in a batch.
struct alignas(16) PbsItem {
  PbsModelView m;
  float* x;       // 3 per particle (the session's state)
  float* v;       // 3 per particle (velocities; previous positions during the sweeps)
  float* lambda;  // XPBD multipliers: stretch, volume, bind
  uint32_t vertex_offset, param_offset;
};

struct PbsF3 {
  float x, y, z;
};
SINEW_HD PbsF3 PbsLoad(const float* p) { return {p[0], p[1], p[2]}; }
SINEW_HD void PbsStore(float* p, PbsF3 a) {
  p[0] = a.x;
  p[1] = a.y;
  p[2] = a.z;
}
SINEW_HD PbsF3 operator+(PbsF3 a, PbsF3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
SINEW_HD PbsF3 operator-(PbsF3 a, PbsF3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
SINEW_HD PbsF3 operator*(float s, PbsF3 a) { return {s * a.x, s * a.y, s * a.z}; }
SINEW_HD float PbsDot(PbsF3 a, PbsF3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
SINEW_HD PbsF3 PbsCross(PbsF3 a, PbsF3 b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
// A row-major 3x4 transform applied to a point.
SINEW_HD PbsF3 PbsTransform(const float* m, PbsF3 p) {
  return {m[0] * p.x + m[1] * p.y + m[2] * p.z + m[3], m[4] * p.x + m[5] * p.y + m[6] * p.z + m[7],
          m[8] * p.x + m[9] * p.y + m[10] * p.z + m[11]};
}

// Stretch: C = |a − b| − rest along n; PBD with stiffness k, or XPBD with α̃ and the multiplier.
SINEW_HD void PbsProjectStretch(const PbsStretch& c, bool xpbd, float k, float alpha_tilde, float* lambda, float* x) {
  float* pa = x + 3 * size_t(c.a);
  float* pb = x + 3 * size_t(c.b);
  const PbsF3 a = PbsLoad(pa), b = PbsLoad(pb), d = a - b;
  const float length = sqrtf(PbsDot(d, d));
  if (length < 1e-9f * c.rest) return;
  PbsF3 step;
  if (xpbd) {
    const float dl = (-(length - c.rest) - alpha_tilde * *lambda) / (2 + alpha_tilde);
    *lambda += dl;
    step = (-dl / length) * d;  // a moves by −step
  } else {
    step = (0.5f * k * (length - c.rest) / length) * d;
  }
  PbsStore(pa, a - step);
  PbsStore(pb, b + step);
}

// Volume: C = (1/6)(p2−p1)×(p3−p1)·(p4−p1) − rest, the corrected gradients (core/pbs/constraints.h).
SINEW_HD void PbsProjectVolume(const PbsVolume& c, float rest, bool xpbd, float k, float alpha_tilde, float* lambda,
                               float* x) {
  PbsF3 p[4];
  for (int i = 0; i < 4; ++i) p[i] = PbsLoad(x + 3 * size_t(c.p[i]));
  const PbsF3 p21 = p[1] - p[0], p31 = p[2] - p[0], p41 = p[3] - p[0];
  PbsF3 g[4];
  // Divided by 6 as core does (a product by the rounded 1/6 differs in the last bit for a third of
  // the inputs: until 2026-12-07 it did).
  const auto sixth = [](PbsF3 a) { return PbsF3{a.x / 6, a.y / 6, a.z / 6}; };
  g[1] = sixth(PbsCross(p31, p41));
  g[2] = sixth(PbsCross(p41, p21));
  g[3] = sixth(PbsCross(p21, p31));
  g[0] = PbsF3{0, 0, 0} - (g[1] + g[2] + g[3]);
  const float value = PbsDot(PbsCross(p21, p31), p41) / 6 - rest;
  const float norm = PbsDot(g[0], g[0]) + PbsDot(g[1], g[1]) + PbsDot(g[2], g[2]) + PbsDot(g[3], g[3]);
  if (!(norm > 0)) return;
  float s;
  if (xpbd) {
    const float dl = (-value - alpha_tilde * *lambda) / (norm + alpha_tilde);
    *lambda += dl;
    s = -dl;
  } else {
    s = k * value / norm;
  }
  for (int i = 0; i < 4; ++i) PbsStore(x + 3 * size_t(c.p[i]), p[i] - s * g[i]);
}

SINEW_HD bool PbsInverted(const PbsVolume& c, const float* x) {
  const PbsF3 p0 = PbsLoad(x + 3 * size_t(c.p[0]));
  const PbsF3 p1 = PbsLoad(x + 3 * size_t(c.p[1])) - p0, p2 = PbsLoad(x + 3 * size_t(c.p[2])) - p0,
              p3 = PbsLoad(x + 3 * size_t(c.p[3])) - p0;
  return !(PbsDot(PbsCross(p1, p2), p3) > 0);
}

// Bind: the particle back to its rest distance from its bone, posed with the bone's joint.
SINEW_HD void PbsProjectBind(const PbsModelView& m, const float* skinning, uint32_t i, bool xpbd, float k,
                             float alpha_tilde, float* lambda, float* x) {
  const PbsBind c = m.bind[i];
  if (c.rest < 0) return;
  const float* s = skinning + pbs_device::kJointFloats * size_t(c.from);
  const PbsF3 a = PbsTransform(s, PbsLoad(m.joint_rest + 3 * size_t(c.from)));
  const PbsF3 b = PbsTransform(s, PbsLoad(m.joint_rest + 3 * size_t(c.to)));
  float* pp = x + 3 * size_t(i);
  const PbsF3 p = PbsLoad(pp), ab = b - a;
  const float len2 = PbsDot(ab, ab);
  float t = len2 > 0 ? PbsDot(p - a, ab) / len2 : 0.f;
  t = t < 0 ? 0.f : (t > 1 ? 1.f : t);
  const PbsF3 d = p - (a + t * ab);
  const float length = sqrtf(PbsDot(d, d));
  if (length < 1e-9f) return;
  if (xpbd) {
    const float dl = (-(length - c.rest) - alpha_tilde * *lambda) / (1 + alpha_tilde);
    *lambda += dl;
    PbsStore(pp, p + (dl / length) * d);
  } else {
    PbsStore(pp, p - (k * (length - c.rest) / length) * d);
  }
}

// One frame of one item: `params` its parameters (core/pbs/device_layout.h), `out` the batch's
// output rows (3 floats per vertex).
template <class Exec>
SINEW_HD void PbsFrame(const Exec& ex, const PbsItem& it, const float* params, float* out) {
  namespace L = pbs_device;
  const PbsModelView& m = it.m;
  const float* skinning = params + L::kHeaderFloats;
  const bool fresh = params[L::kFresh] != 0, jiggle = params[L::kJiggle] != 0 && m.alpha != nullptr;
  const bool xpbd = params[L::kXpbd] != 0, quasi = params[L::kQuasiStatic] != 0;
  const bool dynamic = jiggle && !fresh && !quasi;
  const bool still = params[L::kStill] != 0;  // jiggle just switched on: velocities taken as zero
  const float h = params[L::kTimeStep];
  const float damp = expf(-params[L::kDamping] * h);
  const PbsF3 fall{params[L::kGravity] * h * h, params[L::kGravity + 1] * h * h, params[L::kGravity + 2] * h * h};
  float* x = it.x;
  float* v = it.v;
  const uint32_t n = m.particles;
  if (xpbd) ex.For(m.stretch_count + m.volume_count + (m.bind ? n : 0), [&](uint32_t i) { it.lambda[i] = 0.f; });
  // The prediction.
  ex.For(n, [&](uint32_t i) {
    float a[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t k = m.w_offsets[i]; k < m.w_offsets[i + 1]; ++k) {
      const float w = m.w_weights[k];
      const float* s = skinning + L::kJointFloats * size_t(m.w_joints[k]);
      for (int e = 0; e < 12; ++e) a[e] += w * s[e];
    }
    const PbsF3 lbs = PbsTransform(a, PbsLoad(m.rest + 3 * size_t(i)));
    float* xi = x + 3 * size_t(i);
    if (!jiggle) {
      PbsStore(xi, lbs);
      return;
    }
    float* vi = v + 3 * size_t(i);
    const PbsF3 previous = fresh ? lbs : PbsLoad(xi);
    const float alpha = m.alpha[i];
    if (dynamic && alpha > 0) {
      const PbsF3 inert = still ? previous + fall : previous + (h * damp) * PbsLoad(vi) + fall;
      PbsStore(xi, (1 - alpha) * lbs + alpha * inert);
    } else {
      PbsStore(xi, lbs);
    }
    PbsStore(vi, previous);
  });
  ex.Sync();
  const float ks = params[L::kStretchK], kv = params[L::kVolumeK], kb = params[L::kBindK], kj = params[L::kJiggleK];
  const float inv_h2 = h > 0 ? 1.f / (h * h) : 0.f;
  const float as = params[L::kStretchA] * inv_h2, av = params[L::kVolumeA] * inv_h2, ab = params[L::kBindA] * inv_h2,
              aj = params[L::kJiggleA] * inv_h2;
  float* lambda_stretch = it.lambda;
  float* lambda_volume = it.lambda + m.stretch_count;
  float* lambda_bind = lambda_volume + m.volume_count;
  const uint32_t iterations = uint32_t(params[L::kIterations]);
  for (uint32_t sweep = 0; sweep < iterations; ++sweep) {
    for (uint32_t c = 0; c + 1 < m.stretch_colour_offsets; ++c) {
      const uint32_t first = m.stretch_colours[c];
      ex.For(m.stretch_colours[c + 1] - first, [&](uint32_t j) {
        const uint32_t k = first + j;
        const bool soft = jiggle && m.stretch_jiggles[k];
        PbsProjectStretch(m.stretch[k], xpbd, soft ? kj : ks, soft ? aj : as, lambda_stretch + k, x);
      });
      ex.Sync();
    }
    for (uint32_t c = 0; c + 1 < m.volume_colour_offsets; ++c) {
      const uint32_t first = m.volume_colours[c];
      ex.For(m.volume_colours[c + 1] - first, [&](uint32_t j) {
        const uint32_t k = first + j;
        const bool soft = jiggle && m.volume_jiggles[k];
        PbsProjectVolume(m.volume[k], m.volume[k].rest, xpbd, soft ? kj : kv, soft ? aj : av, lambda_volume + k, x);
      });
      ex.Sync();
    }
    if (m.bind) {
      ex.For(n, [&](uint32_t i) {
        const bool soft = jiggle && m.alpha[i] > 0;
        PbsProjectBind(m, skinning, i, xpbd, soft ? kj : kb, soft ? aj : ab, lambda_bind + i, x);
      });
      ex.Sync();
    }
  }
  // The recovery passes: only the tets still inverted, to a tenth of their rest volume.
  const uint32_t passes = iterations > 0 ? uint32_t(params[L::kRecoveryPasses]) : 0;
  for (uint32_t pass = 0; pass < passes; ++pass) {
    bool found = false;
    for (uint32_t c = 0; c + 1 < m.volume_colour_offsets; ++c) {
      const uint32_t first = m.volume_colours[c];
      ex.For(m.volume_colours[c + 1] - first, [&](uint32_t j) {
        const PbsVolume& q = m.volume[first + j];
        if (!PbsInverted(q, x)) return;
        found = true;
        PbsProjectVolume(q, q.rest * L::kRecoveryTarget, false, 1.f, 0.f, nullptr, x);
      });
      ex.Sync();
    }
    if (!ex.Any(found)) break;
  }
  if (jiggle) {
    const float inv_h = dynamic && h > 0 ? 1.f / h : 0.f;
    ex.For(3 * n, [&](uint32_t i) { v[i] = (x[i] - v[i]) * inv_h; });
    ex.Sync();
  }
  // The render mesh follows its tets.
  ex.For(m.vertices, [&](uint32_t r) {
    const uint32_t* t = m.tets + 4 * size_t(m.embed_tet[r]);
    const float* beta = m.embed_beta + 4 * size_t(r);
    PbsF3 q{0, 0, 0};
    for (int k = 0; k < 4; ++k) q = q + beta[k] * PbsLoad(x + 3 * size_t(t[k]));
    PbsStore(out + 3 * (size_t(it.vertex_offset) + r), q);
  });
}

// gpu/pbs/pbs_cuda.cu: a block per item (CUDA builds only).
bool RunPbsCuda(void* cuda_stream, const ProgramBatch& batch, std::string* error);

}  // namespace sinew::gpu
