// The snapshot rasterizer and PNG writer (clients/export/snapshot.h) on meshes made here: where
// the mesh lands, the z-buffer whatever the triangle order, the difference tint, PNG chunks and
// pixels read back with zlib, and errors naming the bad cell or triangle.
#include "clients/export/snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <limits>

namespace sinew::client {
namespace {

using ::testing::HasSubstr;

// A square of half-size h at depth z in the x-y plane (two triangles), as 4 vertices.
void Square(std::vector<float>& xyz, std::vector<uint32_t>& tris, float h, float z) {
  const uint32_t b = uint32_t(xyz.size() / 3);
  const float corners[4][2] = {{-h, -h}, {h, -h}, {h, h}, {-h, h}};
  for (const auto& c : corners) xyz.insert(xyz.end(), {c[0], c[1], z});
  tris.insert(tris.end(), {b, b + 1, b + 2, b, b + 2, b + 3});
}

SnapshotOptions Front() {
  SnapshotOptions o;
  o.cell_width = 100;
  o.cell_height = 126;  // 100 pixels below the 26-pixel label
  o.view_axis = 2;      // camera on +z, y up
  o.up_axis = 1;
  return o;
}

bool Background(const uint8_t* p) { return p[0] == 246 && p[1] == 246 && p[2] == 244; }

TEST(Snapshot, MeshFillsTheMiddleOfItsCellAndLeavesTheCornersBlank) {
  std::vector<float> xyz;
  std::vector<uint32_t> tris;
  Square(xyz, tris, 1, 0);
  SnapshotGrid g;
  g.rest = xyz;
  g.triangles = tris;
  g.cells = {{xyz, xyz}};
  auto img = RenderSnapshot(g, Front());
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 200);
  EXPECT_EQ(img->height, 126);
  for (int c = 0; c < 2; ++c) {
    EXPECT_FALSE(Background(img->At(100 * c + 50, 26 + 50))) << c;
    EXPECT_TRUE(Background(img->At(100 * c + 1, 26 + 1))) << c;      // outside the 92 % fit
    EXPECT_TRUE(Background(img->At(100 * c + 98, 26 + 98))) << c;
    EXPECT_FALSE(Background(img->At(100 * c + 8, 26 + 50))) << c;    // inside it
  }
}

TEST(Snapshot, NearerTriangleWinsWhateverTheOrderAndDifferencesAreTinted) {
  // A big square at z = 0 and a small one in front of it at z = 1; in row 1 the small square has
  // moved (so it is tinted red) and the big one has not.
  for (bool near_first : {false, true}) {
    std::vector<float> rest, moved;
    std::vector<uint32_t> tris;
    if (near_first) Square(rest, tris, 0.3f, 1), Square(rest, tris, 1, 0);
    else Square(rest, tris, 1, 0), Square(rest, tris, 0.3f, 1);
    moved = rest;
    const size_t small = near_first ? 0 : 4;
    for (size_t v = small; v < small + 4; ++v) moved[3 * v + 2] += 0.5f;  // towards the camera
    SnapshotGrid g;
    g.rest = rest;
    g.triangles = tris;
    g.cells = {{rest}, {moved}};
    SnapshotOptions o = Front();
    o.diff_scale = 0.05;
    auto img = RenderSnapshot(g, o);
    ASSERT_TRUE(img.ok()) << img.status();
    const uint8_t* centre0 = img->At(50, 26 + 50);
    const uint8_t* centre1 = img->At(50, 126 + 26 + 50);
    const uint8_t* edge1 = img->At(12, 126 + 26 + 50);  // the big square only
    EXPECT_NEAR(centre0[0], centre0[1], 12) << "row 0 is not tinted";
    EXPECT_GT(centre1[0], centre1[1] + 60) << "the moved square is drawn, in front, tinted; near_first " << near_first;
    EXPECT_NEAR(edge1[0], edge1[1], 12) << "the unmoved square is not tinted";
  }
}

TEST(Snapshot, PngChunksAndPixelsReadBack) {
  Image img;
  img.width = 7;
  img.height = 5;
  for (int i = 0; i < 7 * 5 * 3; ++i) img.rgb.push_back(uint8_t(i * 37));
  const std::string png = EncodePng(img);
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t at = 8;
  std::string idat, types;
  auto be = [&](size_t p) {
    return uint32_t(uint8_t(png[p])) << 24 | uint32_t(uint8_t(png[p + 1])) << 16 | uint32_t(uint8_t(png[p + 2])) << 8 |
           uint8_t(png[p + 3]);
  };
  while (at < png.size()) {
    const uint32_t len = be(at);
    const std::string type = png.substr(at + 4, 4), data = png.substr(at + 8, len);
    uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + at + 4), 4 + len);
    EXPECT_EQ(be(at + 8 + len), uint32_t(crc)) << type;
    types += type + " ";
    if (type == "IHDR") {
      EXPECT_EQ(be(at + 8), 7u);
      EXPECT_EQ(be(at + 12), 5u);
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    }
    if (type == "IDAT") idat += data;
    at += 12 + len;
  }
  EXPECT_EQ(types, "IHDR IDAT IEND ");
  std::string raw(5 * (1 + 21), '\0');
  uLongf size = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  ASSERT_EQ(size, raw.size());
  for (int y = 0; y < 5; ++y) {
    EXPECT_EQ(raw[y * 22], 0);  // filter none
    EXPECT_EQ(std::memcmp(&raw[y * 22 + 1], img.At(0, y), 21), 0) << y;
  }
  EXPECT_EQ(WritePng("/nonexistent-dir/x.png", img).code(), absl::StatusCode::kNotFound);
}

// A frame with a non-finite vertex (a method that answered NaN) draws the triangles without it
// and skips those with it: until 2026-12-07 their screen bounds went through int(floor(NaN)),
// undefined behaviour (GCC's -fsanitize=undefined leaves float-cast-overflow out, so no run here
// flags it; on x86 the casts happened to give INT_MIN and nothing was drawn). This pins the result.
TEST(Snapshot, TrianglesWithANonFiniteCornerAreSkippedAndTheRestDrawn) {
  std::vector<float> xyz;
  std::vector<uint32_t> tris;
  Square(xyz, tris, 1, 0);  // triangles (0, 1, 2) and (0, 2, 3)
  std::vector<float> broken = xyz;
  broken[3 * 3] = std::numeric_limits<float>::quiet_NaN();
  SnapshotGrid g;
  g.rest = xyz;
  g.triangles = tris;
  g.cells = {{broken}};
  auto img = RenderSnapshot(g, Front());
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_FALSE(Background(img->At(65, 26 + 65))) << "(0, 1, 2), finite, is drawn";
  EXPECT_TRUE(Background(img->At(35, 26 + 35))) << "(0, 2, 3), with the NaN corner, is not";
}

TEST(Snapshot, BadInputNamesTheCellOrTriangle) {
  std::vector<float> xyz;
  std::vector<uint32_t> tris;
  Square(xyz, tris, 1, 0);
  std::vector<float> short_cell(9, 0.f);
  SnapshotGrid g;
  g.rest = xyz;
  g.triangles = tris;
  g.cells = {{xyz}, {xyz, short_cell}};
  EXPECT_THAT(RenderSnapshot(g, Front()).status().message(), HasSubstr("row 1 column 1: 9 floats"));
  std::vector<uint32_t> bad = {0, 1, 7};
  g.cells = {{xyz}};
  g.triangles = bad;
  EXPECT_THAT(RenderSnapshot(g, Front()).status().message(), HasSubstr("triangle 0 index 7 >= 4"));
  g.triangles = tris;
  SnapshotOptions o = Front();
  o.up_axis = 2;
  EXPECT_THAT(RenderSnapshot(g, o).status().message(), HasSubstr("axes must differ"));
}

}  // namespace
}  // namespace sinew::client
