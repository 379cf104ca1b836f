// ConnectionPool: cpp-httplib's task queue with a bound, so that a burst of connections
// is answered, never reset.
//
// httplib hands each accepted connection to its task queue, and the task serves that
// connection until it closes (a streaming response holds its thread throughout). This
// queue serves `threads` connections at once and lets as many more wait for a thread;
// a connection past that is served by one of two rejecting threads, where
// Rejecting() is true, so the server's first handler answers it 503 at once (with
// Retry-After and Connection: close) instead of leaving it queued without bound.
//
// Thread-safe.
#ifndef TANDEM_COMMON_HTTP_CONNECTION_POOL_H_
#define TANDEM_COMMON_HTTP_CONNECTION_POOL_H_

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::http {

class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(int threads, int max_waiting);
  ~ConnectionPool() override;  // shutdown()

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread.
  void shutdown() override;

  // True on a thread answering a connection past the bound.
  static bool Rejecting();

 private:
  void Serve();
  void Reject();

  const int threads_;
  const int max_waiting_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_, rejected_;
  int busy_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tandem::http

#endif  // TANDEM_COMMON_HTTP_CONNECTION_POOL_H_
