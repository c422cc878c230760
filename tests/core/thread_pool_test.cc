#include <atomic>
#include <thread>
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

// ParallelFor and ParallelPasses inside tasks that occupy every worker finish (the caller
// withdraws helpers that could not start instead of waiting for them).
TEST(ThreadPool, NestedParallelForAndPassesWhileAllWorkersBusy) {
  ThreadPool pool(2);
  struct Ctx {
    ThreadPool* pool;
    std::atomic<int> done{0};
    std::atomic<long> sum{0};
  } ctx{&pool};
  auto task = [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    c->pool->ParallelFor(10000, 10, [&](size_t b, size_t e) { c->sum.fetch_add(long(e - b)); });
    std::vector<size_t> scratch;
    const std::vector<size_t> sizes(20, 500);
    c->pool->ParallelPasses(sizes, 10, scratch, [&](size_t, size_t b, size_t e) { c->sum.fetch_add(long(e - b)); });
    c->done.fetch_add(1);
  };
  for (int i = 0; i < 8; ++i) pool.Submit(task, &ctx);
  while (ctx.done.load() < 8) std::this_thread::yield();
  EXPECT_EQ(ctx.sum.load(), 8 * (10000 + 20 * 500));
}

// Passes run in order: each pass reads, across chunk boundaries, what the pass before it wrote
// (a[i] = b[(i * 7 + p) % n] + 1, the two arrays swapping), so a chunk started before the
// previous pass ended would read a stale value. Every index is visited once per pass; empty and
// one-element passes in between keep the order.
TEST(ThreadPool, ParallelPassesSeeThePassBefore) {
  for (size_t workers : {0, 1, 3}) {
    ThreadPool pool(workers);
    std::vector<size_t> scratch;
    for (size_t grain : {1, 16, 5000}) {
      const size_t n = 4099;
      const std::vector<size_t> sizes = {n, 0, n, 1, n, n, 0, n, n, n, n, 3, n};
      std::vector<long> a(n), b(n), want_a(n), want_b(n);
      for (size_t i = 0; i < n; ++i) a[i] = want_a[i] = long(i);
      std::vector<std::vector<int>> hits(sizes.size());
      for (size_t p = 0; p < sizes.size(); ++p) hits[p].assign(sizes[p], 0);
      auto step = [&](std::vector<long>& from, std::vector<long>& to, size_t p, size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) to[i] = from[(i * 7 + p) % n] + 1;
      };
      // The serial reference: pass p writes b from a when p is even, a from b when odd.
      for (size_t p = 0; p < sizes.size(); ++p) {
        if (p % 2 == 0) step(want_a, want_b, p, 0, sizes[p]);
        else step(want_b, want_a, p, 0, sizes[p]);
      }
      pool.ParallelPasses(sizes, grain, scratch, [&](size_t p, size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) ++hits[p][i];
        if (p % 2 == 0) step(a, b, p, lo, hi);
        else step(b, a, p, lo, hi);
      });
      EXPECT_EQ(a, want_a) << workers << " workers, grain " << grain;
      EXPECT_EQ(b, want_b) << workers << " workers, grain " << grain;
      for (size_t p = 0; p < sizes.size(); ++p) {
        for (size_t i = 0; i < sizes[p]; ++i) ASSERT_EQ(hits[p][i], 1) << "pass " << p << " index " << i;
      }
    }
  }
}

TEST(ThreadPool, SubmitWithoutWorkersRunsInline) {
  ThreadPool pool(0);
  int x = 0;
  pool.Submit([](void* p) { *static_cast<int*>(p) = 42; }, &x);
  EXPECT_EQ(x, 42);
}

}  // namespace
}  // namespace sinew
