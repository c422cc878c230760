// Runs a fuzz target's entry point (LLVMFuzzerTestOneInput) on every file of the folders (or
// the files) named on the command line, without libFuzzer: the ctest that keeps the targets
// compiling and their corpora exercised in the plain build (and under scripts/sanitize.sh).
// Exits 1 when a path cannot be read or holds no file.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> paths;
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      for (const auto& e : fs::directory_iterator(argv[i], ec)) {
        if (e.is_regular_file()) paths.push_back(e.path());
      }
    } else {
      paths.push_back(argv[i]);
    }
    if (ec) {
      std::fprintf(stderr, "%s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
    for (const fs::path& p : paths) {
      std::ifstream in(p, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "%s: cannot read\n", p.c_str());
        return 1;
      }
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++files;
    }
  }
  std::printf("%zu inputs ran\n", files);
  return files > 0 ? 0 : 1;
}
