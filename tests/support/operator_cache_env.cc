// Linked into the test programs: where ctest set SINEW_TEST_OPERATOR_CACHE (the directory the
// operator-cache fixture filled, tests/CMakeLists.txt), implicit skinning's composition
// operators are loaded from there (checksummed files; built and written there if absent)
// instead of being built in every test process. Run by hand, without the variable, a test
// builds them in memory as before. Set from a gtest environment, i.e. once main has started,
// not from a static initialiser (core's cache directory is itself a static of another file).
#include <cstdlib>

#include <gtest/gtest.h>

#include "core/implicit/operators.h"

namespace {
class OperatorCacheEnvironment final : public ::testing::Environment {
 public:
  void SetUp() override {
    if (const char* dir = std::getenv("SINEW_TEST_OPERATOR_CACHE"); dir && *dir) sinew::SetOperatorCacheDirectory(dir);
  }
};
[[maybe_unused]] ::testing::Environment* const kOperatorCache =
    ::testing::AddGlobalTestEnvironment(new OperatorCacheEnvironment);
}  // namespace
