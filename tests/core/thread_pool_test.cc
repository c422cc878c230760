#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "core/parallel/thread_pool.h"

namespace sinew {
namespace {

// Every index is visited exactly once, whatever the grain and pool size.
TEST(ThreadPool, ParallelForCoversRangeOnce) {
  for (size_t workers : {0, 1, 3}) {
    ThreadPool pool(workers);
    for (size_t n : {0, 1, 7, 1000, 12345}) {
      for (size_t grain : {1, 16, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, grain, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain << " " << i;
      }
    }
  }
}

// ParallelFor inside tasks that occupy every worker finishes (the caller withdraws helpers
// that could not start instead of waiting for them).
TEST(ThreadPool, NestedParallelForWhileAllWorkersBusy) {
  ThreadPool pool(2);
  struct Ctx {
    ThreadPool* pool;
    std::atomic<int> done{0};
    std::atomic<long> sum{0};
  } ctx{&pool};
  auto task = [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    c->pool->ParallelFor(10000, 10, [&](size_t b, size_t e) { c->sum.fetch_add(long(e - b)); });
    c->done.fetch_add(1);
  };
  for (int i = 0; i < 8; ++i) pool.Submit(task, &ctx);
  while (ctx.done.load() < 8) std::this_thread::yield();
  EXPECT_EQ(ctx.sum.load(), 8 * 10000);
}

TEST(ThreadPool, SubmitWithoutWorkersRunsInline) {
  ThreadPool pool(0);
  int x = 0;
  pool.Submit([](void* p) { *static_cast<int*>(p) = 42; }, &x);
  EXPECT_EQ(x, 42);
}

}  // namespace
}  // namespace sinew
