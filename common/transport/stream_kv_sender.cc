#include "common/transport/stream_kv_sender.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "common/rpc/engine_convert.h"
#include "common/rpc/rpc_server.h"
#include "common/rpc/status_convert.h"
#include "common/transport/transport_proto.h"
#include "common/util/random_id.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::transport {

namespace {
using Clock = std::chrono::steady_clock;
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// A long prompt on a slow machine may stream chunks for minutes; a dead peer is caught
// by keepalive pings (and, on a peer transport, by each Send's deadline) long before.
constexpr auto kTransferTimeout = std::chrono::minutes(30);
}  // namespace

class StreamKvSender::Transfer : public KvTransfer {
 public:
  Transfer(Peer* peer, KvDestination dst, std::vector<int32_t> src)
      : peer_(peer), dst_(std::move(dst)), src_(std::move(src)) {
    stats_.transport = peer->kind;
  }

  void SendLayer(int32_t layer, int32_t first, int32_t count,
                 std::shared_ptr<kernels::Event> ready) override {
    Enqueue(peer_, {this, layer, first, count, std::move(ready)});
  }
  void Finish(std::function<void(absl::Status, KvTransferStats)> done) override {
    done_ = std::move(done);
    finish_called_ = Clock::now();
    Enqueue(peer_, {this, -1, 0, 0, nullptr});
  }
  bool Failed() const override { return failed_.load(std::memory_order_acquire); }

 private:
  friend class StreamKvSender;
  Peer* peer_;
  KvDestination dst_;
  std::vector<int32_t> src_;
  // Used by the sender thread only.
  grpc::ClientContext ctx_;
  v1::PushKvBlocksResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::KvBlocksChunk>> writer_;
  bool header_sent_ = false;
  absl::Status error_;
  std::atomic<bool> failed_{false};  // error_ is set and no task will read the blocks again
  KvTransferStats stats_;
  Clock::time_point finish_called_;  // set before the finish task is queued
  std::function<void(absl::Status, KvTransferStats)> done_;
};

absl::StatusOr<std::unique_ptr<StreamKvSender>> StreamKvSender::Create(
    const kernels::KvStorage* kv, v1::KvLayoutFingerprint fingerprint,
    StreamKvSenderOptions options) {
  if (options.offered.empty()) {
    return absl::InvalidArgumentError("KV sender: no transport to offer");
  }
  std::unique_ptr<StreamKvSender> s(
      new StreamKvSender(kv, std::move(fingerprint), std::move(options)));
  for (TransportKind k : s->options_.offered) {
    if (k == TransportKind::kHost) continue;
    if ((k == TransportKind::kNccl ? s->options_.nccl : s->options_.cuda_ipc) == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("KV sender: ", TransportName(k), " offered but not available in this process"));
    }
  }
  // Peer transports gather into staging; so does the host transport from a GPU (one
  // device gather and one copy out per chunk instead of a copy per block).
  const bool peer = std::any_of(s->options_.offered.begin(), s->options_.offered.end(),
                                [](TransportKind k) { return k != TransportKind::kHost; });
  if (peer || s->options_.device.backend == "cuda") {
    ASSIGN_OR_RETURN(s->staging_, StagingPool::Create(*kv, s->options_.staging_buffers,
                                                      s->options_.staging_bytes));
  }
  return s;
}

StreamKvSender::StreamKvSender(const kernels::KvStorage* kv, v1::KvLayoutFingerprint fingerprint,
                               StreamKvSenderOptions options)
    : kv_(kv),
      fingerprint_(std::move(fingerprint)),
      options_(std::move(options)),
      sender_id_(RandomNonZero64()) {}

StreamKvSender::~StreamKvSender() {
  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    peers.swap(peers_);
  }
  // Joined without the lock: a thread finishing its queue may still take it.
  for (auto& [address, peer] : peers) {
    {
      std::lock_guard<std::mutex> l(peer->mu);
      peer->stop = true;
    }
    peer->cv.notify_all();
    peer->thread.join();
  }
}

absl::Status StreamKvSender::Connect(const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (peers_.contains(address)) return absl::OkStatus();
  }
  auto stub = std::shared_ptr<v1::KvTransfer::Stub>(
      v1::KvTransfer::NewStub(rpc::MakeChannel(address, options_.api_key)));
  v1::HandshakeRequest req = Handshake(options_.offered);
  v1::HandshakeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kHandshakeTimeout);
  RETURN_IF_ERROR(
      rpc::FromGrpc(stub->Handshake(&ctx, req, &resp), StrCat("KV handshake with ", address)));
  RETURN_IF_ERROR(rpc::CheckFingerprint(fingerprint_, resp.fingerprint()));
  const std::optional<TransportKind> kind = FromProto(resp.transport());
  if (!kind || std::find(options_.offered.begin(), options_.offered.end(), *kind) ==
                   options_.offered.end()) {
    return absl::FailedPreconditionError(
        StrCat("KV handshake with ", address, ": it chose transport ",
               v1::TransportKind_Name(resp.transport()), ", which we did not offer"));
  }
  auto peer = std::make_unique<Peer>();
  peer->address = address;
  peer->stub = std::move(stub);
  peer->kind = *kind;
  // A peer transport's payload size comes with each rendezvous (the sender thread's).
  if (*kind != TransportKind::kHost) {
    peer->factory = *kind == TransportKind::kNccl ? options_.nccl : options_.cuda_ipc;
  }
  std::lock_guard<std::mutex> lock(peers_mu_);
  if (peers_.contains(address)) return absl::OkStatus();  // a concurrent Connect won
  Peer* p = peer.get();
  p->thread = std::thread([this, p] { Run(p); });
  peers_[address] = std::move(peer);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvTransfer>> StreamKvSender::Begin(const KvDestination& dst,
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

KvSenderStats StreamKvSender::Stats() const { return {.comm_rebuilds = rebuilds_.load()}; }

std::optional<TransportKind> StreamKvSender::TransportOf(const std::string& address) const {
  std::lock_guard<std::mutex> lock(peers_mu_);
  auto it = peers_.find(address);
  if (it == peers_.end()) return std::nullopt;
  return it->second->kind;
}

void StreamKvSender::Enqueue(Peer* peer, Task task) {
  {
    std::lock_guard<std::mutex> lock(peer->mu);
    peer->tasks.push_back(std::move(task));
  }
  peer->cv.notify_one();
}

void StreamKvSender::Run(Peer* peer) {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(peer->mu);
      peer->cv.wait(lock, [&] { return peer->stop || !peer->tasks.empty(); });
      if (peer->tasks.empty()) break;
      task = std::move(peer->tasks.front());
      peer->tasks.pop_front();
    }
    if (task.layer < 0) {
      Complete(task.transfer);
    } else if (task.transfer->error_.ok()) {
      absl::Status ready = task.ready != nullptr ? task.ready->Wait() : absl::OkStatus();
      if (!ready.ok()) {
        task.transfer->error_ = ready;
      } else if (peer->kind == TransportKind::kHost) {
        WriteLayer(task.transfer, task);
      } else {
        SendLayer(task.transfer, task);
      }
    }
    // After the task that failed it: later tasks of this transfer are skipped.
    if (task.layer >= 0 && !task.transfer->error_.ok()) {
      task.transfer->failed_.store(true, std::memory_order_release);
    }
  }
  if (peer->comm != nullptr) peer->comm->Abort(absl::CancelledError("KV sender stopping"));
}

v1::KvBlocksChunk StreamKvSender::Chunk(const Transfer* t, int32_t layer, int32_t first,
                                        int32_t count) const {
  v1::KvBlocksChunk chunk;
  if (!t->header_sent_) {
    chunk.set_lease_id(t->dst_.lease_id);
    chunk.set_epoch(t->dst_.epoch);
    *chunk.mutable_fingerprint() = fingerprint_;
    chunk.mutable_block_ids()->Assign(t->dst_.block_ids.begin(), t->dst_.block_ids.end());
  }
  chunk.set_layer(layer);
  chunk.set_first_block(first);
  chunk.set_num_blocks(count);
  return chunk;
}

bool StreamKvSender::Write(Transfer* t, const v1::KvBlocksChunk& chunk) {
  if (t->writer_ == nullptr) {
    t->ctx_.set_deadline(std::chrono::system_clock::now() + kTransferTimeout);
    t->writer_ = t->peer_->stub->PushKvBlocks(&t->ctx_, &t->response_);
  }
  t->header_sent_ = true;
  if (t->writer_->Write(chunk)) return true;
  t->error_ = absl::UnavailableError(
      StrCat("KV transfer to ", t->dst_.address, " broke (the decode worker closed the stream)"));
  return false;
}

void StreamKvSender::WriteLayer(Transfer* t, const Task& task) {
  // One layer of one block: K then V, adjacent in the block ([layer][K|V]).
  const int64_t slice_bytes = kv_->layout().LayerBytes();
  int64_t chunk_bytes = options_.chunk_bytes;
  if (staging_ != nullptr) chunk_bytes = std::min(chunk_bytes, staging_->bytes());
  const int32_t per_chunk = static_cast<int32_t>(std::max<int64_t>(1, chunk_bytes / slice_bytes));
  const int32_t n = std::min(task.first + task.count, static_cast<int32_t>(t->src_.size()));
  for (int32_t first = task.first; first < n; first += per_chunk) {
    const int32_t count = std::min(per_chunk, n - first);
    v1::KvBlocksChunk chunk = Chunk(t, task.layer, first, count);
    std::string* payload = chunk.mutable_payload();
    payload->resize(static_cast<size_t>(count * slice_bytes));
    uint8_t* out = reinterpret_cast<uint8_t*>(payload->data());
    const std::span<const int32_t> blocks(t->src_.data() + first, static_cast<size_t>(count));
    absl::Status st;
    if (staging_ == nullptr) {
      st = kv_->ReadLayer(blocks, task.layer, out);
    } else {
      auto slot = staging_->Acquire(Clock::now() + options_.timeout);
      st = slot.status();
      if (st.ok()) st = kv_->GatherLayer(blocks, task.layer, **slot, 0);
      if (st.ok()) st = kv_->ReadStaging(**slot, count * slice_bytes, out);
    }
    if (!st.ok()) {
      t->error_ = st;
      return;
    }
    if (!Write(t, chunk)) return;
    t->stats_.bytes += count * slice_bytes;
  }
}

void StreamKvSender::SendLayer(Transfer* t, const Task& task) {
  Peer* p = t->peer_;
  if (p->comm != nullptr && p->epoch != t->dst_.epoch) {
    BreakComm(p, absl::AbortedError("the decode worker restarted (a new epoch)"));
  }
  if (p->comm == nullptr) {
    if (absl::Status st = Rendezvous(p); !st.ok()) {
      t->error_ = st;
      return;
    }
  }
  if (p->epoch != t->dst_.epoch) {
    // The reservation is not the live process's: nothing is written or sent.
    t->error_ = absl::NotFoundError(StrCat("epoch: the reservation names ", t->dst_.epoch,
                                           ", the decode worker at ", p->address, " is at ",
                                           p->epoch, " (it restarted); KV not sent"));
    return;
  }
  const int64_t slice_bytes = kv_->layout().LayerBytes();
  const int32_t per_piece =
      static_cast<int32_t>(std::clamp<int64_t>(p->max_payload / slice_bytes, 1, int64_t{1} << 20));
  const int32_t n = std::min(task.first + task.count, static_cast<int32_t>(t->src_.size()));
  for (int32_t first = task.first; first < n; first += per_piece) {
    const int32_t count = std::min(per_piece, n - first);
    const int64_t bytes = count * slice_bytes;
    const auto deadline = Clock::now() + options_.timeout;
    auto slot = staging_->Acquire(deadline);
    if (!slot.ok()) {
      t->error_ = slot.status();
      return;
    }
    if (absl::Status st = kv_->GatherLayer({t->src_.data() + first, static_cast<size_t>(count)},
                                           task.layer, **slot, 0);
        !st.ok()) {
      t->error_ = st;
      return;
    }
    v1::KvBlocksChunk chunk = Chunk(t, task.layer, first, count);
    v1::PeerPayload* peer = chunk.mutable_peer();
    peer->set_sender_id(sender_id_);
    peer->set_generation(p->generation);
    peer->set_seq(p->seq++);
    if (!Write(t, chunk)) {
      // The receiver may or may not have read the descriptor: the pairing is unknown.
      BreakComm(p, t->error_);
      return;
    }
    if (absl::Status st = p->comm->Send(**slot, 0, bytes, deadline); !st.ok()) {
      BreakComm(p, st);
      t->error_ = absl::Status(st.code(), StrCat("KV transfer over ", TransportName(p->kind),
                                                 " to ", p->address, ": ", st.message()));
      return;
    }
    t->stats_.bytes += bytes;
  }
}

v1::HandshakeRequest StreamKvSender::Handshake(const std::vector<TransportKind>& kinds) const {
  v1::HandshakeRequest req;
  *req.mutable_fingerprint() = fingerprint_;
  for (TransportKind k : kinds) req.add_transports(ToProto(k));
  *req.mutable_device() = ToProto(options_.device);
  return req;
}

absl::Status StreamKvSender::Rendezvous(Peer* p) {
  ASSIGN_OR_RETURN(PeerCommFactory::Created created, p->factory->Create());
  v1::HandshakeRequest req = Handshake({p->kind});
  // Every attempt takes a new generation: after a reply lost on the way (the decode
  // worker joined, we never heard), the next attempt is still above the one it holds.
  v1::PeerRendezvous* r = req.mutable_peer();
  r->set_sender_id(sender_id_);
  r->set_generation(++p->generation);
  r->set_comm_id(created.id);
  v1::HandshakeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kHandshakeTimeout);
  RETURN_IF_ERROR(
      rpc::FromGrpc(p->stub->Handshake(&ctx, req, &resp),
                    StrCat("KV ", TransportName(p->kind), " rendezvous with ", p->address)));
  if (FromProto(resp.transport()) != p->kind) {
    return absl::FailedPreconditionError(StrCat("KV rendezvous with ", p->address, ": it chose ",
                                                v1::TransportKind_Name(resp.transport()),
                                                " instead of ", TransportName(p->kind)));
  }
  if (resp.peer_max_payload_bytes() < kv_->layout().LayerBytes()) {
    return absl::FailedPreconditionError(StrCat(
        "KV rendezvous with ", p->address, ": its staging holds ", resp.peer_max_payload_bytes(),
        " bytes, less than one block's layer (", kv_->layout().LayerBytes(), ")"));
  }
  p->comm = std::move(created.comm);
  p->retired.reset();  // the receiver replaced it with this one: its memory may go now
  p->seq = 0;
  p->epoch = resp.epoch();
  p->max_payload = std::min(staging_->bytes(), resp.peer_max_payload_bytes());
  if (p->built) ++rebuilds_;
  p->built = true;
  return absl::OkStatus();
}

void StreamKvSender::BreakComm(Peer* p, const absl::Status& why) {
  if (p->comm == nullptr) return;
  p->comm->Abort(why);
  // Kept until the next rendezvous has replaced it on the receiver, which may still
  // read it (a CUDA IPC ring lives in our memory).
  p->retired = std::move(p->comm);
}

void StreamKvSender::Complete(Transfer* t) {
  absl::Status status = t->error_;
  if (t->writer_ != nullptr) {
    t->writer_->WritesDone();
    grpc::Status s = t->writer_->Finish();
    // The receiver's status explains a broken stream, or a payload it never took (a
    // refused lease), better than our side of it.
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
