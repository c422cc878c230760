#include "sinew/v1/position_codec.h"

#include <algorithm>
#include <array>
#include <utility>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace sinew::wire {
namespace {

// The hot loops are compiled for baseline x86-64 and for x86-64-v3 (AVX2, FMA); the CPU picks at
// load time (as core/util/simd.h does for the deformers).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)  // see core/util/simd.h
#define VERTEX_LOOP __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VERTEX_LOOP
#endif

constexpr size_t kBlock = 16;  // values per bit-packed block
constexpr char kAxis[3] = {'x', 'y', 'z'};

// Small magnitudes to small codes: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ... (branch-free, so it vectorises).
inline uint32_t ZigZag32(int32_t v) { return (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31); }
inline uint32_t UnZigZag32(uint32_t u) { return (u >> 1) ^ (0u - (u & 1)); }

// Round to nearest (ties to even) for |t| < 2^51, without a library call, so loops vectorise.
inline double Round(double t) {
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  return (t + kMagic) - kMagic;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, AArch64)
}

// One block of 16 values at W bits each: 2 W bytes, value j at bits [j W, j W + W), least
// significant bit first. W is a constant, so the loops unroll into straight shifts.
template <unsigned W>
void PackBlock(const uint32_t* v, uint8_t* o) {
  if constexpr (W > 0) {
    uint64_t acc = 0;
    unsigned bits = 0;
    for (size_t j = 0; j < kBlock; ++j) {
      acc |= uint64_t{v[j]} << bits;
      bits += W;
      if (bits >= 32) {
        const uint32_t word = static_cast<uint32_t>(acc);
        std::memcpy(o, &word, 4);
        o += 4;
        acc >>= 32;
        bits -= 32;
      }
    }
    if (bits) {  // 16 W bits: 0 or 16 left
      const uint16_t half = static_cast<uint16_t>(acc);
      std::memcpy(o, &half, 2);
    }
  }
}

// Reads a block written by PackBlock<W> from `in`, which has 2 W + 8 readable bytes.
template <unsigned W>
void UnpackBlock(const uint8_t* in, uint32_t* v) {
  if constexpr (W == 0) {
    for (size_t j = 0; j < kBlock; ++j) v[j] = 0;
  } else {
    constexpr uint64_t kMask = (uint64_t{1} << W) - 1;
    for (size_t j = 0; j < kBlock; ++j) {
      const size_t bit = j * W;
      v[j] = static_cast<uint32_t>((Load64(in + bit / 8) >> (bit % 8)) & kMask);
    }
  }
}

using PackFn = void (*)(const uint32_t*, uint8_t*);
using UnpackFn = void (*)(const uint8_t*, uint32_t*);

template <size_t... W>
constexpr std::array<PackFn, sizeof...(W)> PackTable(std::index_sequence<W...>) {
  return {&PackBlock<W>...};
}
template <size_t... W>
constexpr std::array<UnpackFn, sizeof...(W)> UnpackTable(std::index_sequence<W...>) {
  return {&UnpackBlock<W>...};
}
constexpr auto kPack = PackTable(std::make_index_sequence<33>());
constexpr auto kUnpack = UnpackTable(std::make_index_sequence<33>());

inline unsigned Width(const uint32_t* v) {
  uint32_t all = 0;
  for (size_t j = 0; j < kBlock; ++j) all |= v[j];
  return all ? 32 - static_cast<unsigned>(__builtin_clz(all)) : 0;
}

// Appends u[0..n) in blocks of 16, each a width byte W (the bits of its largest value) and its
// values packed by PackBlock<W>; the last block is padded with zeros. `widths`: scratch.
void Pack(const uint32_t* u, size_t n, std::string& out, std::vector<uint8_t>& widths) {
  const size_t blocks = (n + kBlock - 1) / kBlock, full = n / kBlock;
  uint32_t tail[kBlock] = {};
  if (full < blocks) std::memcpy(tail, u + full * kBlock, (n - full * kBlock) * sizeof(uint32_t));
  widths.resize(blocks);
  size_t size = blocks;  // first the size, so that `out` grows once, by what is written
  for (size_t b = 0; b < blocks; ++b) {
    widths[b] = static_cast<uint8_t>(Width(b < full ? u + b * kBlock : tail));
    size += 2 * size_t{widths[b]};
  }
  const size_t at = out.size();
  out.resize(at + size);
  uint8_t* o = reinterpret_cast<uint8_t*>(out.data()) + at;
  for (size_t b = 0; b < blocks; ++b) {
    const unsigned w = widths[b];
    *o++ = static_cast<uint8_t>(w);
    kPack[w](b < full ? u + b * kBlock : tail, o);
    o += 2 * w;
  }
}

// Reads n values written by Pack from bytes[*at...]; false when the bytes end early or a width
// is over 32 (then `wide` says which block and width).
bool Unpack(std::string_view bytes, size_t* at, size_t n, uint32_t* u, std::string* wide) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  size_t pos = *at;
  uint32_t tail[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    if (pos >= size) return false;
    const unsigned w = p[pos++];
    if (w > 32) {
      *wide = absl::StrCat("block ", b / kBlock, " (byte ", pos - 1, ") says ", w, " bits a value; at most 32");
      return false;
    }
    if (size - pos < 2 * w) return false;
    uint32_t* dst = n - b >= kBlock ? u + b : tail;
    if (size - pos >= 2 * w + 8) {
      kUnpack[w](p + pos, dst);
    } else {  // near the end: from a copy with the 8 bytes of slack the block reader needs
      uint8_t block[2 * 32 + 8] = {};
      std::memcpy(block, p + pos, 2 * w);
      kUnpack[w](block, dst);
    }
    if (dst == tail) std::memcpy(u + b, tail, (n - b) * sizeof(uint32_t));
    pos += 2 * w;
  }
  *at = pos;
  return true;
}

// The grid coordinates of n points, by axis (x of every point, then y, then z): false when one
// is off the grid (beyond kDeltaGridLimit), infinite or NaN; those are stored as 0.
VERTEX_LOOP bool Quantize(const float* p, size_t n, const double offset[3], double inv, int32_t* q) {
  constexpr double kLimit = double(kDeltaGridLimit);
  const double ox = offset[0], oy = offset[1], oz = offset[2];
  int32_t* qx = q;
  int32_t* qy = qx + n;
  int32_t* qz = qy + n;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double tx = (double(p[3 * i]) - ox) * inv, ty = (double(p[3 * i + 1]) - oy) * inv,
                 tz = (double(p[3 * i + 2]) - oz) * inv;
    // Clamped onto the grid (NaN to 0) with selects rather than branches; a clamped coordinate
    // differs from its own value and marks the frame bad (found again by the caller for the message).
    double cx = std::min(std::max(tx, -kLimit), kLimit), cy = std::min(std::max(ty, -kLimit), kLimit),
           cz = std::min(std::max(tz, -kLimit), kLimit);
    cx = cx == cx ? cx : 0;
    cy = cy == cy ? cy : 0;
    cz = cz == cz ? cz : 0;
    bad |= (cx != tx) | (cy != ty) | (cz != tz);
    qx[i] = static_cast<int32_t>(Round(cx));
    qy[i] = static_cast<int32_t>(Round(cy));
    qz[i] = static_cast<int32_t>(Round(cz));
  }
  return bad != 0;
}

absl::Status NonFinite(size_t i, int axis) {
  return absl::InvalidArgumentError(absl::StrCat("positions: vertex ", i, " has a non-finite ", std::string(1, kAxis[axis]),
                                                 " coordinate; the quantized encodings carry finite positions only"));
}

}  // namespace


absl::Status EncodeQuantized16(std::span<const float> xyz, Quantization& q, std::string& out) {
  const size_t n = xyz.size() / 3;
  float lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  if (n > 0) {
    for (int a = 0; a < 3; ++a) lo[a] = hi[a] = xyz[a];
  }
  float finite = 0;  // stays 0 unless a coordinate is infinite or NaN (v - v is NaN then)
  for (size_t i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) {
      const float v = xyz[3 * i + a];
      finite += v - v;
      lo[a] = std::min(lo[a], v);
      hi[a] = std::max(hi[a], v);
    }
  }
  if (finite != 0) {
    for (size_t i = 0; i < 3 * n; ++i) {
      if (!std::isfinite(xyz[i])) return NonFinite(i / 3, static_cast<int>(i % 3));
    }
  }
  double inv[3];
  for (int a = 0; a < 3; ++a) {
    q.offset[a] = lo[a];
    // In double: two finite floats of opposite signs near float32's range are more than it apart
    // (until 2026-12-01 the extent overflowed in float, and an OK frame carried an infinite scale).
    q.scale[a] = (double(hi[a]) - double(lo[a])) / 65535.0;
    inv[a] = q.scale[a] > 0 ? 1 / q.scale[a] : 0;
  }
  q.key_frame = true;
  q.since_key_frame = 0;
  out.resize(3 * n * sizeof(uint16_t));
  uint16_t* o = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) {
      const double t = Round((double(xyz[3 * i + a]) - lo[a]) * inv[a]);
      o[3 * i + a] = static_cast<uint16_t>(static_cast<int32_t>(std::clamp(t, 0.0, 65535.0)));
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeQuantized16(std::string_view bytes, const Quantization& q, std::span<float> xyz) {
  if (bytes.size() != xyz.size() * sizeof(uint16_t)) {
    return absl::DataLossError(absl::StrCat("positions: ", bytes.size(), " bytes; quantized16 needs 6 per vertex (",
                                            xyz.size() * sizeof(uint16_t), ")"));
  }
  const size_t n = xyz.size() / 3;
  const uint8_t* b = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) {
      const size_t k = 3 * i + a;
      const uint32_t v = b[2 * k] | uint32_t{b[2 * k + 1]} << 8;
      xyz[k] = static_cast<float>(q.offset[a] + q.scale[a] * v);
    }
  }
  return absl::OkStatus();
}

Quantization DeltaGrid(const float lo[3], const float hi[3], double max_error) {
  Quantization g;
  double d2 = 0, longest = 0;
  for (int a = 0; a < 3; ++a) {
    const double e = double(hi[a]) - double(lo[a]);
    g.offset[a] = 0.5 * (double(lo[a]) + double(hi[a]));
    d2 += e * e;
    longest = std::max(longest, std::abs(e));
  }
  double diag = std::sqrt(d2);
  if (!(diag > 0) || !std::isfinite(diag)) diag = longest > 0 && std::isfinite(longest) ? longest : 1;
  if (!std::isfinite(g.offset[0] + g.offset[1] + g.offset[2])) g.offset[0] = g.offset[1] = g.offset[2] = 0;
  // A decoded coordinate is rounded to float32, up to half an ulp: sqrt(3) 2^-24 of the box's
  // largest coordinate for a vertex in it. The grid leaves that room in the bound (until
  // 2026-12-07 it did not, and at max_error 1e-7 on a unit box a vertex came back 1.19 times the
  // bound away), down to a quarter of the bound where float32 cannot resolve more.
  double largest = 0;
  for (int a = 0; a < 3; ++a) largest = std::max({largest, std::abs(double(lo[a])), std::abs(double(hi[a]))});
  if (!std::isfinite(largest)) largest = 0;
  const double bound = max_error * diag, rounding = std::sqrt(3.0) * std::ldexp(largest, -24);
  const double step = 2 * std::max(bound - rounding, bound / 4) / std::sqrt(3.0);
  for (double& s : g.scale) s = step;
  return g;
}

DeltaEncoder::DeltaEncoder(const Quantization& grid, uint32_t key_frame_interval)
    : grid_(grid), interval_(std::max<uint32_t>(key_frame_interval, 1)) {}

absl::Status DeltaEncoder::Encode(std::span<const float> xyz, bool force_key, Quantization& q, std::string& out) {
  const size_t n = xyz.size() / 3;
  can_undo_ = false;  // q_, which Undo would bring back, is written over here
  q_.resize(3 * n);  // by axis: x of every vertex, then y, then z
  const double inv = 1 / grid_.scale[0];
  constexpr double kLimit = double(kDeltaGridLimit);
  const bool bad = Quantize(xyz.data(), n, grid_.offset, inv, q_.data());
  if (bad) {
    for (size_t i = 0; i < 3 * n; ++i) {
      const double v = xyz[i];
      const int a = static_cast<int>(i % 3);
      if (!std::isfinite(v)) return NonFinite(i / 3, a);
      if (!(std::abs((v - grid_.offset[a]) * inv) <= kLimit)) {
        return absl::OutOfRangeError(absl::StrCat(
            "positions: vertex ", i / 3, " (", std::string(1, kAxis[a]), " = ", v, ") is more than 2^28 grid steps "
            "from the rig's center; the delta encoding cannot carry it (raise the session's max_error or use float32)"));
      }
    }
  }
  const bool key = force_key || !started_ || q1_.size() != q_.size() || since_key_ + 1 >= interval_;
  const uint32_t since = key ? 0 : since_key_ + 1;
  out.clear();
  residuals_.resize(n);
  uint32_t* r = residuals_.data();
  // |q| <= 2^28, so every residual fits in 31 bits: int32 arithmetic does not overflow.
  for (int a = 0; a < 3; ++a) {
    const int32_t* c = q_.data() + a * n;
    if (since == 0) {
      if (n > 0) r[0] = ZigZag32(c[0]);
      for (size_t i = 1; i < n; ++i) r[i] = ZigZag32(c[i] - c[i - 1]);
    } else if (since == 1) {
      const int32_t* p1 = q1_.data() + a * n;
      for (size_t i = 0; i < n; ++i) r[i] = ZigZag32(c[i] - p1[i]);
    } else {
      const int32_t* p1 = q1_.data() + a * n;
      const int32_t* p2 = q2_.data() + a * n;
      for (size_t i = 0; i < n; ++i) r[i] = ZigZag32(c[i] - 2 * p1[i] + p2[i]);
    }
    Pack(r, n, out, widths_);
  }
  // The frame's coordinates become the last, the last the one before; the one before goes to q_
  // (scratch), from where Undo can bring it back.
  q2_.swap(q1_);
  q1_.swap(q_);
  undo_since_key_ = since_key_;
  undo_started_ = started_;
  can_undo_ = true;
  started_ = true;
  since_key_ = since;
  q = grid_;
  q.key_frame = key;
  q.since_key_frame = since;
  return absl::OkStatus();
}

void DeltaEncoder::Undo() {
  if (!can_undo_) return;
  q1_.swap(q_);   // q1_: the frame two before the undone one, q_: the undone frame (scratch)
  q2_.swap(q1_);  // q2_: that frame again, q1_: the last delivered
  since_key_ = undo_since_key_;
  started_ = undo_started_;
  can_undo_ = false;
}

absl::Status DeltaDecoder::Decode(std::string_view bytes, const Quantization& q, std::span<float> xyz) {
  const size_t n = xyz.size() / 3;
  const uint32_t since = q.key_frame ? 0 : q.since_key_frame;
  if (!q.key_frame) {
    if (since == 0 || !started_ || since != since_key_ + 1 || q1_.size() != 3 * n) {
      return absl::FailedPreconditionError(absl::StrCat(
          "positions: a delta frame ", since, " frames after its key frame, but this decoder ",
          started_ ? absl::StrCat("last decoded the frame ", since_key_, " after one") : std::string("has decoded none"),
          ": decode a stream's frames in order, from a key frame (DeformRequest.key_frame asks for one)"));
    }
    if (since >= 2 && q2_.size() != 3 * n) return absl::FailedPreconditionError("positions: the decoder lost a frame");
  }
  q_.resize(3 * n);  // by axis, as the encoder's
  residuals_.resize(n);
  const uint32_t* r = residuals_.data();
  size_t at = 0;
  // Damaged bytes may decode to anything: unsigned arithmetic wraps instead of overflowing.
  for (int a = 0; a < 3; ++a) {
    std::string wide;
    if (!Unpack(bytes, &at, n, residuals_.data(), &wide)) {
      if (!wide.empty()) {  // a damaged width byte, not a short frame (until 2026-12-07 both read "end before")
        return absl::DataLossError(absl::StrCat("positions: the delta frame's ", std::string(1, kAxis[a]),
                                                " coordinates' ", wide, ": the bytes are damaged"));
      }
      return absl::DataLossError(absl::StrCat("positions: the delta frame's bytes end before its ", n, " vertices' ",
                                              std::string(1, kAxis[a]), " coordinates (", bytes.size(), " bytes)"));
    }
    uint32_t* c = reinterpret_cast<uint32_t*>(q_.data() + a * n);
    if (since == 0) {
      uint32_t prev = 0;
      for (size_t i = 0; i < n; ++i) c[i] = prev += UnZigZag32(r[i]);
    } else if (since == 1) {
      const uint32_t* p1 = reinterpret_cast<const uint32_t*>(q1_.data() + a * n);
      for (size_t i = 0; i < n; ++i) c[i] = p1[i] + UnZigZag32(r[i]);
    } else {
      const uint32_t* p1 = reinterpret_cast<const uint32_t*>(q1_.data() + a * n);
      const uint32_t* p2 = reinterpret_cast<const uint32_t*>(q2_.data() + a * n);
      for (size_t i = 0; i < n; ++i) c[i] = 2 * p1[i] - p2[i] + UnZigZag32(r[i]);
    }
  }
  if (at != bytes.size()) {
    return absl::DataLossError(
        absl::StrCat("positions: ", bytes.size() - at, " bytes after the delta frame's ", n, " vertices"));
  }
  const int32_t* qx = q_.data();
  const int32_t* qy = qx + n;
  const int32_t* qz = qy + n;
  float* o = xyz.data();
  for (size_t i = 0; i < n; ++i) {
    o[3 * i] = static_cast<float>(q.offset[0] + q.scale[0] * qx[i]);
    o[3 * i + 1] = static_cast<float>(q.offset[1] + q.scale[1] * qy[i]);
    o[3 * i + 2] = static_cast<float>(q.offset[2] + q.scale[2] * qz[i]);
  }
  q2_.swap(q1_);
  q1_.swap(q_);
  started_ = true;
  since_key_ = since;
  return absl::OkStatus();
}

}  // namespace sinew::wire
