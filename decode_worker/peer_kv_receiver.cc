#include "decode_worker/peer_kv_receiver.h"

#include <atomic>
#include <condition_variable>
#include <optional>
#include <thread>
#include <vector>

#include "common/util/strings.h"

namespace tandem::decode {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

struct PeerKvReceiver::Link {
  transport::TransportKind kind;
  uint64_t sender_id = 0;
  uint64_t generation = 0;
  std::unique_ptr<transport::PeerComm> comm;
  // Guarded by the receiver's mu_.
  std::map<uint64_t, PeerPayload> pending;  // by seq
  uint64_t next_seq = 0;
  std::optional<Clock::time_point> gap_since;  // pending holds later seqs but not next_seq
  absl::Status broken;
  Clock::time_point last_used = Clock::now();  // the last Join or Submit
  bool receiving = false;                      // a payload is out of `pending`, in Recv
  bool stop = false;
  std::atomic<bool> cancelled{false};  // broken or stopping: calls off a staging wait
  std::condition_variable cv;
  std::thread thread;
};

PeerKvReceiver::PeerKvReceiver(DecodeWorker* worker, transport::StagingPool* staging,
                               PeerKvReceiverOptions options)
    : worker_(worker), staging_(staging), options_(options) {}

PeerKvReceiver::~PeerKvReceiver() {
  std::vector<std::unique_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, link] : links_) {
      Break(link.get(), absl::CancelledError("decode worker stopping"));
      link->stop = true;
      link->cancelled = true;
      links.push_back(std::move(link));
    }
    links_.clear();
  }
  for (auto& link : links) link->thread.join();
}

bool PeerKvReceiver::Supports(transport::TransportKind kind) const {
  switch (kind) {
    case transport::TransportKind::kNccl:
      return options_.nccl != nullptr;
    case transport::TransportKind::kCudaIpc:
      return options_.cuda_ipc != nullptr;
    case transport::TransportKind::kHost:
      return false;
  }
  return false;
}

absl::Status PeerKvReceiver::MakeRoom(std::vector<std::unique_ptr<Link>>* pruned) {
  if (links_.size() < kMaxSenders) return absl::OkStatus();
  // Forget the broken communicators, then the idle ones used least recently (a
  // prefill worker that went away leaves its link idle for good).
  auto forget = [&](decltype(links_)::iterator l) {
    l->second->stop = true;
    l->second->cancelled = true;
    l->second->cv.notify_all();
    pruned->push_back(std::move(l->second));
    links_.erase(l);
  };
  for (auto l = links_.begin(); l != links_.end();) {
    auto next = std::next(l);
    if (!l->second->broken.ok()) forget(l);
    l = next;
  }
  while (links_.size() >= kMaxSenders) {
    auto oldest = links_.end();
    for (auto l = links_.begin(); l != links_.end(); ++l) {
      if (l->second->pending.empty() && !l->second->receiving &&
          (oldest == links_.end() || l->second->last_used < oldest->second->last_used)) {
        oldest = l;
      }
    }
    if (oldest == links_.end()) {
      return absl::ResourceExhaustedError(StrCat(
          "peer: ", kMaxSenders, " prefill workers already hold communicators with this one"));
    }
    Break(oldest->second.get(), absl::AbortedError("peer: idle communicator evicted"));
    forget(oldest);
  }
  return absl::OkStatus();
}

absl::Status PeerKvReceiver::Join(transport::TransportKind kind, uint64_t sender_id,
                                  uint64_t generation, std::string_view comm_id) {
  if (!Supports(kind)) {
    return absl::FailedPreconditionError(
        StrCat("peer: this decode worker has no ", transport::TransportName(kind), " transport"));
  }
  std::vector<std::unique_ptr<Link>> pruned;  // joined outside the lock
  absl::Status admitted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(sender_id);
    if (it != links_.end() && generation <= it->second->generation) {
      return absl::FailedPreconditionError(
          StrCat("peer.generation: ", generation, " is not above the current ",
                 it->second->generation, " of sender ", sender_id));
    }
    if (it == links_.end()) admitted = MakeRoom(&pruned);
  }
  for (auto& l : pruned) l->thread.join();
  pruned.clear();
  if (!admitted.ok()) return admitted;
  transport::PeerCommFactory* factory =
      kind == transport::TransportKind::kNccl ? options_.nccl : options_.cuda_ipc;
  auto comm = factory->Join(comm_id);
  if (!comm.ok()) return comm.status();
  auto link = std::make_unique<Link>();
  link->kind = kind;
  link->sender_id = sender_id;
  link->generation = generation;
  link->comm = *std::move(comm);
  std::unique_ptr<Link> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(sender_id);
    if (it != links_.end() && generation <= it->second->generation) {  // a concurrent Join won
      admitted = absl::FailedPreconditionError(
          StrCat("peer.generation: ", generation, " is not above the current ",
                 it->second->generation, " of sender ", sender_id));
    } else if (it == links_.end()) {
      admitted = MakeRoom(&pruned);  // concurrent rendezvous may have taken the room
    } else {
      Link* replaced = it->second.get();
      Break(replaced,
            absl::AbortedError(StrCat("peer: communicator replaced by generation ", generation)));
      replaced->stop = true;
      replaced->cancelled = true;
      old = std::move(it->second);
      links_.erase(it);
      ++stats_.rebuilt;
    }
    if (admitted.ok()) {
      Link* l = link.get();
      link->thread = std::thread([this, l] { Run(l); });
      links_[sender_id] = std::move(link);
    }
  }
  for (auto& l : pruned) l->thread.join();
  if (old != nullptr) old->thread.join();
  if (!admitted.ok()) link->comm->Abort(admitted);
  return admitted;
}

absl::Status PeerKvReceiver::Submit(uint64_t sender_id, uint64_t generation, const PeerPayload& p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto refuse = [&](const absl::Status& st) {
    Fail(p, st);
    return st;
  };
  auto it = links_.find(sender_id);
  if (it == links_.end() || it->second->generation != generation) {
    return refuse(absl::FailedPreconditionError(StrCat(
        "peer: no communicator from sender ", sender_id, " at generation ", generation,
        it == links_.end() ? std::string() : StrCat(" (it is at ", it->second->generation, ")"))));
  }
  Link* link = it->second.get();
  if (!link->broken.ok()) return refuse(link->broken);
  absl::Status bad;
  if (p.seq < link->next_seq || link->pending.contains(p.seq)) {
    bad = absl::DataLossError(StrCat("peer.seq: payload ", p.seq, " out of order (",
                                     p.seq < link->next_seq ? "already received" : "named twice",
                                     "; expected ", link->next_seq, ")"));
  } else if (p.bytes <= 0 || p.bytes > staging_->bytes()) {
    bad = absl::InvalidArgumentError(StrCat("peer: a payload of ", p.bytes,
                                            " bytes does not fit the staging buffers of ",
                                            staging_->bytes()));
  }
  if (!bad.ok()) {
    // The pairing with the sender's Sends is lost: nothing more on this communicator.
    Break(link, bad);
    return refuse(bad);
  }
  link->pending.emplace(p.seq, p);
  link->last_used = Clock::now();
  if (p.seq != link->next_seq && !link->gap_since) link->gap_since = Clock::now();
  link->cv.notify_all();
  return absl::OkStatus();
}

void PeerKvReceiver::Run(Link* link) {
  for (;;) {
    PeerPayload p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (link->stop || !link->broken.ok()) return;
        if (link->pending.contains(link->next_seq)) break;
        if (!link->gap_since) {
          link->cv.wait(lock);
          continue;
        }
        const auto deadline = *link->gap_since + options_.timeout;
        if (Clock::now() >= deadline) {
          Break(link,
                absl::DataLossError(StrCat("peer.seq: payload ", link->next_seq,
                                           " was never announced (", link->pending.begin()->first,
                                           " was, ", options_.timeout.count(), " ms ago)")));
          return;
        }
        link->cv.wait_until(lock, deadline);
      }
      auto node = link->pending.extract(link->next_seq++);
      p = node.mapped();
      link->receiving = true;
      link->gap_since.reset();
      if (!link->pending.empty() && !link->pending.contains(link->next_seq)) {
        link->gap_since = Clock::now();
      }
    }
    const auto deadline = Clock::now() + options_.timeout;
    absl::Status st;
    auto slot = staging_->Acquire(deadline, &link->cancelled);
    if (slot.ok()) {
      st = link->comm->Recv(**slot, 0, p.bytes, deadline);
    } else {
      st = slot.status();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      link->receiving = false;
    }
    if (!st.ok()) {
      const absl::Status why(
          st.code(), StrCat("KV payload ", p.seq, " over ", transport::TransportName(link->kind),
                            ": ", st.message()));
      std::lock_guard<std::mutex> lock(mu_);
      Fail(p, why);
      Break(link, why);
      return;
    }
    if (p.accepted) {
      worker_->PeerKvArrived(p.lease_id, p.layer, p.first_block, p.num_blocks,
                             std::shared_ptr<const kernels::Buffer>(*std::move(slot)));
    }
  }
}

void PeerKvReceiver::Break(Link* link, const absl::Status& why) {
  link->cancelled = true;
  if (link->broken.ok()) {
    link->broken = why;
    ++stats_.broken;
    link->comm->Abort(why);
  }
  for (auto& [seq, p] : link->pending) Fail(p, why);
  link->pending.clear();
  link->cv.notify_all();
}

void PeerKvReceiver::Fail(const PeerPayload& p, const absl::Status& why) {
  if (p.accepted) worker_->PeerKvFailed(p.lease_id, why);
}

PeerKvReceiver::Stats PeerKvReceiver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.senders = static_cast<int32_t>(links_.size());
  return s;
}

}  // namespace tandem::decode
