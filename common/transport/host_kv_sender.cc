#include "common/transport/host_kv_sender.h"

#include <chrono>

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
  Transfer(Peer* peer, KvDestination dst, std::vector<int32_t> src)
      : peer_(peer), dst_(std::move(dst)), src_(std::move(src)) {}

  void SendLayer(int32_t layer, int32_t first, int32_t count,
                 std::shared_ptr<kernels::Event> ready) override {
    Enqueue(peer_, {this, layer, first, count, std::move(ready)});
  }
  void Finish(std::function<void(absl::Status, KvTransferStats)> done) override {
    done_ = std::move(done);
    finish_called_ = Clock::now();
    Enqueue(peer_, {this, -1, 0, 0, nullptr});
  }

 private:
  friend class HostKvSender;
  Peer* peer_;
  KvDestination dst_;
  std::vector<int32_t> src_;
  // Used by the sender thread only.
  grpc::ClientContext ctx_;
  v1::PushKvBlocksResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::KvBlocksChunk>> writer_;
  absl::Status error_;
  bool write_broke_ = false;  // error_ is a failed Write: the receiver's status says why
  KvTransferStats stats_;
  Clock::time_point finish_called_;  // set before the finish task is queued
  std::function<void(absl::Status, KvTransferStats)> done_;
};

HostKvSender::HostKvSender(const kernels::KvStorage* kv, v1::KvLayoutFingerprint fingerprint,
                           std::string api_key, int64_t chunk_bytes)
    : kv_(kv),
      fingerprint_(std::move(fingerprint)),
      api_key_(std::move(api_key)),
      chunk_bytes_(chunk_bytes) {}

HostKvSender::~HostKvSender() {
  std::lock_guard<std::mutex> lock(peers_mu_);
  for (auto& [address, peer] : peers_) {
    {
      std::lock_guard<std::mutex> l(peer->mu);
      peer->stop = true;
    }
    peer->cv.notify_all();
    peer->thread.join();
  }
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
  if (peers_.contains(address)) return absl::OkStatus();  // a concurrent Connect won
  auto peer = std::make_unique<Peer>();
  peer->stub = std::move(stub);
  Peer* p = peer.get();
  p->thread = std::thread([this, p] { Run(p); });
  peers_[address] = std::move(peer);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvTransfer>> HostKvSender::Begin(const KvDestination& dst,
                                                                std::vector<int32_t> src_blocks) {
  if (src_blocks.size() != dst.block_ids.size() || src_blocks.empty()) {
    return absl::InvalidArgumentError(StrCat("KV transfer: ", src_blocks.size(),
                                             " source blocks for ", dst.block_ids.size(),
                                             " destination blocks"));
  }
  Peer* peer = nullptr;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    auto it = peers_.find(dst.address);
    if (it == peers_.end()) {
      return absl::FailedPreconditionError(StrCat("KV transfer: no handshake with ", dst.address));
    }
    peer = it->second.get();
  }
  return std::unique_ptr<KvTransfer>(new Transfer(peer, dst, std::move(src_blocks)));
}

void HostKvSender::Enqueue(Peer* peer, Task task) {
  {
    std::lock_guard<std::mutex> lock(peer->mu);
    peer->tasks.push_back(std::move(task));
  }
  peer->cv.notify_one();
}

void HostKvSender::Run(Peer* peer) {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(peer->mu);
      peer->cv.wait(lock, [&] { return peer->stop || !peer->tasks.empty(); });
      if (peer->tasks.empty()) return;
      task = std::move(peer->tasks.front());
      peer->tasks.pop_front();
    }
    if (task.layer < 0) {
      Complete(task.transfer);
    } else if (task.transfer->error_.ok()) {
      WriteLayer(task.transfer, task);
    }
  }
}

void HostKvSender::WriteLayer(Transfer* t, const Task& task) {
  if (task.ready != nullptr) {
    if (absl::Status st = task.ready->Wait(); !st.ok()) {
      t->error_ = st;
      return;
    }
  }
  if (t->writer_ == nullptr) {
    t->ctx_.set_deadline(std::chrono::system_clock::now() + kTransferTimeout);
    t->writer_ = t->peer_->stub->PushKvBlocks(&t->ctx_, &t->response_);
  }
  // One layer of one block: K then V, adjacent in the block ([layer][K|V]).
  const int64_t slice_bytes = kv_->layout().LayerBytes();
  const int32_t per_chunk = static_cast<int32_t>(std::max<int64_t>(1, chunk_bytes_ / slice_bytes));
  const int32_t n = std::min(task.first + task.count, static_cast<int32_t>(t->src_.size()));
  for (int32_t first = task.first; first < n; first += per_chunk) {
    const int32_t count = std::min(per_chunk, n - first);
    v1::KvBlocksChunk chunk;
    if (t->stats_.bytes == 0) {
      chunk.set_lease_id(t->dst_.lease_id);
      *chunk.mutable_fingerprint() = fingerprint_;
      chunk.mutable_block_ids()->Assign(t->dst_.block_ids.begin(), t->dst_.block_ids.end());
    }
    chunk.set_layer(task.layer);
    chunk.set_first_block(first);
    chunk.set_num_blocks(count);
    std::string* payload = chunk.mutable_payload();
    payload->resize(static_cast<size_t>(count * slice_bytes));
    if (absl::Status st = kv_->ReadLayer({t->src_.data() + first, static_cast<size_t>(count)},
                                         task.layer, reinterpret_cast<uint8_t*>(payload->data()));
        !st.ok()) {
      t->error_ = st;
      return;
    }
    t->stats_.bytes += count * slice_bytes;
    if (!t->writer_->Write(chunk)) {
      t->write_broke_ = true;
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
    if (!s.ok() && (status.ok() || t->write_broke_)) status = rpc::FromGrpc(s);
  } else if (status.ok()) {
    status = absl::InternalError("KV transfer finished before any layer was sent");
  }
  t->stats_.ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t->finish_called_).count();
  auto done = std::move(t->done_);
  done(status, t->stats_);
}

}  // namespace tandem::transport
