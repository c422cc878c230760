// sinew-decode-frames IN OUT: decodes one stream's frames with the C++ client's PositionDecoder,
// so that other clients' decoders (clients/python) can be compared with it bit for bit.
//   IN:  records of a uint32 little-endian length and a serialized sinew.v1.DeformResponse, the
//        frames of one StreamDeform stream in order
//   OUT: every frame's positions as float32 x,y,z, back to back
// Exits 1 naming the record that did not decode.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "clients/lib/client.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: sinew-decode-frames IN OUT\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::ofstream out(argv[2], std::ios::binary);
  if (!in || !out) {
    std::fprintf(stderr, "sinew-decode-frames: cannot open %s or %s\n", argv[1], argv[2]);
    return 1;
  }
  sinew::client::PositionDecoder decoder;
  std::vector<float> xyz;
  for (size_t record = 0;; ++record) {
    unsigned char len[4];
    if (!in.read(reinterpret_cast<char*>(len), 4)) break;
    const uint32_t n = len[0] | uint32_t{len[1]} << 8 | uint32_t{len[2]} << 16 | uint32_t{len[3]} << 24;
    std::string bytes(n, '\0');
    sinew::v1::DeformResponse response;
    if (!in.read(bytes.data(), n) || !response.ParseFromString(bytes)) {
      std::fprintf(stderr, "sinew-decode-frames: record %zu is truncated or not a DeformResponse\n", record);
      return 1;
    }
    if (auto st = decoder.Decode(response, xyz); !st.ok()) {
      std::fprintf(stderr, "sinew-decode-frames: record %zu: %s\n", record, std::string(st.message()).c_str());
      return 1;
    }
    out.write(reinterpret_cast<const char*>(xyz.data()), std::streamsize(xyz.size() * sizeof(float)));
  }
  return out ? 0 : 1;
}
