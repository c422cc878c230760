// The two position encodings of the wire that are more than a cast (sinew.v1.OutputEncoding
// QUANTIZED16 and DELTA), shared by the server, which encodes, and the client library, which
// decodes. No protobuf here: the caller copies Quantization to and from the response's message.
// The byte layout is in docs/wire-encodings.md.
//
// QUANTIZED16 is stateless: uint16 x,y,z per vertex in the frame's own bounding box, each
// coordinate within half a step ((max - min) / 65535 / 2) of the float32 value, plus half a float32
// ulp (the decoded value's own rounding: it matters only where a step is near an ulp).
//
// DELTA puts every vertex on a grid fixed for the session (DeltaGrid: step 2 (e d - r) / sqrt(3) for
// a bound e as a fraction of the rig's bounding-box diagonal d, r the float32 rounding of a decoded
// vertex), so a decoded vertex is within e d of the float32 result, in every frame, without
// drift: the integers are sent losslessly. A key frame
// carries each axis' grid coordinates as differences along the vertex order; the frames after it
// the residuals of a prediction from the stream's previous frames (the last frame after a key
// frame, then constant velocity: 2 q[t-1] - q[t-2]). Residuals are zigzagged and bit-packed in
// blocks of 16 with one width byte per block. The encoder and the decoder each keep the last two
// frames' coordinates (24 bytes per vertex).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace sinew::wire {

// How a frame's integers map back to positions: x = offset[0] + scale[0] * q_x, likewise y, z.
struct Quantization {
  double offset[3] = {0, 0, 0};
  double scale[3] = {0, 0, 0};
  bool key_frame = true;          // DELTA: decodes alone
  uint32_t since_key_frame = 0;   // DELTA: frames of the stream since its last key frame
};

// QUANTIZED16. Fails with InvalidArgument naming the first non-finite coordinate (vertex and
// axis); `out` and `q` are then unspecified.
absl::Status EncodeQuantized16(std::span<const float> xyz, Quantization& q, std::string& out);
// DataLoss when `bytes` does not hold xyz.size() / 3 vertices.
absl::Status DecodeQuantized16(std::string_view bytes, const Quantization& q, std::span<float> xyz);

// DELTA's grid for a rig whose rest bounding box is [lo, hi]: origin its center, step
// 2 (max_error d - r) / sqrt(3), d = |hi - lo| (a flat box uses its longest side; an empty one
// the unit) and r = sqrt(3) 2^-24 of the box's largest |coordinate| (float32's rounding of a
// decoded vertex in the box), at least 2 (max_error d / 4) / sqrt(3). A vertex in the box decodes
// within max_error d wherever r <= 3/4 max_error d; beyond the box, or where float32 cannot
// resolve the bound, within max_error d plus its own rounding.
Quantization DeltaGrid(const float lo[3], const float hi[3], double max_error);
// The largest |q| on an axis: vertices farther from the origin than this many steps fail.
inline constexpr int64_t kDeltaGridLimit = int64_t{1} << 28;

class DeltaEncoder {
 public:
  // `grid` from DeltaGrid; a key frame every `key_frame_interval` (>= 1) frames of the stream.
  DeltaEncoder(const Quantization& grid, uint32_t key_frame_interval);

  // Encodes the stream's next frame into `out` and sets q (the grid and the frame's key_frame /
  // since_key_frame); a key frame when one is due or `force_key`. A non-finite coordinate, or a
  // vertex off the grid, fails with InvalidArgument / OutOfRange naming the vertex, and the
  // stream's state stays as it was (the next frame is encoded as if this one had not been).
  absl::Status Encode(std::span<const float> xyz, bool force_key, Quantization& q, std::string& out);
  // Takes back the last successful Encode, whose frame was not delivered (it did not fit where
  // it was to go): the next frame is encoded as if it had not been. Once per Encode; no copy.
  void Undo();

 private:
  Quantization grid_;
  uint32_t interval_;
  uint32_t since_key_ = 0;
  bool started_ = false;
  uint32_t undo_since_key_ = 0;  // since_key_ and started_ before the last Encode (Undo)
  bool undo_started_ = false, can_undo_ = false;
  std::vector<int32_t> q_, q1_, q2_;  // this frame's, the last and the one before, x,y,z
  std::vector<uint32_t> residuals_;   // one axis
  std::vector<uint8_t> widths_;       // one axis' blocks
};

class DeltaDecoder {
 public:
  // Decodes the stream's frames in order. A frame that is not a key frame needs the one before it
  // (since_key_frame one more than the last decoded one's): otherwise FailedPrecondition. Bytes
  // that do not decode to xyz.size() / 3 vertices give DataLoss. Either leaves the state as it was.
  absl::Status Decode(std::string_view bytes, const Quantization& q, std::span<float> xyz);
  void Reset() { started_ = false; }

 private:
  bool started_ = false;
  uint32_t since_key_ = 0;
  std::vector<int32_t> q_, q1_, q2_;
  std::vector<uint32_t> residuals_;
};

}  // namespace sinew::wire
