// StreamOutbox: the write side of a gRPC server stream (callback API), fed from any
// thread.
//
// Producers Push messages and finally End with a status; the outbox keeps at most one
// write in flight (gRPC's rule), merges queued messages when `merge` allows (tokens
// that arrive while a write is in flight go out together), and calls Finish exactly
// once: after every queued message for an OK end, at once (dropping the queue) for an
// error. After Finish it never touches the reactor again, so the reactor may delete
// itself in OnDone while producers still hold the outbox.
//
// Thread-safe. Shared (std::shared_ptr) between the reactor and its producers.
// `Reactor` is gRPC's; a test may give a type with the same StartWrite and Finish
// (stream_outbox_test.cc drives the outbox without gRPC, so TSan sees every thread).
#ifndef TANDEM_COMMON_RPC_STREAM_OUTBOX_H_
#define TANDEM_COMMON_RPC_STREAM_OUTBOX_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"

namespace tandem::rpc {

template <class Response, class Reactor = grpc::ServerWriteReactor<Response>>
class StreamOutbox {
 public:
  // merge(into, next): fold `next` into the queued `into`; false to keep both.
  using MergeFn = std::function<bool(Response* into, const Response& next)>;

  explicit StreamOutbox(Reactor* reactor, MergeFn merge = nullptr)
      : reactor_(reactor), merge_(std::move(merge)) {}

  void Push(Response msg) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (end_.has_value()) return;
      if (queue_.empty() || !merge_ || !merge_(&queue_.back(), msg))
        queue_.push_back(std::move(msg));
    }
    Pump();
  }

  // The first End wins. A non-OK end drops what is still queued.
  void End(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (end_.has_value()) return;
      end_ = status;
      if (!status.ok()) queue_.clear();
    }
    Pump();
  }

  // From the reactor's OnWriteDone. A failed write means the client is gone.
  void WriteDone(bool ok) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {
        queue_.clear();
        if (!end_.has_value()) end_ = grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
      }
    }
    Pump();
  }

 private:
  // Starts the next write or the finish, outside the lock (gRPC may react inline).
  void Pump() {
    enum { kNothing, kWrite, kFinish } action = kNothing;
    grpc::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_ || finished_) return;
      if (!queue_.empty()) {
        out_ = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
        action = kWrite;
      } else if (end_.has_value()) {
        finished_ = true;
        status = *end_;
        action = kFinish;
      }
    }
    if (action == kWrite) reactor_->StartWrite(&out_);
    if (action == kFinish) reactor_->Finish(status);
  }

  Reactor* const reactor_;
  const MergeFn merge_;
  mutable std::mutex mu_;
  std::deque<Response> queue_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> end_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  Response out_;  // the message being written; touched only by the thread that starts it
};

}  // namespace tandem::rpc

#endif  // TANDEM_COMMON_RPC_STREAM_OUTBOX_H_
