// The wire's quantized position encodings (sinew/v1/position_codec.h): their error bounds, the
// delta stream's losslessness on its grid, and their failures on bad input or bad bytes.
#include "sinew/v1/position_codec.h"
#include "clients/lib/client.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace sinew::wire {
namespace {

// A point cloud moving smoothly (a rotation and a drift) with per-point jitter, frame t.
std::vector<float> Cloud(size_t n, int t, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> p(3 * n);
  const double a = 0.05 * t, c = std::cos(a), s = std::sin(a);
  std::mt19937 jitter(seed * 1000 + t);
  std::normal_distribution<float> g(0, 2e-3f);
  for (size_t i = 0; i < n; ++i) {
    const double x = u(rng), y = u(rng), z = 0.3 * u(rng);
    p[3 * i] = static_cast<float>(c * x - s * y + 0.01 * t) + g(jitter);
    p[3 * i + 1] = static_cast<float>(s * x + c * y) + g(jitter);
    p[3 * i + 2] = static_cast<float>(z + 0.2 * std::sin(0.1 * t + x)) + g(jitter);
  }
  return p;
}

double MaxDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i + 2 < a.size(); i += 3) {
    const double dx = a[i] - b[i], dy = a[i + 1] - b[i + 1], dz = a[i + 2] - b[i + 2];
    worst = std::max(worst, std::sqrt(dx * dx + dy * dy + dz * dz));
  }
  return worst;
}

TEST(PositionCodec, Quantized16IsWithinHalfAStepOfEveryCoordinate) {
  std::vector<float> p = Cloud(1001, 3);
  for (size_t i = 0; i < 1001; ++i) p[3 * i + 2] = 5.0f;  // a flat axis: extent 0
  p[0] = 1e4f;                                            // one far vertex stretches the box
  Quantization q;
  std::string bytes;
  ASSERT_TRUE(EncodeQuantized16(p, q, bytes).ok());
  EXPECT_EQ(bytes.size(), 1001u * 6);
  std::vector<float> back(p.size());
  ASSERT_TRUE(DecodeQuantized16(bytes, q, back).ok());
  for (size_t i = 0; i < p.size(); ++i) {
    const int a = static_cast<int>(i % 3);
    const double slack = 0.5 * q.scale[a] + std::abs(p[i]) * 6e-8;  // half a step, float rounding
    ASSERT_LE(std::abs(double(back[i]) - p[i]), slack) << "coordinate " << i;
  }
  EXPECT_EQ(q.scale[2], 0.0);
  EXPECT_EQ(back[2], 5.0f);
}

// Finite positions near float32's range on both sides (a box wider than float32 holds): a finite
// scale, and every coordinate back within half a step (until 2026-12-01 the extent overflowed in
// float: scale inf, status OK, NaN decoded).
TEST(PositionCodec, Quantized16OfABoxWiderThanFloat32HoldsIsFinite) {
  std::vector<float> p = {-2e38f, 0, 1, 2e38f, 0, -1, 1e38f, 5, 0};
  Quantization q;
  std::string bytes;
  ASSERT_TRUE(EncodeQuantized16(p, q, bytes).ok());
  EXPECT_TRUE(std::isfinite(q.scale[0])) << q.scale[0];
  std::vector<float> back(p.size());
  ASSERT_TRUE(DecodeQuantized16(bytes, q, back).ok());
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_TRUE(std::isfinite(back[i])) << i;
    ASSERT_LE(std::abs(double(back[i]) - p[i]), 0.5 * q.scale[i % 3] + std::abs(p[i]) * 6e-8) << i;
  }
}

TEST(PositionCodec, QuantizedEncodingsNameTheFirstNonFiniteVertex) {
  std::vector<float> p = Cloud(20, 0);
  p[3 * 7 + 1] = std::numeric_limits<float>::quiet_NaN();
  p[3 * 9] = std::numeric_limits<float>::infinity();
  Quantization q;
  std::string bytes;
  absl::Status st = EncodeQuantized16(p, q, bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vertex 7 has a non-finite y"), std::string::npos) << st;
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  DeltaEncoder enc(DeltaGrid(lo, hi, 1e-4), 30);
  st = enc.Encode(p, false, q, bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vertex 7 has a non-finite y"), std::string::npos) << st;
}

TEST(PositionCodec, DeltaStaysWithinItsBoundInEveryFrameAndEqualsAKeyFrameBitForBit) {
  const size_t n = 2000;
  const float lo[3] = {-1, -1, -0.3f}, hi[3] = {1, 1, 0.3f};
  const double diag = std::sqrt(4.0 + 4.0 + 0.36);
  const double max_error = 1e-4;
  const Quantization grid = DeltaGrid(lo, hi, max_error);
  DeltaEncoder enc(grid, 30);
  DeltaDecoder dec;
  std::vector<float> got(3 * n), key(3 * n);
  std::string bytes, key_bytes;
  size_t delta_bytes = 0, deltas = 0;
  for (int t = 0; t < 400; ++t) {
    const std::vector<float> p = Cloud(n, t);
    Quantization q;
    ASSERT_TRUE(enc.Encode(p, false, q, bytes).ok());
    ASSERT_TRUE(dec.Decode(bytes, q, got).ok()) << "frame " << t;
    ASSERT_LE(MaxDistance(got, p), max_error * diag + 1e-6) << "frame " << t;
    // The same positions as a key frame alone decode to the same floats: nothing accumulates.
    DeltaEncoder alone(grid, 1);
    DeltaDecoder fresh;
    Quantization kq;
    ASSERT_TRUE(alone.Encode(p, false, kq, key_bytes).ok());
    ASSERT_TRUE(kq.key_frame);
    ASSERT_TRUE(fresh.Decode(key_bytes, kq, key).ok());
    ASSERT_EQ(got, key) << "frame " << t;
    if (!q.key_frame) {
      delta_bytes += bytes.size();
      ++deltas;
    }
  }
  // Smooth motion is predicted: the frames between key frames are far smaller than float32.
  EXPECT_LT(double(delta_bytes) / deltas, 0.25 * 12 * n);
}

// The bound holds with nothing added, down to the smallest max_error a session takes: the grid
// leaves room for float32's rounding of the decoded vertex (until 2026-12-07 a unit box at 1e-7
// came back 1.19 times the bound away). Random floats in boxes off and around the origin.
TEST(PositionCodec, DeltaStaysWithinMaxErrorTimesDiagonalAtTheSmallestMaxError) {
  struct Box { float lo, hi; double max_error; };
  for (const Box& box : {Box{0, 1, 1e-7}, Box{-1, 1, 1e-7}, Box{0, 8, 1e-6}, Box{100, 101, 1e-4}}) {
    const float lo[3] = {box.lo, box.lo, box.lo}, hi[3] = {box.hi, box.hi, box.hi};
    const double bound = box.max_error * std::sqrt(3.0) * (double(box.hi) - box.lo);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(box.lo, box.hi);
    std::vector<float> p(3 * 20000), got(p.size());
    for (float& x : p) x = u(rng);
    DeltaEncoder enc(DeltaGrid(lo, hi, box.max_error), 1);
    DeltaDecoder dec;
    Quantization q;
    std::string bytes;
    ASSERT_TRUE(enc.Encode(p, false, q, bytes).ok());
    ASSERT_TRUE(dec.Decode(bytes, q, got).ok());
    EXPECT_LE(MaxDistance(got, p), bound) << "box [" << box.lo << ", " << box.hi << "], max_error " << box.max_error;
  }
}

TEST(PositionCodec, DeltaKeyFramesComeAtTheIntervalOrWhenAsked) {
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  DeltaEncoder enc(DeltaGrid(lo, hi, 1e-4), 4);
  std::string bytes;
  std::vector<uint32_t> since;
  for (int t = 0; t < 11; ++t) {
    Quantization q;
    ASSERT_TRUE(enc.Encode(Cloud(50, t), t == 6, q, bytes).ok());
    EXPECT_EQ(q.key_frame, q.since_key_frame == 0);
    since.push_back(q.since_key_frame);
  }
  EXPECT_EQ(since, (std::vector<uint32_t>{0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0}));
}

TEST(PositionCodec, DeltaDecoderRefusesAMissingFrameUntilTheNextKeyFrame) {
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  DeltaEncoder enc(DeltaGrid(lo, hi, 1e-4), 100);
  DeltaDecoder dec;
  std::vector<float> got(3 * 64);
  std::string bytes;
  Quantization q;
  ASSERT_TRUE(enc.Encode(Cloud(64, 0), false, q, bytes).ok());
  ASSERT_TRUE(dec.Decode(bytes, q, got).ok());
  ASSERT_TRUE(enc.Encode(Cloud(64, 1), false, q, bytes).ok());  // lost on the way
  ASSERT_TRUE(enc.Encode(Cloud(64, 2), false, q, bytes).ok());
  const std::vector<float> before = got;
  absl::Status st = dec.Decode(bytes, q, got);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("key frame"), std::string::npos) << st;
  EXPECT_EQ(got, before);
  const std::vector<float> p = Cloud(64, 3);
  ASSERT_TRUE(enc.Encode(p, /*force_key=*/true, q, bytes).ok());
  ASSERT_TRUE(dec.Decode(bytes, q, got).ok());
  EXPECT_LE(MaxDistance(got, p), 1e-4 * std::sqrt(12.0) + 1e-6);
}

TEST(PositionCodec, DamagedDeltaBytesFailWithDataLossAndLeaveTheDecoderAsItWas) {
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  DeltaEncoder enc(DeltaGrid(lo, hi, 1e-4), 100);
  DeltaDecoder dec;
  std::vector<float> got(3 * 100);
  std::string key, next;
  Quantization kq, nq;
  ASSERT_TRUE(enc.Encode(Cloud(100, 0), false, kq, key).ok());
  ASSERT_TRUE(enc.Encode(Cloud(100, 1), false, nq, next).ok());
  ASSERT_TRUE(dec.Decode(key, kq, got).ok());
  EXPECT_EQ(dec.Decode(next.substr(0, next.size() - 1), nq, got).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(dec.Decode(next + '\0', nq, got).code(), absl::StatusCode::kDataLoss);
  std::string wide = next;
  wide[0] = 33;  // no block is wider than 32 bits: named as damage, not as a short frame
  const absl::Status damaged = dec.Decode(wide, nq, got);
  EXPECT_EQ(damaged.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(damaged.message(), "positions: the delta frame's x coordinates' block 0 (byte 0) says 33 bits a value; "
                               "at most 32: the bytes are damaged");
  std::vector<float> wrong_size(3 * 99);
  EXPECT_FALSE(dec.Decode(next, nq, wrong_size).ok());
  // Random damage decodes or fails, never reads past the bytes (run under a sanitizer to see).
  std::mt19937 rng(3);
  for (int k = 0; k < 200; ++k) {
    std::string bad = next;
    bad[rng() % bad.size()] = static_cast<char>(rng());
    DeltaDecoder copy = dec;
    (void)copy.Decode(bad.substr(0, rng() % (bad.size() + 1)), nq, got);
  }
  // The failures left the decoder after the key frame: the real next frame still decodes.
  ASSERT_TRUE(dec.Decode(next, nq, got).ok());
  EXPECT_LE(MaxDistance(got, Cloud(100, 1)), 1e-4 * std::sqrt(12.0) + 1e-6);
}

TEST(PositionCodec, DeltaEncoderFailureLeavesTheStreamAsItWas) {
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  DeltaEncoder enc(DeltaGrid(lo, hi, 1e-4), 100);
  DeltaDecoder dec;
  std::vector<float> got(3 * 30);
  std::string bytes;
  Quantization q;
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(enc.Encode(Cloud(30, t), false, q, bytes).ok());
    ASSERT_TRUE(dec.Decode(bytes, q, got).ok());
  }
  std::vector<float> far = Cloud(30, 3);
  far[3 * 12 + 2] = 1e9f;  // off the grid: 2^28 steps of 1.6e-4 is 4.3e4
  absl::Status st = enc.Encode(far, false, q, bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("vertex 12 (z = "), std::string::npos) << st;
  const std::vector<float> p = Cloud(30, 4);
  ASSERT_TRUE(enc.Encode(p, false, q, bytes).ok());
  EXPECT_EQ(q.since_key_frame, 3u);
  ASSERT_TRUE(dec.Decode(bytes, q, got).ok());
  EXPECT_LE(MaxDistance(got, p), 1e-4 * std::sqrt(12.0) + 1e-6);
}

// Undo takes back the last frame encoded (the server's, for a frame that did not fit its shared
// memory): the stream goes on byte for byte as one that never encoded it, at every point of the
// delta chain (a key frame, the first delta, a predicted one), and a second Undo does nothing.
TEST(PositionCodec, DeltaEncoderUndoTakesBackTheLastFrame) {
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  const Quantization grid = DeltaGrid(lo, hi, 1e-4);
  for (int undone = 0; undone < 4; ++undone) {
    SCOPED_TRACE(undone);
    DeltaEncoder with_undo(grid, 100), without(grid, 100);
    Quantization q, r;
    std::string a, b;
    for (int t = 0; t < 6; ++t) {
      if (t == undone) {
        ASSERT_TRUE(with_undo.Encode(Cloud(30, 100 + t), false, q, a).ok());  // never delivered
        with_undo.Undo();
        with_undo.Undo();  // nothing more to take back
      }
      ASSERT_TRUE(with_undo.Encode(Cloud(30, t), false, q, a).ok());
      ASSERT_TRUE(without.Encode(Cloud(30, t), false, r, b).ok());
      EXPECT_EQ(a, b) << "frame " << t;
      EXPECT_EQ(q.since_key_frame, r.since_key_frame) << "frame " << t;
      EXPECT_EQ(q.key_frame, r.key_frame) << "frame " << t;
    }
  }
}

TEST(PositionCodec, AStillFrameCostsOneByteABlock) {
  const float lo[3] = {-1, -1, -1}, hi[3] = {1, 1, 1};
  DeltaEncoder enc(DeltaGrid(lo, hi, 1e-4), 100);
  const std::vector<float> p = Cloud(1000, 0);
  std::string bytes;
  Quantization q;
  for (int t = 0; t < 3; ++t) ASSERT_TRUE(enc.Encode(p, false, q, bytes).ok());
  EXPECT_EQ(bytes.size(), 3u * ((1000 + 15) / 16));
}

}  // namespace
}  // namespace sinew::wire

namespace sinew::client {
namespace {

// A delta frame whose vertex count its bytes cannot hold is refused before the positions are sized
// by it (until 2026-12-07 ten bytes announcing 2^28 vertices made the client allocate 3 GiB).
TEST(PositionDecoder, ADeltaFrameItsBytesCannotHoldIsRefusedBeforeItIsAllocated) {
  v1::DeformResponse r;
  r.set_vertex_count(1u << 28);
  r.set_encoding(v1::OUTPUT_ENCODING_DELTA);
  r.mutable_quantization()->set_key_frame(true);
  r.set_positions(std::string(10, '\0'));
  PositionDecoder decoder;
  std::vector<float> out;
  const absl::Status st = decoder.Decode(r, out);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(std::string(st.message()).find("10 bytes cannot hold a delta frame of 268435456 vertices"), std::string::npos)
      << st;
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace sinew::client
