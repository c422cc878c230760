// Pictures of deformed meshes without a GPU or a window: a small software rasterizer (z-buffer,
// flat Lambert shading of each triangle from its deformed positions, 2×2 supersampling, an
// orthographic camera fitted to the bounding box of everything drawn, the same for every cell so
// that cells compare at one scale) drawing a grid of cells (e.g. a row per method, a column per
// frame) with labels in a built-in 5×7 pixel font, written as an 8-bit RGB PNG (zlib).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew::client {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes a pixel
  const uint8_t* At(int x, int y) const { return &rgb[3 * (size_t(y) * width + x)]; }
};

struct SnapshotOptions {
  int cell_width = 320, cell_height = 400;  // pixels per cell, labels included
  // Camera: it looks along -view_axis (sits on its + side) with up_axis up; axes are 0, 1, 2
  // (x, y, z) and a sign. -1: from the rest mesh, its thinnest axis as view and longest as up.
  int view_axis = -1, up_axis = -1;
  bool view_negative = false, up_negative = false;
  // Cells of rows after the first are tinted red where their vertices are far from the first
  // row's in the same column (full red at this fraction of the bounding box's diagonal); 0: off.
  double diff_scale = 0;
};

// A grid: rows × columns of meshes sharing `triangles` (3 indices each); cells[r][c] holds x,y,z
// per vertex (`rest`'s size), or is empty for a blank cell. `row_labels` and `column_labels`
// (lowercase letters, digits and - + . : , / _ ( ) = %; others draw as a box) label the cells.
struct SnapshotGrid {
  std::span<const float> rest;
  std::span<const uint32_t> triangles;
  std::vector<std::vector<std::span<const float>>> cells;
  std::vector<std::string> row_labels, column_labels;
};

// The largest image RenderSnapshot draws (rows × cell height × columns × cell width).
inline constexpr uint64_t kMaxSnapshotPixels = uint64_t{1} << 27;

// INVALID_ARGUMENT when `rows` × `columns` cells of `options`' size pass kMaxSnapshotPixels
// (what RenderSnapshot checks; callers ask before producing the cells).
absl::Status CheckSnapshotSize(uint64_t rows, uint64_t columns, const SnapshotOptions& options);

// INVALID_ARGUMENT names a bad size or index (row, column, triangle), or an image of more than
// kMaxSnapshotPixels.
absl::StatusOr<Image> RenderSnapshot(const SnapshotGrid& grid, const SnapshotOptions& options = {});

// 8-bit RGB PNG, compressed with zlib; written atomically (path.tmp, then rename).
absl::Status WritePng(const std::string& path, const Image& image);

// The PNG bytes WritePng writes; empty when zlib fails (out of memory; WritePng then writes
// nothing and says so).
std::string EncodePng(const Image& image);

}  // namespace sinew::client
