// clients/lib/interrupt.h: what an interrupted command-line client leaves behind.
#include "clients/lib/interrupt.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/util/atomic_file.h"

namespace sinew::client {
namespace {

// Ctrl-C during a write: the process exits 128 + SIGINT without the write's temporary beside
// the outputs (until 2026-12-07 an interrupted `sinew batch --obj` left `frame_NNNN.obj.tmp.XXXXXX`
// in the user's folder, removed only by a run an hour later). Run in a child: it exits.
TEST(Interrupt, ExitsWithoutTheTemporariesOfItsWritesInProgress) {
  std::string dir = ::testing::TempDir() + "/sinew_interrupt_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  EXPECT_EXIT(
      {
        InstallInterruptHandler();
        auto file = AtomicFile::Create(dir + "/frame_0007.obj");
        if (!file.ok() || ::write(file->fd(), "v 0 0 0\n", 8) != 8) std::_Exit(1);
        ::kill(::getpid(), SIGINT);
        for (;;) ::pause();  // the handler's thread ends the process
      },
      ::testing::ExitedWithCode(128 + SIGINT), "interrupted \\(INT\\)");
  std::error_code ec;
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << left.front();
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace sinew::client
