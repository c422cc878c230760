// A fixed pool of worker threads with a bounded-latency ParallelFor.
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

 private:
  struct Task {
    TaskFn fn;
    void* arg;
  };
  struct Job;
  using ChunkFn = void (*)(void*, size_t, size_t);

  void ParallelForImpl(size_t n, size_t grain, ChunkFn fn, void* ctx);
  static void RunChunks(Job& job);
  static void HelperTask(void* job);
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
