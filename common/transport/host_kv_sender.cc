#include "common/transport/host_kv_sender.h"

#include <chrono>
#include <cstring>

#include "common/rpc/engine_convert.h"
#include "common/rpc/rpc_server.h"
#include "common/rpc/status_convert.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::transport {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// A long prompt on a slow machine may stream chunks for minutes; a dead peer is caught
// by keepalive pings long before this.
constexpr auto kTransferTimeout = std::chrono::minutes(30);
}  // namespace

class HostKvSender::Transfer : public KvTransfer {
 public:
  Transfer(HostKvSender* sender, KvDestination dst, std::vector<int32_t> src)
      : sender_(sender), dst_(std::move(dst)), src_(std::move(src)) {}

  void SendLayer(int32_t layer, int32_t first, int32_t count) override {
    sender_->Enqueue({this, layer, first, count});
  }
  void Finish(std::function<void(absl::Status, KvTransferStats)> done) override {
    done_ = std::move(done);
    finish_called_ = Clock::now();
    sender_->Enqueue({this, -1});
  }

 private:
  friend class HostKvSender;
  HostKvSender* sender_;
  KvDestination dst_;
  std::vector<int32_t> src_;
  std::shared_ptr<v1::KvTransfer::Stub> stub_;
  // Used by the sender thread only.
  grpc::ClientContext ctx_;
  v1::PushKvBlocksResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::KvBlocksChunk>> writer_;
  absl::Status error_;
  KvTransferStats stats_;
  Clock::time_point finish_called_;  // set before the finish task is queued
  std::function<void(absl::Status, KvTransferStats)> done_;
};

HostKvSender::HostKvSender(const kv::KvCache* cache, v1::KvLayoutFingerprint fingerprint,
                           std::string api_key, int64_t chunk_bytes)
    : cache_(cache),
      fingerprint_(std::move(fingerprint)),
      api_key_(std::move(api_key)),
      chunk_bytes_(chunk_bytes) {
  thread_ = std::thread([this] { Run(); });
}

HostKvSender::~HostKvSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

absl::Status HostKvSender::Connect(const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (peers_.contains(address)) return absl::OkStatus();
  }
  auto stub = std::shared_ptr<v1::KvTransfer::Stub>(
      v1::KvTransfer::NewStub(rpc::MakeChannel(address, api_key_)));
  v1::HandshakeRequest req;
  *req.mutable_fingerprint() = fingerprint_;
  req.add_transports(v1::TRANSPORT_KIND_HOST);
  v1::HandshakeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kHandshakeTimeout);
  RETURN_IF_ERROR(
      rpc::FromGrpc(stub->Handshake(&ctx, req, &resp), StrCat("KV handshake with ", address)));
  RETURN_IF_ERROR(rpc::CheckFingerprint(fingerprint_, resp.fingerprint()));
  std::lock_guard<std::mutex> lock(peers_mu_);
  peers_[address] = std::move(stub);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvTransfer>> HostKvSender::Begin(const KvDestination& dst,
                                                                std::vector<int32_t> src_blocks) {
  if (src_blocks.size() != dst.block_ids.size() || src_blocks.empty()) {
    return absl::InvalidArgumentError(StrCat("KV transfer: ", src_blocks.size(),
                                             " source blocks for ", dst.block_ids.size(),
                                             " destination blocks"));
  }
  std::shared_ptr<v1::KvTransfer::Stub> stub;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    auto it = peers_.find(dst.address);
    if (it == peers_.end()) {
      return absl::FailedPreconditionError(StrCat("KV transfer: no handshake with ", dst.address));
    }
    stub = it->second;
  }
  auto t = std::make_unique<Transfer>(this, dst, std::move(src_blocks));
  t->stub_ = std::move(stub);
  return std::unique_ptr<KvTransfer>(std::move(t));
}

void HostKvSender::Enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(task);
  }
  cv_.notify_one();
}

void HostKvSender::Run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = tasks_.front();
      tasks_.pop_front();
    }
    if (task.layer < 0) {
      Complete(task.transfer);
    } else if (task.transfer->error_.ok()) {
      WriteLayer(task.transfer, task.layer, task.first, task.count);
    }
  }
}

void HostKvSender::WriteLayer(Transfer* t, int32_t layer, int32_t first_block,
                              int32_t count_blocks) {
  if (t->writer_ == nullptr) {
    t->ctx_.set_deadline(std::chrono::system_clock::now() + kTransferTimeout);
    t->writer_ = t->stub_->PushKvBlocks(&t->ctx_, &t->response_);
  }
  const kv::KvLayout& layout = cache_->layout();
  // One layer of one block: K then V, adjacent in the block ([layer][K|V]).
  const int64_t slice_floats = layout.LayerStride();
  const int64_t slice_bytes = slice_floats * static_cast<int64_t>(sizeof(float));
  const int32_t per_chunk = static_cast<int32_t>(std::max<int64_t>(1, chunk_bytes_ / slice_bytes));
  const int32_t n = std::min(first_block + count_blocks, static_cast<int32_t>(t->src_.size()));
  for (int32_t first = first_block; first < n; first += per_chunk) {
    const int32_t count = std::min(per_chunk, n - first);
    v1::KvBlocksChunk chunk;
    if (t->stats_.bytes == 0) {
      chunk.set_lease_id(t->dst_.lease_id);
      *chunk.mutable_fingerprint() = fingerprint_;
      chunk.mutable_block_ids()->Assign(t->dst_.block_ids.begin(), t->dst_.block_ids.end());
    }
    chunk.set_layer(layer);
    chunk.set_first_block(first);
    chunk.set_num_blocks(count);
    std::string* payload = chunk.mutable_payload();
    payload->resize(static_cast<size_t>(count * slice_bytes));
    for (int32_t i = 0; i < count; ++i) {
      std::memcpy(payload->data() + i * slice_bytes, cache_->Part(t->src_[first + i], layer, 0),
                  static_cast<size_t>(slice_bytes));
    }
    t->stats_.bytes += count * slice_bytes;
    if (!t->writer_->Write(chunk)) {
      t->error_ = absl::UnavailableError(StrCat("KV transfer to ", t->dst_.address,
                                                " broke (the decode worker closed the stream)"));
      return;
    }
  }
}

void HostKvSender::Complete(Transfer* t) {
  absl::Status status = t->error_;
  if (t->writer_ != nullptr) {
    t->writer_->WritesDone();
    grpc::Status s = t->writer_->Finish();
    // The receiver's status explains a broken stream better than the write failure.
    if (!s.ok()) status = rpc::FromGrpc(s);
  } else if (status.ok()) {
    status = absl::InternalError("KV transfer finished before any layer was sent");
  }
  t->stats_.ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t->finish_called_).count();
  auto done = std::move(t->done_);
  done(status, t->stats_);
}

}  // namespace tandem::transport
