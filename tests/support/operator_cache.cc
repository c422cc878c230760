// sinew-test-operator-cache DIR: the ctest fixture that builds implicit skinning's composition
// operators (core/implicit/operators.h: two 129×129×33 bi-harmonic grids, about 5 s on two
// cores) once per test run, into DIR, emptied first so that a run never reads grids an older
// build wrote. Every test process that needs them then loads them from DIR
// (operator_cache_env.cc) instead of building them again: about 70 tests did, a quarter of the
// suite's time.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "core/implicit/operators.h"
#include "core/parallel/thread_pool.h"

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '\0') {
    std::fprintf(stderr, "usage: %s DIR (emptied, then the composition operators are built into it)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) {
    std::fprintf(stderr, "cannot empty %s: %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  sinew::SetOperatorCacheDirectory(dir.string());
  sinew::ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
  auto ops = sinew::SharedOperators({}, &pool);
  if (!ops.ok()) {
    std::fprintf(stderr, "building the operators failed: %s\n", std::string(ops.status().message()).c_str());
    return 1;
  }
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".sinewop") {
      std::printf("%s (%ju bytes)\n", entry.path().c_str(), std::uintmax_t(entry.file_size()));
      ++files;
    }
  }
  if (files != 2) {
    std::fprintf(stderr, "expected the contact and bulge operators in %s, found %zu files\n", dir.c_str(), files);
    return 1;
  }
  return 0;
}
