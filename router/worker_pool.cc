#include "router/worker_pool.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <tuple>

#include "common/rpc/address.h"
#include "common/util/strings.h"

namespace tandem::router {

int32_t PrefixIndex::CachedPrefix(std::span<const uint64_t> hashes) const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(hashes.size()) && pos_.contains(hashes[n])) ++n;
  return n;
}

int32_t PrefixIndex::FuturePrefix(std::span<const uint64_t> hashes) const {
  int32_t n = 0;
  while (n < static_cast<int32_t>(hashes.size()) &&
         (pos_.contains(hashes[n]) || in_flight_.contains(hashes[n]))) {
    ++n;
  }
  return n;
}

void PrefixIndex::AddInFlight(std::span<const uint64_t> hashes) {
  for (uint64_t h : hashes) ++in_flight_[h];
}

void PrefixIndex::EndInFlight(std::span<const uint64_t> hashes, bool cached) {
  for (uint64_t h : hashes) {
    auto it = in_flight_.find(h);
    if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
    if (cached) Insert(h);
  }
}

void PrefixIndex::Insert(uint64_t h) {
  auto it = pos_.find(h);
  if (it != pos_.end()) lru_.erase(it->second);
  pos_[h] = lru_.insert(lru_.end(), h);
  while (lru_.size() > capacity_) {
    pos_.erase(lru_.front());
    lru_.pop_front();
  }
}

namespace {
constexpr auto kPollTimeout = std::chrono::milliseconds(1000);
}  // namespace

namespace {

// host:port for each address `host` resolves to (IPv4 ones when there are any);
// empty when it does not resolve.
std::vector<std::string> Resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return {};
  std::vector<std::string> v4, v6;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof(buf));
      v4.push_back(StrCat(buf, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf,
                sizeof(buf));
      v6.push_back(StrCat("[", buf, "]:", port));
    }
  }
  freeaddrinfo(res);
  std::vector<std::string>& out = v4.empty() ? v6 : v4;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

WorkerPool::WorkerPool(const std::vector<std::string>& prefill,
                       const std::vector<std::string>& decode, WorkerClientFactory clients,
                       WorkerPoolOptions options)
    : clients_(std::move(clients)), options_(std::move(options)) {
  auto add = [&](WorkerRole role, const std::string& address) {
    Entry e{role, "", "", false};
    if (rpc::SplitHostPort(address, &e.host, &e.port)) {
      e.dns = !rpc::IsIpLiteral(e.host);
    }
    entries_.push_back(e);
    if (!e.dns) AddWorker(role, address, -1);
  };
  for (const auto& a : prefill) add(WorkerRole::kPrefill, a);
  for (const auto& a : decode) add(WorkerRole::kDecode, a);
  Discover();
}

void WorkerPool::AddWorker(WorkerRole role, const std::string& address, int source) {
  auto w = std::make_unique<Worker>();
  w->role = role;
  w->source = source;
  w->address = address;
  if (role == WorkerRole::kPrefill) {
    w->prefill = clients_.prefill(address);
  } else {
    w->decode = clients_.decode(address);
  }
  std::lock_guard<std::mutex> lock(mu_);
  workers_.push_back(std::move(w));
}

void WorkerPool::Discover() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_discovery_) return;
  next_discovery_ = now + options_.discovery_interval;
  for (int k = 0; k < static_cast<int>(entries_.size()); ++k) {
    const Entry& e = entries_[k];
    if (!e.dns) continue;
    const std::vector<std::string> found = Resolve(e.host, e.port);
    if (found.empty()) continue;  // a failed lookup keeps what we had
    const absl::flat_hash_set<std::string> live(found.begin(), found.end());
    absl::flat_hash_set<std::string> known;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& w : workers_) {
        if (w->source != k) continue;
        known.insert(w->address);
        const bool retire = !live.contains(w->address);
        // Retired: no new work. Revived: unhealthy until the next poll answers.
        if (retire || w->retired) w->healthy = false;
        w->retired = retire;
      }
    }
    for (const std::string& a : found) {
      if (!known.contains(a)) AddWorker(e.role, a, k);
    }
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The clients first (they wait for their calls), while what their callbacks touch lives.
  for (auto& w : workers_) {
    w->prefill.reset();
    w->decode.reset();
  }
}

void WorkerPool::Start(std::function<void(bool, const std::string&)> on_ready) {
  on_ready_ = std::move(on_ready);
  PollOnce();
  thread_ = std::thread([this] { Run(); });
}

void WorkerPool::Run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.poll_interval, [&] { return stop_; });
      if (stop_) return;
    }
    Discover();
    PollOnce();
  }
}

namespace {
// Why healthy `w` pairs with no healthy worker of the other role (naming the first one
// and the field that differs); empty when one shares its KV layout or none is healthy.
// The first mismatch met goes to *mismatch if that is empty.
std::string Unpaired(const Worker& w, const std::vector<std::unique_ptr<Worker>>& workers,
                     std::string* mismatch) {
  const bool is_prefill = w.role == WorkerRole::kPrefill;
  std::string first;
  for (const auto& o : workers) {
    if (o->role == w.role || !o->healthy) continue;
    const absl::Status st = is_prefill ? LayoutsPair(w.stats.kv_layout, o->stats.kv_layout)
                                       : LayoutsPair(o->stats.kv_layout, w.stats.kv_layout);
    if (st.ok()) return "";
    if (!first.empty()) continue;
    first = StrCat("pairs with no ", is_prefill ? "decode" : "prefill", " worker (", o->address,
                   ": ", st.message(), ")");
    if (mismatch->empty()) *mismatch = std::string(st.message());
  }
  return first;
}
}  // namespace

void WorkerPool::PollOnce() {
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (w->retired) continue;
    }
    WorkerClient* client = w->role == WorkerRole::kPrefill
                               ? static_cast<WorkerClient*>(w->prefill.get())
                               : static_cast<WorkerClient*>(w->decode.get());
    const absl::StatusOr<WorkerLoad> load = client->Poll(kPollTimeout);
    std::vector<UnsentRelease> unsent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      w->healthy = load.ok() && !w->retired;
      if (load.ok()) w->stats = *load;
      if (load.ok()) unsent.swap(w->unsent_releases);  // it answers: tell it now
    }
    for (UnsentRelease& r : unsent) SendRelease(w.get(), r);
  }
  bool changed = false, ready = false;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool healthy[2] = {false, false}, usable[2] = {false, false};
    std::string mismatch;  // the first met: why no pair matches, when none does
    for (auto& w : workers_) {
      w->unpaired.clear();
      if (!w->healthy) continue;
      const bool is_prefill = w->role == WorkerRole::kPrefill;
      healthy[is_prefill] = true;
      w->unpaired = Unpaired(*w, workers_, &mismatch);
      usable[is_prefill] = usable[is_prefill] || w->usable();
    }
    ready = usable[0] && usable[1];
    if (!ready) {
      why = !healthy[1]   ? "no prefill worker is healthy"
            : !healthy[0] ? "no decode worker is healthy"
                          : StrCat("no prefill worker pairs with a decode worker: ", mismatch);
    }
    changed = ready != ready_ || why != not_ready_reason_;
    ready_ = ready;
    not_ready_reason_ = why;
  }
  if (changed && on_ready_) on_ready_(ready, why);
}

std::vector<Worker*> WorkerPool::DecodeCandidates() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Worker*> out;
  for (auto& w : workers_) {
    if (w->role == WorkerRole::kDecode && w->usable()) out.push_back(w.get());
  }
  // Slow ones last; then free blocks as last reported, less a guess at what the router
  // reserved since; then the fewest sequences in flight.
  auto score = [](const Worker* w) {
    const int32_t available = w->stats.free_blocks + w->stats.cached_blocks;
    return std::make_tuple(w->slow, -(available - 4 * w->in_flight), w->in_flight);
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const Worker* a, const Worker* b) { return score(a) < score(b); });
  return out;
}

namespace {
// Prompt tokens and requests the router has in flight on a prefill worker.
int64_t Load(const Worker* w) { return w->sent_tokens + w->in_flight; }
}  // namespace

Worker* WorkerPool::PickPrefill(const std::vector<Worker*>& exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  Worker* best = nullptr;
  for (auto& w : workers_) {
    if (w->role != WorkerRole::kPrefill || !w->usable()) continue;
    if (std::find(exclude.begin(), exclude.end(), w.get()) != exclude.end()) continue;
    if (best == nullptr || Load(w.get()) < Load(best)) best = w.get();
  }
  return best;
}

absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(std::string_view name) {
  if (name == "round_robin") return RoutingPolicy::kRoundRobin;
  if (name == "least_loaded") return RoutingPolicy::kLeastLoaded;
  if (name == "cache_aware") return RoutingPolicy::kCacheAware;
  return absl::InvalidArgumentError(
      StrCat("--routing-policy: ", name, " (one of round_robin, least_loaded, cache_aware)"));
}

PrefillChoice WorkerPool::ChoosePrefill(std::span<const uint64_t> hashes, int64_t tokens,
                                        int64_t max_tokens, RoutingPolicy policy) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Worker*> open;
  for (auto& w : workers_) {
    if (w->role == WorkerRole::kPrefill && w->usable() &&
        (w->sent_tokens == 0 || w->sent_tokens < max_tokens)) {
      open.push_back(w.get());
    }
  }
  PrefillChoice c;
  if (open.empty()) return c;
  switch (policy) {
    case RoutingPolicy::kRoundRobin:
      c.worker = open[round_robin_++ % open.size()];
      break;
    case RoutingPolicy::kLeastLoaded:
      c.worker = *std::min_element(open.begin(), open.end(), [](const Worker* a, const Worker* b) {
        return Load(a) < Load(b);
      });
      break;
    case RoutingPolicy::kCacheAware: {
      // Estimated work before this prompt's first token there: what is in flight plus
      // the part of the prompt that is not (and will not soon be) cached.
      int64_t best_cost = 0;
      int32_t best_future = 0;
      for (Worker* w : open) {
        const int64_t bs = w->stats.block_size;
        const int32_t future = w->prefixes.FuturePrefix(hashes);
        const int64_t cost = Load(w) + tokens - bs * future;
        if (c.worker == nullptr || cost < best_cost) {
          c.worker = w;
          best_cost = cost;
          best_future = future;
        }
      }
      c.wait = best_future > c.worker->prefixes.CachedPrefix(hashes);
      break;
    }
  }
  return c;
}

int32_t WorkerPool::CachedBlocks(Worker* w, std::span<const uint64_t> hashes) {
  std::lock_guard<std::mutex> lock(mu_);
  return w->prefixes.CachedPrefix(hashes);
}

int32_t WorkerPool::PrefillBlockSize() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : workers_) {
    if (w->role == WorkerRole::kPrefill && w->stats.block_size > 0) return w->stats.block_size;
  }
  return 0;
}

void WorkerPool::Begin(Worker* w, int64_t tokens, std::span<const uint64_t> hashes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++w->in_flight;
  w->sent_tokens += tokens;
  if (hashes.empty()) return;
  if (w->stats.num_blocks > 0) w->prefixes.set_capacity(w->stats.num_blocks);
  w->prefixes.AddInFlight(hashes);
}

void WorkerPool::End(Worker* w, int64_t tokens, std::span<const uint64_t> hashes, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  --w->in_flight;
  w->sent_tokens -= tokens;
  w->prefixes.EndInFlight(hashes, ok);
}

void WorkerPool::Release(Worker* w, ReleaseArgs args) {
  SendRelease(w, {args, std::chrono::steady_clock::now()});
}

void WorkerPool::SendRelease(Worker* w, UnsentRelease r) {
  w->decode->Release(r.args, [this, w, r](absl::Status st) {
    const absl::StatusCode code = st.code();
    if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded) {
      return;  // told (or refused for good)
    }
    constexpr size_t kMaxUnsent = 4096;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || std::chrono::steady_clock::now() - r.first_tried > kReleaseRetry ||
        w->unsent_releases.size() >= kMaxUnsent) {
      return;  // its lease ends it
    }
    w->unsent_releases.push_back(r);
  });
}

void WorkerPool::MarkUnhealthy(Worker* w) {
  std::lock_guard<std::mutex> lock(mu_);
  w->healthy = false;
}

void WorkerPool::MarkSlow(Worker* w, bool slow) {
  std::lock_guard<std::mutex> lock(mu_);
  w->slow = slow;
}

bool WorkerPool::Ready() {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

std::string WorkerPool::NotReadyReason() {
  std::lock_guard<std::mutex> lock(mu_);
  return not_ready_reason_;
}

bool WorkerPool::Pairs(const Worker* prefill, const Worker* decode) {
  std::lock_guard<std::mutex> lock(mu_);
  return LayoutsPair(prefill->stats.kv_layout, decode->stats.kv_layout).ok();
}

bool WorkerPool::AnyHealthy(WorkerRole role) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : workers_)
    if (w->role == role && w->usable()) return true;
  return false;
}

int64_t WorkerPool::MaxDecodeCapacity() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t best = 0;
  for (auto& w : workers_) {
    if (w->role != WorkerRole::kDecode || w->retired) continue;
    best = std::max(best, int64_t{w->stats.num_blocks} * w->stats.block_size);
  }
  return best;
}

std::vector<WorkerSnapshot> WorkerPool::Snapshot(WorkerRole role) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerSnapshot> out;
  for (auto& w : workers_) {
    if (w->role != role || w->retired) continue;
    out.push_back({w->address, w->healthy, w->in_flight, w->stats, w->unpaired});
  }
  return out;
}

PoolKv SummarizePoolKv(const std::vector<WorkerSnapshot>& workers) {
  PoolKv kv;
  int64_t used = 0;
  for (const WorkerSnapshot& w : workers) {
    if (!w.healthy || w.load.num_blocks <= 0) continue;
    kv.num_blocks += w.load.num_blocks;
    used += w.load.num_blocks - w.load.free_blocks - w.load.cached_blocks;
    kv.block_size = w.load.block_size;
  }
  if (kv.num_blocks > 0) kv.usage = static_cast<double>(used) / static_cast<double>(kv.num_blocks);
  return kv;
}

}  // namespace tandem::router
