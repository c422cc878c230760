// A fixed pool of worker threads with a bounded-latency ParallelFor, and ParallelPasses for
// chains of short passes (its threads spin between passes for as long as a pass takes).
//
// Tasks are plain (function, argument) pairs so that submitting one allocates nothing once the
// queue has grown to its working size. ParallelFor splits [0, n) into equal chunks of at most
// `grain`, a multiple of the thread count of them; the
// calling thread works on chunks too, and idle workers join in. It never waits on a chunk that
// has not started, so it is safe to call from inside a worker task (nested use) even when every
// worker is busy: the caller then simply does all chunks itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace sinew {

class ThreadPool {
 public:
  using TaskFn = void (*)(void*);

  // `workers` threads; 0 makes a pool that runs everything on the calling thread.
  explicit ThreadPool(size_t workers);
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t workers() const { return threads_.size(); }
  // Tasks queued and not yet started.
  size_t queued() const;

  // Runs fn(arg) on a worker (inline when the pool has none).
  void Submit(TaskFn fn, void* arg);

  // Calls body(begin, end) over disjoint chunks covering [0, n) and returns when all are done.
  template <class Body>
  void ParallelFor(size_t n, size_t grain, Body&& body) {
    ParallelForImpl(
        n, grain,
        [](void* ctx, size_t b, size_t e) { (*static_cast<std::remove_reference_t<Body>*>(ctx))(b, e); },
        &body);
  }

  // Passes run one after another: pass p calls body(p, begin, end) over disjoint chunks covering
  // [0, sizes[p]), and no chunk of a pass starts before every chunk of the passes before it has
  // ended (the writes of one pass are seen by the next). Like a ParallelFor per pass, but the
  // helpers are handed out once for all passes: they and the caller take chunks from one counter
  // and wait between passes by spinning on a count of ended chunks, so a pass of microseconds
  // costs no sleep and wake-up. A thread only ever waits for chunks that a running thread has
  // taken; helpers that never started are withdrawn and the caller alone can run every pass.
  // A helper holds its worker for the whole call, spinning (and yielding now and then, never
  // sleeping) while a pass ends elsewhere: meant for passes of microseconds, not for long ones.
  // `scratch` keeps the chunk offsets between calls (no allocation once it is large enough); it
  // belongs to this call until it returns (not shared with a concurrent or nested call).
  template <class Body>
  void ParallelPasses(std::span<const size_t> sizes, size_t grain, std::vector<size_t>& scratch, Body&& body) {
    ParallelPassesImpl(
        sizes, grain, scratch,
        [](void* ctx, size_t p, size_t b, size_t e) { (*static_cast<std::remove_reference_t<Body>*>(ctx))(p, b, e); },
        &body);
  }

 private:
  struct Task {
    TaskFn fn;
    void* arg;
  };
  struct Job;
  struct PassJob;
  using ChunkFn = void (*)(void*, size_t, size_t);
  using PassFn = void (*)(void*, size_t, size_t, size_t);

  void ParallelForImpl(size_t n, size_t grain, ChunkFn fn, void* ctx);
  void ParallelPassesImpl(std::span<const size_t> sizes, size_t grain, std::vector<size_t>& scratch, PassFn fn,
                          void* ctx);
  static void RunChunks(Job& job);
  static void HelperTask(void* job);
  static void RunPasses(PassJob& job);
  static void PassHelperTask(void* job);
  // Queues `helpers` tasks (fn, arg) with `outstanding` set to their count, and wakes workers.
  void SubmitHelpers(TaskFn fn, void* arg, size_t helpers, std::atomic<size_t>& outstanding);
  // Withdraws queued tasks (fn, arg) that never started and waits for the started ones to end
  // (`outstanding` counts both; each started one decrements it under mu_ when it ends).
  void WithdrawAndWait(TaskFn fn, void* arg, std::atomic<size_t>& outstanding);
  void WorkerLoop();
  void PushLocked(Task t);

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<Task> ring_;  // circular queue, grows by doubling
  size_t head_ = 0;
  size_t count_ = 0;
  std::atomic<size_t> queued_{0};  // count_, readable without the lock
  bool stop_ = false;
  std::atomic<bool> stopping_{false};  // stop_, readable without the lock (a worker's spin)
  std::vector<std::thread> threads_;
};

// Convenience: ParallelPasses on `pool`, or each pass as one chunk in order when pool is null.
template <class Body>
void ParallelPasses(ThreadPool* pool, std::span<const size_t> sizes, size_t grain, std::vector<size_t>& scratch,
                    Body&& body) {
  if (pool == nullptr) {
    for (size_t p = 0; p < sizes.size(); ++p) {
      if (sizes[p] > 0) body(p, size_t{0}, sizes[p]);
    }
    return;
  }
  pool->ParallelPasses(sizes, grain, scratch, std::forward<Body>(body));
}

// Convenience: ParallelFor on `pool`, or a plain loop over one chunk when pool is null.
template <class Body>
void ParallelFor(ThreadPool* pool, size_t n, size_t grain, Body&& body) {
  if (pool == nullptr) {
    if (n > 0) body(size_t{0}, n);
    return;
  }
  pool->ParallelFor(n, grain, std::forward<Body>(body));
}

}  // namespace sinew
