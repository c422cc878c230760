#include "clients/export/snapshot.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/util/atomic_file.h"

namespace sinew::client {
namespace {

constexpr uint8_t kBackground[3] = {246, 246, 244};
constexpr uint8_t kInk[3] = {40, 40, 46};
constexpr float kBase[3] = {0.78f, 0.74f, 0.68f};  // skin grey
constexpr float kHot[3] = {0.86f, 0.16f, 0.12f};
constexpr int kLabelHeight = 26;                   // pixels above each cell's picture
constexpr int kRowLabelWidth = 0;

// 5×7 glyphs, one byte a row, bit 4 the leftmost pixel.
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}}, {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}}, {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}}, {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}}, {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x15, 0x15}}, {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}}, {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0F, 0x11, 0x0F, 0x01, 0x01}}, {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}}, {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}}, {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}}, {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},                      {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}}, {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}}, {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}}, {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
};
constexpr uint8_t kBox[7] = {0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F};

const uint8_t* GlyphOf(char c) {
  if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  for (const Glyph& g : kFont) {
    if (g.c == c) return g.rows;
  }
  return kBox;
}

// Text at (x, y) (top left), each font pixel `scale` image pixels.
void DrawText(Image& img, int x, int y, const std::string& text, int scale) {
  for (char c : text) {
    const uint8_t* rows = GlyphOf(c);
    for (int r = 0; r < 7; ++r) {
      for (int b = 0; b < 5; ++b) {
        if (!(rows[r] & (0x10 >> b))) continue;
        for (int dy = 0; dy < scale; ++dy) {
          for (int dx = 0; dx < scale; ++dx) {
            const int px = x + b * scale + dx, py = y + r * scale + dy;
            if (px >= 0 && py >= 0 && px < img.width && py < img.height) {
              std::memcpy(&img.rgb[3 * (size_t(py) * img.width + px)], kInk, 3);
            }
          }
        }
      }
    }
    x += 6 * scale;
  }
}

struct V3 {
  double x, y, z;
};
V3 Sub(V3 a, V3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
V3 Cross(V3 a, V3 b) { return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x}; }
double Dot(V3 a, V3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
V3 At(std::span<const float> xyz, uint32_t v) { return {xyz[3 * v], xyz[3 * v + 1], xyz[3 * v + 2]}; }

uint32_t Crc(const std::string& type, const std::string& data) {
  uLong crc = crc32(0, reinterpret_cast<const Bytef*>(type.data()), type.size());
  return uint32_t(crc32(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

void PutBE(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += char((v >> s) & 0xFF);
}

void Chunk(std::string& png, const std::string& type, const std::string& data) {
  PutBE(png, uint32_t(data.size()));
  png += type;
  png += data;
  PutBE(png, Crc(type, data));
}

}  // namespace

absl::Status CheckSnapshotSize(uint64_t rows, uint64_t columns, const SnapshotOptions& o) {
  // Bounded: the image, its filtered copy and its compressed bytes are each about 3 bytes a
  // pixel, and PNG's one IDAT chunk holds under 2^31 bytes.
  const uint64_t pixels = rows * uint64_t(o.cell_height) * columns * uint64_t(o.cell_width);
  if (pixels <= kMaxSnapshotPixels) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("snapshot: ", rows, " rows x ", columns, " columns of ", o.cell_width,
                                                 "x", o.cell_height, " pixels are ", pixels / 1'000'000,
                                                 " megapixels; at most ", kMaxSnapshotPixels / 1'000'000,
                                                 " (fewer frames or methods, or smaller cells)"));
}

absl::StatusOr<Image> RenderSnapshot(const SnapshotGrid& g, const SnapshotOptions& o) {
  if (g.rest.empty() || g.rest.size() % 3) return absl::InvalidArgumentError("snapshot: rest positions: not x,y,z per vertex");
  const size_t n = g.rest.size() / 3;
  if (g.triangles.size() % 3) return absl::InvalidArgumentError("snapshot: triangles: not 3 indices each");
  for (size_t i = 0; i < g.triangles.size(); ++i) {
    if (g.triangles[i] >= n) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot: triangle ", i / 3, " index ", g.triangles[i], " >= ", n));
    }
  }
  if (o.cell_width < 16 || o.cell_height < 16 + kLabelHeight || o.cell_width > 8192 || o.cell_height > 8192) {
    return absl::InvalidArgumentError("snapshot: cells from 16×42 to 8192×8192 pixels");
  }
  const int rows = int(g.cells.size());
  int cols = 0;
  for (int r = 0; r < rows; ++r) {
    cols = std::max(cols, int(g.cells[r].size()));
    for (size_t c = 0; c < g.cells[r].size(); ++c) {
      if (!g.cells[r][c].empty() && g.cells[r][c].size() != g.rest.size()) {
        return absl::InvalidArgumentError(absl::StrCat("snapshot: row ", r, " column ", c, ": ", g.cells[r][c].size(),
                                                       " floats, the rest mesh has ", g.rest.size()));
      }
    }
  }
  if (rows == 0 || cols == 0) return absl::InvalidArgumentError("snapshot: no cells");
  if (auto st = CheckSnapshotSize(uint64_t(rows), uint64_t(cols), o); !st.ok()) return st;

  // Camera axes: from the options, or the rest mesh's thinnest (view) and longest (up) axes.
  double lo[3], hi[3];
  for (int a = 0; a < 3; ++a) lo[a] = INFINITY, hi[a] = -INFINITY;
  for (size_t i = 0; i < g.rest.size(); ++i) lo[i % 3] = std::min<double>(lo[i % 3], g.rest[i]), hi[i % 3] = std::max<double>(hi[i % 3], g.rest[i]);
  int order[3] = {0, 1, 2};
  std::sort(order, order + 3, [&](int a, int b) { return hi[a] - lo[a] < hi[b] - lo[b]; });
  int view = o.view_axis >= 0 ? o.view_axis : order[0], up = o.up_axis >= 0 ? o.up_axis : order[2];
  if (view == up || view > 2 || up > 2) return absl::InvalidArgumentError("snapshot: the view and up axes must differ");
  V3 vdir{0, 0, 0}, udir{0, 0, 0};
  (&vdir.x)[view] = o.view_negative ? -1 : 1;
  (&udir.x)[up] = o.up_negative ? -1 : 1;
  const V3 rdir = Cross(udir, vdir);  // right × up = toward the viewer

  // One fit for every cell: the bounding box of all drawn positions on the screen axes.
  double r0 = INFINITY, r1 = -INFINITY, u0 = INFINITY, u1 = -INFINITY;
  double box_lo[3] = {INFINITY, INFINITY, INFINITY}, box_hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (const auto& row : g.cells) {
    for (const auto& cell : row) {
      for (size_t v = 0; v < cell.size() / 3; ++v) {
        const V3 p = At(cell, uint32_t(v));
        r0 = std::min(r0, Dot(p, rdir)), r1 = std::max(r1, Dot(p, rdir));
        u0 = std::min(u0, Dot(p, udir)), u1 = std::max(u1, Dot(p, udir));
        for (int a = 0; a < 3; ++a) box_lo[a] = std::min(box_lo[a], (&p.x)[a]), box_hi[a] = std::max(box_hi[a], (&p.x)[a]);
      }
    }
  }
  if (!(r1 >= r0)) return absl::InvalidArgumentError("snapshot: every cell is empty");
  const double diag = std::sqrt(std::pow(box_hi[0] - box_lo[0], 2) + std::pow(box_hi[1] - box_lo[1], 2) + std::pow(box_hi[2] - box_lo[2], 2));
  constexpr int kSS = 2;  // supersampling per axis
  const int cw = o.cell_width * kSS, ch = (o.cell_height - kLabelHeight) * kSS;
  const double scale = 0.92 * std::min(cw / std::max(r1 - r0, 1e-12), ch / std::max(u1 - u0, 1e-12));
  const double rc = (r0 + r1) / 2, uc = (u0 + u1) / 2;
  // Light: from the viewer, a little from above and the left; two-sided (imported meshes do not
  // all wind their triangles alike).
  V3 light{-0.35 * rdir.x + 0.5 * udir.x + vdir.x, -0.35 * rdir.y + 0.5 * udir.y + vdir.y, -0.35 * rdir.z + 0.5 * udir.z + vdir.z};
  const double ll = std::sqrt(Dot(light, light));
  light = {light.x / ll, light.y / ll, light.z / ll};

  Image img;
  img.width = kRowLabelWidth + cols * o.cell_width;
  img.height = rows * o.cell_height;
  img.rgb.resize(size_t(img.width) * img.height * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = kBackground[i % 3];
  std::vector<float> depth(size_t(cw) * ch), color(size_t(cw) * ch * 3), tint(n);
  std::vector<double> sx(n), sy(n), sz(n);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < int(g.cells[r].size()); ++c) {
      const std::span<const float> cell = g.cells[r][c];
      if (cell.empty()) continue;
      std::fill(depth.begin(), depth.end(), -std::numeric_limits<float>::infinity());
      for (size_t i = 0; i < color.size(); ++i) color[i] = kBackground[i % 3] / 255.f;
      std::fill(tint.begin(), tint.end(), 0.f);
      if (o.diff_scale > 0 && r > 0 && c < int(g.cells[0].size()) && !g.cells[0][c].empty()) {
        const std::span<const float> ref = g.cells[0][c];
        for (size_t v = 0; v < n; ++v) {
          const V3 d = Sub(At(cell, uint32_t(v)), At(ref, uint32_t(v)));
          tint[v] = float(std::min(1.0, std::sqrt(Dot(d, d)) / (o.diff_scale * diag)));
        }
      }
      for (size_t v = 0; v < n; ++v) {
        const V3 p = At(cell, uint32_t(v));
        sx[v] = cw / 2.0 + scale * (Dot(p, rdir) - rc);
        sy[v] = ch / 2.0 - scale * (Dot(p, udir) - uc);
        sz[v] = Dot(p, vdir);  // larger: nearer the camera
      }
      for (size_t t = 0; t < g.triangles.size(); t += 3) {
        const uint32_t a = g.triangles[t], b = g.triangles[t + 1], d = g.triangles[t + 2];
        const V3 nrm = Cross(Sub(At(cell, b), At(cell, a)), Sub(At(cell, d), At(cell, a)));
        const double len = std::sqrt(Dot(nrm, nrm));
        if (!(len > 0)) continue;
        const double lambert = std::abs(Dot(nrm, light)) / len;
        const float shade = float(0.28 + 0.72 * lambert);
        const float k = (tint[a] + tint[b] + tint[d]) / 3;
        float rgb[3];
        for (int i = 0; i < 3; ++i) rgb[i] = shade * (kBase[i] * (1 - k) + kHot[i] * k);
        const double area = (sx[b] - sx[a]) * (sy[d] - sy[a]) - (sx[d] - sx[a]) * (sy[b] - sy[a]);
        // A non-finite corner (a frame the server answered with NaN) makes the area NaN or
        // infinite: skipped, as the int conversions below would be undefined (until 2026-12-07).
        if (!(std::abs(area) >= 1e-12) || !std::isfinite(area)) continue;
        const double left = std::min({sx[a], sx[b], sx[d]}), right = std::max({sx[a], sx[b], sx[d]}),
                     top = std::min({sy[a], sy[b], sy[d]}), bottom = std::max({sy[a], sy[b], sy[d]});
        if (right < 0 || bottom < 0 || left > cw || top > ch) continue;  // off the picture
        const int x0 = int(std::max(0.0, std::floor(left))), x1 = int(std::min(cw - 1.0, std::ceil(right))),
                  y0 = int(std::max(0.0, std::floor(top))), y1 = int(std::min(ch - 1.0, std::ceil(bottom)));
        for (int y = y0; y <= y1; ++y) {
          for (int x = x0; x <= x1; ++x) {
            const double px = x + 0.5, py = y + 0.5;
            // Barycentric weights by edge functions, either winding.
            const double w0 = ((sx[b] - px) * (sy[d] - py) - (sx[d] - px) * (sy[b] - py)) / area;
            const double w1 = ((sx[d] - px) * (sy[a] - py) - (sx[a] - px) * (sy[d] - py)) / area;
            const double w2 = 1 - w0 - w1;
            if (w0 < 0 || w1 < 0 || w2 < 0) continue;
            const float z = float(w0 * sz[a] + w1 * sz[b] + w2 * sz[d]);
            float& zb = depth[size_t(y) * cw + x];
            if (z <= zb) continue;
            zb = z;
            std::memcpy(&color[3 * (size_t(y) * cw + x)], rgb, sizeof(rgb));
          }
        }
      }
      // Down-sample into the cell, below its label.
      const int ox = kRowLabelWidth + c * o.cell_width, oy = r * o.cell_height + kLabelHeight;
      for (int y = 0; y < ch / kSS; ++y) {
        for (int x = 0; x < cw / kSS; ++x) {
          for (int i = 0; i < 3; ++i) {
            float s = 0;
            for (int dy = 0; dy < kSS; ++dy) {
              for (int dx = 0; dx < kSS; ++dx) s += color[3 * (size_t(y * kSS + dy) * cw + x * kSS + dx) + i];
            }
            img.rgb[3 * (size_t(oy + y) * img.width + ox + x) + i] = uint8_t(std::clamp(s / (kSS * kSS) * 255.f + 0.5f, 0.f, 255.f));
          }
        }
      }
      std::string label = r < int(g.row_labels.size()) ? g.row_labels[r] : "";
      if (c < int(g.column_labels.size())) label += (label.empty() ? "" : ", ") + g.column_labels[c];
      DrawText(img, ox + 8, r * o.cell_height + 6, label, 2);
    }
  }
  return img;
}

std::string EncodePng(const Image& img) {
  std::string raw;
  raw.reserve(size_t(img.height) * (1 + 3 * size_t(img.width)));
  for (int y = 0; y < img.height; ++y) {
    raw += '\0';  // filter: none
    raw.append(reinterpret_cast<const char*>(img.At(0, y)), 3 * size_t(img.width));
  }
  uLongf size = compressBound(raw.size());
  std::string z(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &size, reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 9) !=
      Z_OK) {
    return {};  // out of memory (zlib's only failure with a compressBound buffer)
  }
  z.resize(size);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  PutBE(ihdr, uint32_t(img.width));
  PutBE(ihdr, uint32_t(img.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, adaptive filters, no interlace
  Chunk(png, "IHDR", ihdr);
  Chunk(png, "IDAT", z);
  Chunk(png, "IEND", "");
  return png;
}

absl::Status WritePng(const std::string& path, const Image& image) {
  const std::string png = EncodePng(image);
  if (png.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": zlib could not compress the ", image.width, "x",
                                                     image.height, " image (out of memory); nothing written"));
  }
  return WriteFileAtomically(path, png);
}

}  // namespace sinew::client
