#include "common/transport/fake_peer_comm.h"

#include <condition_variable>
#include <cstring>
#include <deque>

#include "common/util/strings.h"

namespace tandem::transport {

struct FakePeerNetwork::Link {
  const std::atomic<bool>* stalled;
  std::mutex mu;
  std::condition_variable cv;
  struct Pending {
    const uint8_t* src;
    int64_t bytes;
    bool done = false;
  };
  std::deque<Pending*> sends ABSL_GUARDED_BY(mu);  // posted, not yet received
  std::vector<int64_t> pairings ABSL_GUARDED_BY(mu);
  // As with NCCL, a deadline or an Abort breaks only the end that hits it (the other
  // finds out at its own deadline); a mismatched pairing breaks both.
  absl::Status broken[2] ABSL_GUARDED_BY(mu);
  absl::Status mismatch ABSL_GUARDED_BY(mu);
  bool joined ABSL_GUARDED_BY(mu) = false;

  absl::Status Error(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return !broken[rank].ok() ? broken[rank] : mismatch;
  }
  void Break(int rank, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (broken[rank].ok()) broken[rank] = why;
    cv.notify_all();
  }
};

namespace {

using Link = FakePeerNetwork::Link;

uint8_t* Host(const kernels::Buffer& b, int64_t offset) {
  return static_cast<uint8_t*>(b.address()) + offset;
}

class FakeComm : public PeerComm {
 public:
  FakeComm(std::shared_ptr<Link> link, int rank) : link_(std::move(link)), rank_(rank) {}
  ~FakeComm() override { Abort(absl::CancelledError("peer comm: closed")); }

  absl::Status Send(const kernels::Buffer& src, int64_t offset, int64_t bytes,
                    PeerDeadline deadline) override {
    if (rank_ != 0) return absl::InternalError("fake peer comm: only rank 0 sends");
    if (absl::Status st = CheckPeerRange(src, offset, bytes); !st.ok()) return Fail(st);
    std::unique_lock<std::mutex> lock(link_->mu);
    if (absl::Status st = link_->Error(rank_); !st.ok()) return st;
    Link::Pending p{Host(src, offset), bytes};
    if (!link_->stalled->load()) {  // else it vanishes: nobody ever sees it
      link_->sends.push_back(&p);
      link_->cv.notify_all();
    }
    if (!link_->cv.wait_until(lock, deadline,
                              [&] { return p.done || !link_->Error(rank_).ok(); })) {
      link_->Break(rank_,
                   absl::DeadlineExceededError("peer comm: a send was not received in time"));
    }
    if (!p.done) {
      std::erase(link_->sends, &p);  // never read after this returns
      return link_->Error(rank_);
    }
    return absl::OkStatus();
  }

  absl::Status Recv(const kernels::Buffer& dst, int64_t offset, int64_t bytes,
                    PeerDeadline deadline) override {
    if (rank_ != 1) return absl::InternalError("fake peer comm: only rank 1 receives");
    if (absl::Status st = CheckPeerRange(dst, offset, bytes); !st.ok()) return Fail(st);
    std::unique_lock<std::mutex> lock(link_->mu);
    if (!link_->cv.wait_until(lock, deadline,
                              [&] { return !link_->sends.empty() || !link_->Error(rank_).ok(); })) {
      link_->Break(rank_, absl::DeadlineExceededError("peer comm: nothing to receive in time"));
    }
    if (absl::Status st = link_->Error(rank_); !st.ok()) return st;
    Link::Pending* p = link_->sends.front();
    if (p->bytes != bytes) {
      if (link_->mismatch.ok()) {
        link_->mismatch = absl::InternalError(
            StrCat("peer comm: a receive of ", bytes, " bytes paired with a send of ", p->bytes));
      }
      link_->cv.notify_all();
      return link_->mismatch;
    }
    link_->sends.pop_front();
    std::memcpy(Host(dst, offset), p->src, static_cast<size_t>(bytes));
    p->done = true;
    link_->pairings.push_back(bytes);
    link_->cv.notify_all();
    return absl::OkStatus();
  }

  void Abort(const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->Break(rank_, why);
  }

 private:
  absl::Status Fail(const absl::Status& st) {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->Break(rank_, st);
    return link_->Error(rank_);
  }

  std::shared_ptr<Link> link_;
  const int rank_;
};

}  // namespace

FakePeerNetwork::FakePeerNetwork() = default;
FakePeerNetwork::~FakePeerNetwork() = default;

absl::StatusOr<PeerCommFactory::Created> FakePeerNetwork::Create() {
  auto link = std::make_shared<Link>();
  link->stalled = &stalled_;
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = StrCat("fake:", next_id_++);
  links_[id] = link;
  return Created{id, std::make_unique<FakeComm>(link, 0)};
}

absl::StatusOr<std::unique_ptr<PeerComm>> FakePeerNetwork::Join(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(std::string(id));
  if (it == links_.end()) {
    return absl::InvalidArgumentError(StrCat("peer comm: unknown fake communicator '", id, "'"));
  }
  std::lock_guard<std::mutex> l(it->second->mu);
  if (it->second->joined) {
    return absl::InvalidArgumentError(StrCat("peer comm: '", id, "' already has two ranks"));
  }
  it->second->joined = true;
  return std::unique_ptr<PeerComm>(new FakeComm(it->second, 1));
}

std::map<std::string, std::vector<int64_t>> FakePeerNetwork::Pairings() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [id, link] : links_) {
    std::lock_guard<std::mutex> l(link->mu);
    out[id] = link->pairings;
  }
  return out;
}

int32_t FakePeerNetwork::communicators() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(links_.size());
}

}  // namespace tandem::transport
