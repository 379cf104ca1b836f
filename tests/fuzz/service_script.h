// What the gRPC service fuzzers share (decode_worker/decode_service_fuzzer.cc,
// prefill_worker/prefill_service_fuzzer.cc): the script an input is read as, call
// deadlines, and calls whose request bytes go out unparsed.
//
// A script is [op][flags][length][message bytes] repeated; the length byte says how many
// message bytes follow (fewer at the end of the input). Each fuzzer gives op and flags
// their meaning. Header-only, test code.
#ifndef TANDEM_TESTS_FUZZ_SERVICE_SCRIPT_H_
#define TANDEM_TESTS_FUZZ_SERVICE_SCRIPT_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace tandem::fuzz {

class Script {
 public:
  explicit Script(std::string_view bytes) : rest_(bytes) {}
  // The next call, or false at the end of the input.
  bool Next(uint8_t* op, uint8_t* flags, std::string_view* message) {
    if (rest_.size() < 3) return false;
    *op = static_cast<uint8_t>(rest_[0]);
    *flags = static_cast<uint8_t>(rest_[1]);
    const size_t n = std::min<size_t>(static_cast<uint8_t>(rest_[2]), rest_.size() - 3);
    *message = rest_.substr(3, n);
    rest_.remove_prefix(3 + n);
    return true;
  }

 private:
  std::string_view rest_;
};

inline std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

// Sends `bytes` unparsed as the request of the unary `method` (as a client with a broken
// encoder would) and returns the answer's status. Bytes that do not parse as the request
// are answered INTERNAL by gRPC before any handler runs.
inline grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& method,
                            std::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer request(&slice, 1), response;
  auto ctx = Context(std::chrono::seconds(5));
  grpc::Status st;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  stub.UnaryCall(ctx.get(), method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    st = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return st;
}

}  // namespace tandem::fuzz

#endif  // TANDEM_TESTS_FUZZ_SERVICE_SCRIPT_H_
