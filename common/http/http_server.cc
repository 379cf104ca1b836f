#include "common/http/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/metrics/metrics.h"
#include "common/util/bearer_token.h"
#include "common/util/strings.h"

namespace tandem::http {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Executor = net::any_io_executor;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr auto kLingerTimeout = std::chrono::seconds(2);  // draining before a close
constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kMaxBufferedWhileAnswering = 1 << 20;  // pipelined bytes kept for later
constexpr size_t kMaxUnsentBytes = 64 << 20;            // a stream whose client stopped reading
constexpr size_t kMaxHeaderBytes = 64 << 10;
constexpr int kMaxBuffersPerWrite = 64;

// Why a connection is answered 503 whatever it asks (the probes excepted).
enum class Rejection { kNone, kTotal, kPerClient };

std::string StatusLine(int status) {
  const auto r = bhttp::obsolete_reason(bhttp::int_to_status(status));
  std::string_view reason(r.data(), r.size());
  if (reason == "<unknown-status>") reason = "Unknown";
  return StrCat("HTTP/1.1 ", status, " ", reason, "\r\n");
}

std::string HexSize(size_t n) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%zx", n);
  return buf;
}

// Closes the connection after this answer (the handler asked for it).
bool AsksToClose(const Headers& headers) {
  Request probe;
  probe.headers = headers;
  return probe.Header("Connection") == "close";
}

}  // namespace

// What an exchange reaches its connection through, on the connection's own executor.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual Executor executor() = 0;
  virtual void Answer(uint64_t gen, Response response) = 0;
  virtual void Begin(uint64_t gen, int status, std::string content_type, Headers headers) = 0;
  virtual void Send(uint64_t gen, std::string data) = 0;
  virtual void End(uint64_t gen) = 0;
  virtual void SetGone(uint64_t gen, std::function<void()> callback) = 0;
  // Server stop: the client counts as gone, the connection closes now.
  virtual void Kill() = 0;
  // After MakeRoom gave its place away: closes the connection (gracefully) if it is still
  // idle; if its next request began meanwhile, that request is answered and the
  // connection closes after it.
  virtual void CloseIfIdle() = 0;
  virtual const std::string& client() const = 0;

  // When it began waiting, idle, for the next request of a kept-alive connection (steady
  // clock nanoseconds); 0 while it reads, answers or closes. Read by other threads to
  // pick a connection to make room with (HttpServer::Impl::MakeRoom).
  std::atomic<int64_t> idle_since{0};
  // Its place was given to another connection (MakeRoom): closing it counts nothing.
  std::atomic<bool> evicted{false};
};

namespace {

// Posting from other threads stops (the gate closes) once the server's threads are
// joined, so nothing is ever posted to an io_context that is being destroyed, and a
// session is released outside the server's threads only while the server exists.
struct Gate {
  std::mutex mu;
  bool open ABSL_GUARDED_BY(mu) = true;
};

class ExchangeImpl : public Exchange {
 public:
  ExchangeImpl(std::weak_ptr<SessionBase> session, uint64_t gen, std::shared_ptr<Gate> gate,
               Request request)
      : session_(std::move(session)),
        gen_(gen),
        gate_(std::move(gate)),
        request_(std::move(request)) {}

  const Request& request() const override { return request_; }
  void Reply(Response response) override {
    Post([gen = gen_, r = std::move(response)](SessionBase& s) mutable {
      s.Answer(gen, std::move(r));
    });
  }
  void BeginStream(int status, std::string content_type, Headers headers) override {
    Post([gen = gen_, status, c = std::move(content_type), h = std::move(headers)](
             SessionBase& s) mutable { s.Begin(gen, status, std::move(c), std::move(h)); });
  }
  void Write(std::string data) override {
    if (data.empty()) return;
    Post([gen = gen_, d = std::move(data)](SessionBase& s) mutable { s.Send(gen, std::move(d)); });
  }
  void End() override {
    Post([gen = gen_](SessionBase& s) { s.End(gen); });
  }
  void OnClientGone(std::function<void()> callback) override {
    Post([gen = gen_, cb = std::move(callback)](SessionBase& s) mutable {
      s.SetGone(gen, std::move(cb));
    });
  }

 private:
  template <typename F>
  void Post(F&& fn) {
    std::lock_guard<std::mutex> lock(gate_->mu);
    if (!gate_->open) return;
    std::shared_ptr<SessionBase> s = session_.lock();
    if (s == nullptr) return;
    net::post(s->executor(), [s, fn = std::forward<F>(fn)]() mutable { fn(*s); });
  }

  const std::weak_ptr<SessionBase> session_;
  const uint64_t gen_;  // which request of the connection this answers
  const std::shared_ptr<Gate> gate_;
  const Request request_;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(const HttpServerOptions& options, metrics::Metrics* metrics)
      : options_(options), metrics_(metrics), io_(options.threads) {}

  // Declared before io_: sessions destroyed with io_'s queued handlers may still refer
  // to the registry and counters.
  const HttpServerOptions options_;
  metrics::Metrics* const metrics_;
  std::atomic<bool> ready_{false};
  std::mutex not_ready_mu_;
  std::string not_ready_why_ ABSL_GUARDED_BY(not_ready_mu_);  // SetReady's reason
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> open_{0}, rejecting_{0}, rejected_total_{0};
  std::map<std::string, std::vector<std::pair<std::string, Handler>>, std::less<>> routes_;
  std::set<std::string, std::less<>> public_paths_;  // served without the API key
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  std::mutex sessions_mu_;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions_
      ABSL_GUARDED_BY(sessions_mu_);

  net::io_context io_;
  std::optional<ssl::context> ssl_;
  net::strand<net::io_context::executor_type> accept_strand_{io_.get_executor()};
  tcp::acceptor acceptor_{accept_strand_};
  net::steady_timer accept_pause_{accept_strand_};
  int port_ = 0;
  std::vector<std::thread> threads_;

  // Open connections per client address (served ones only).
  std::mutex clients_mu_;
  absl::flat_hash_map<std::string, int> clients_ ABSL_GUARDED_BY(clients_mu_);

  static bool IsProbe(const Request& req) {
    return req.path == "/health" || req.path == "/metrics" || req.path == "/ping";
  }

  bool Authorized(const Request& req) const {
    if (options_.api_key.empty() || IsProbe(req) || public_paths_.contains(req.path)) return true;
    return BearerTokenMatches(req.Header("Authorization"), options_.api_key);
  }

  // Counts a new connection from `client` unless it is past a bound: why, then. At a
  // bound, a kept-alive connection idle between requests (of that client, for its own
  // bound) is closed to make room first, so idle keep-alives never turn work away.
  Rejection Admit(const std::string& client) {
    std::lock_guard<std::mutex> lock(clients_mu_);
    const bool per_client = options_.max_connections_per_client > 0;
    auto it = per_client ? clients_.find(client) : clients_.end();
    if (it != clients_.end() && it->second >= options_.max_connections_per_client &&
        !MakeRoom(&client)) {
      return Rejection::kPerClient;
    }
    if (open_ >= options_.max_connections && !MakeRoom(nullptr)) return Rejection::kTotal;
    if (per_client) ++clients_[client];
    return Rejection::kNone;
  }
  // Closes the connection idle the longest (of `client`, if given) and gives its place
  // to the caller at once (it no longer counts, so the bounds hold however many
  // connections arrive while it closes); false if none is idle. clients_mu_ held.
  bool MakeRoom(const std::string* client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(clients_mu_) {
    std::shared_ptr<SessionBase> oldest;
    int64_t since = 0;
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      for (const auto& [raw, weak] : sessions_) {
        std::shared_ptr<SessionBase> s = weak.lock();
        if (s == nullptr) continue;
        const int64_t t = s->idle_since.load();
        if (t == 0 || (since != 0 && t >= since)) continue;
        if (client != nullptr && s->client() != *client) continue;
        oldest = std::move(s);
        since = t;
      }
      // Claimed (no other accept picks it); it closes on its own executor.
      if (oldest == nullptr || !oldest->idle_since.compare_exchange_strong(since, 0)) return false;
    }
    oldest->evicted = true;
    open_ -= 1;
    if (options_.max_connections_per_client > 0) {
      auto it = clients_.find(oldest->client());
      if (it != clients_.end() && --it->second == 0) clients_.erase(it);
    }
    net::post(oldest->executor(), [oldest] { oldest->CloseIfIdle(); });
    return true;
  }
  void Leave(const std::string& client) {
    if (options_.max_connections_per_client <= 0) return;
    std::lock_guard<std::mutex> lock(clients_mu_);
    auto it = clients_.find(client);
    if (it != clients_.end() && --it->second == 0) clients_.erase(it);
  }

  // The answer a request gets before (or instead of) its handler; nullopt: run `*handler`.
  std::optional<Response> Route(const Request& req, const Handler** handler) const {
    if (!Authorized(req)) {
      Response r = JsonError(401, "missing or invalid API key (Authorization: Bearer <key>)",
                             "authentication_error");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
    auto it = routes_.find(req.path);
    if (it == routes_.end()) {
      return JsonError(404, StrCat("no route for ", req.method, " ", req.path), "not_found_error");
    }
    std::string allow;
    for (const auto& [method, h] : it->second) {
      if (method == req.method) {
        *handler = &h;
        return std::nullopt;
      }
      allow += allow.empty() ? method : StrCat(", ", method);
    }
    Response r =
        JsonError(405, StrCat(req.method, " is not allowed on ", req.path, " (", allow, ")"),
                  "invalid_request_error");
    r.headers.emplace_back("Allow", allow);
    return r;
  }

  void Register(const std::shared_ptr<SessionBase>& s) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    sessions_.emplace(s.get(), s);
  }
  void Unregister(SessionBase* s) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    sessions_.erase(s);
  }
  size_t SessionCount() {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    return sessions_.size();
  }

  void Accept();
};

namespace {

// One connection: reads requests, runs their handlers, writes their answers. Every
// member is touched only on the connection's strand (its socket's executor).
template <class Stream>
class Session : public SessionBase {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  Session(HttpServer::Impl* server, Stream stream, Rejection rejection, std::string client)
      : server_(server),
        stream_(std::move(stream)),
        timer_(stream_.get_executor()),
        probe_timer_(stream_.get_executor()),
        rejection_(rejection),
        reject_(rejection != Rejection::kNone),
        client_(std::move(client)) {}

  Executor executor() override { return stream_.get_executor(); }

  void Start() {
    if constexpr (kTls) {
      phase_ = Phase::kHandshake;
      ArmTimer(kHandshakeTimeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = Self()](boost::system::error_code ec) {
                                if (ec) return self->CloseNow();
                                self->StartRequest();
                              });
    } else {
      StartRequest();
    }
  }

  void Answer(uint64_t gen, Response r) override {
    if (gen != gen_ || phase_ != Phase::kHandling || closed_) return;
    if (AsksToClose(r.headers)) keep_alive_ = false;
    std::string head = StatusLine(r.status);
    if (!r.body.empty() || !r.content_type.empty()) {
      head += StrCat("Content-Type: ", r.content_type, "\r\n");
    }
    head += StrCat("Content-Length: ", r.body.size(), "\r\n");
    AppendHeaders(r.headers, &head);
    Queue(std::move(head));
    if (!r.body.empty()) Queue(std::move(r.body));
    Answered();
  }

  void Begin(uint64_t gen, int status, std::string content_type, Headers headers) override {
    if (gen != gen_ || phase_ != Phase::kHandling || closed_) return;
    phase_ = Phase::kStreaming;
    event_stream_ = content_type.starts_with("text/event-stream");
    if (AsksToClose(headers)) keep_alive_ = false;
    chunked_ = !http10_;  // an HTTP/1.0 client reads to the close instead
    if (http10_) keep_alive_ = false;
    std::string head = StatusLine(status);
    head += StrCat("Content-Type: ", content_type, "\r\n");
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    AppendHeaders(headers, &head);
    Queue(std::move(head));
  }

  void Send(uint64_t gen, std::string data) override {
    if (gen != gen_ || phase_ != Phase::kStreaming || closed_) return;
    if (chunked_) {
      Queue(StrCat(HexSize(data.size()), "\r\n"));
      data += "\r\n";
    }
    Queue(std::move(data));
    if (unsent_ > kMaxUnsentBytes) {
      ClientGone();  // it stopped reading: as good as gone
      CloseNow();
    }
  }

  void End(uint64_t gen) override {
    if (gen != gen_ || phase_ != Phase::kStreaming || closed_) return;
    if (chunked_) Queue("0\r\n\r\n");
    Answered();
  }

  void SetGone(uint64_t gen, std::function<void()> callback) override {
    if (gen != gen_ || answered_) return;
    if (closed_) {
      callback();
      return;
    }
    gone_ = std::move(callback);
  }

  void Kill() override {
    ClientGone();
    CloseNow();
  }

  void CloseIfIdle() override {
    if (closed_) return;
    if (!awaiting_next_ || phase_ != Phase::kReading) {
      keep_alive_ = false;  // a request began after all: answered, then closed
      close_after_answer_ = true;
      return;
    }
    idle_since = 0;
    awaiting_next_ = false;
    GracefulClose();
  }

  const std::string& client() const override { return client_; }

 private:
  enum class Phase { kHandshake, kReading, kHandling, kStreaming, kClosing };

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  auto& Socket() {
    if constexpr (kTls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  void AppendHeaders(const Headers& headers, std::string* head) const {
    for (const auto& [k, v] : headers) {
      if (k == "Connection") continue;
      *head += StrCat(k, ": ", v, "\r\n");
    }
    *head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  }

  // Waiting for a request (on a kept-alive connection, bytes may already be buffered).
  void StartRequest() {
    phase_ = Phase::kReading;
    awaiting_next_ = gen_ > 0 && in_.size() == 0;
    if (awaiting_next_) {
      idle_since = std::chrono::steady_clock::now().time_since_epoch().count() | 1;
    }
    answered_ = false;
    continue_sent_ = false;
    chunked_ = false;
    event_stream_ = false;
    parser_.emplace();
    parser_->eager(true);
    parser_->body_limit(server_->options_.max_body_bytes);
    parser_->header_limit(kMaxHeaderBytes);
    ArmTimer(server_->options_.request_timeout);
    Parse();
  }

  void ReadMore() {
    if (reading_ || closed_) return;
    reading_ = true;
    // Into a buffer of its own: in_ may be consumed (and moved) while the read is pending.
    stream_.async_read_some(net::buffer(read_buf_),
                            [self = Self()](boost::system::error_code ec, size_t n) {
                              self->reading_ = false;
                              self->OnRead(ec, n);
                            });
  }

  void OnRead(boost::system::error_code ec, size_t n) {
    if (closed_) return;
    if (ec) {
      if (phase_ == Phase::kClosing && kTls && !tls_shutdown_ &&
          ec == net::error::operation_aborted) {
        return TlsShutdown();
      }
      if (ec == net::error::eof && HalfClosed()) return;
      ClientGone();
      return CloseNow();
    }
    in_.commit(net::buffer_copy(in_.prepare(n), net::buffer(read_buf_, n)));
    if (awaiting_next_ && n > 0) {  // the next request has begun: not idle
      awaiting_next_ = false;
      idle_since = 0;
    }
    switch (phase_) {
      case Phase::kReading:
        return Parse();
      case Phase::kHandling:
      case Phase::kStreaming:
        // Watching for a hang-up; what arrives meanwhile is the next request.
        if (in_.size() < kMaxBufferedWhileAnswering) ReadMore();
        return;
      case Phase::kClosing:
        in_.consume(in_.size());
        if (kTls && !tls_shutdown_) return TlsShutdown();
        return ReadMore();
      case Phase::kHandshake:
        return;
    }
  }

  void Parse() {
    boost::beast::error_code ec;
    while (in_.size() > 0 && !parser_->is_done()) {
      const size_t used = parser_->put(in_.data(), ec);
      in_.consume(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec || used == 0) break;
    }
    if (ec == bhttp::error::body_limit) {
      return Refuse(JsonError(413, "request body too large", "invalid_request_error"));
    }
    if (ec == bhttp::error::header_limit) {
      return Refuse(JsonError(431, "request header fields too large", "invalid_request_error"));
    }
    if (ec) {
      return Refuse(JsonError(400, StrCat("malformed HTTP request: ", ec.message()),
                              "invalid_request_error"));
    }
    if (!parser_->is_done()) {
      if (parser_->is_header_done() && !continue_sent_) {
        const auto& h = parser_->get();
        auto it = h.find(bhttp::field::expect);
        if (it != h.end() && boost::beast::iequals(it->value(), "100-continue")) {
          continue_sent_ = true;
          Queue("HTTP/1.1 100 Continue\r\n\r\n");
        }
      }
      return ReadMore();
    }
    Dispatch();
  }

  // Answers a request that cannot be read on, then closes.
  void Refuse(Response r) {
    phase_ = Phase::kHandling;
    keep_alive_ = false;
    Answer(gen_, std::move(r));
  }

  void Dispatch() {
    ++timer_gen_;
    timer_.cancel();
    ++gen_;
    phase_ = Phase::kHandling;
    hold_ = Self();
    bhttp::request<bhttp::string_body> msg = parser_->release();
    parser_.reset();
    keep_alive_ = msg.keep_alive() && !close_after_answer_;
    http10_ = msg.version() < 11;
    Request req;
    req.method = std::string(msg.method_string());
    std::string_view target(msg.target().data(), msg.target().size());
    req.path = std::string(target.substr(0, target.find('?')));
    for (const auto& f : msg) {
      req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    req.body = std::move(msg.body());

    const Handler* handler = nullptr;
    std::optional<Response> early;
    const bool probe = HttpServer::Impl::IsProbe(req);
    if (server_->stopping_ || (!probe && (reject_ || server_->draining_))) {
      if (reject_) ++server_->rejected_total_;
      keep_alive_ = false;
      std::string why = "server shutting down";
      if (rejection_ == Rejection::kTotal) {
        why = StrCat("server busy: ", server_->options_.max_connections,
                     " connections are open (--http-max-connections); retry later");
      } else if (rejection_ == Rejection::kPerClient) {
        why = StrCat("too many connections from ", client_, ": ",
                     server_->options_.max_connections_per_client,
                     " are open (--http-max-connections-per-client); retry later");
      } else if (server_->draining_) {
        why = "server draining: it takes no new requests (retry on another replica)";
      }
      early = JsonError(503, why, "service_unavailable");
      early->headers.emplace_back("Retry-After", "1");
    } else {
      if (reject_) keep_alive_ = false;  // a probe on a connection past a bound
      early = server_->Route(req, &handler);
    }
    if (early.has_value()) return Answer(gen_, *std::move(early));
    auto exchange =
        std::make_shared<ExchangeImpl>(weak_from_this(), gen_, server_->gate_, std::move(req));
    try {
      (*handler)(exchange);
    } catch (const std::exception& e) {
      exchange->Reply(JsonError(500, StrCat("internal error: ", e.what()), "internal_error"));
    }
    ReadMore();  // notices a hang-up while the answer is pending
  }

  // The answer is whole (queued); the connection goes on once it is written.
  void Answered() {
    answered_ = true;
    gone_ = nullptr;
    hold_.reset();
    if (writing_) {
      after_write_ = true;
    } else {
      AfterAnswer();
    }
  }

  void AfterAnswer() {
    if (keep_alive_ && !server_->stopping_) return StartRequest();
    GracefulClose();
  }

  // Half-closes, then drains what the client still sends until it closes too (closing
  // with unread bytes would make the kernel reset the connection under the answer).
  void GracefulClose() {
    phase_ = Phase::kClosing;
    ArmTimer(kLingerTimeout);
    boost::system::error_code ec;
    if constexpr (kTls) {
      // close_notify needs a read of its own: the watching read is called off first.
      if (reading_) {
        Socket().cancel(ec);
      } else {
        TlsShutdown();
      }
    } else {
      Socket().shutdown(tcp::socket::shutdown_send, ec);
      in_.consume(in_.size());
      ReadMore();
    }
  }

  void TlsShutdown() {
    if constexpr (kTls) {
      tls_shutdown_ = true;
      stream_.async_shutdown([self = Self()](boost::system::error_code) { self->CloseNow(); });
    }
  }

  // The client ended its sending side while its request is answered. It may have shut
  // down only that side (`nc -N`, a script's shutdown(SHUT_WR)) and still read, or have
  // closed outright: TCP tells the two apart only once bytes are sent, which the second
  // answers with a reset. So the answer goes on (the connection closes after it), and
  // bytes every client must take are sent at once: before a whole answer an interim
  // "103 Early Hints" (HTTP/1.1), inside an event stream a comment line; the socket is
  // then checked for the reset after 50 ms, 0.25, 1 and 4 s. A stream of another type, an
  // HTTP/1.0 request (no 1xx allowed) and TLS (no half-close) count as gone at once.
  // False when the client counts as gone.
  bool HalfClosed() {
    if constexpr (kTls) return false;
    if (answered_) return false;
    std::string probe;
    if (phase_ == Phase::kHandling && !http10_) {
      probe = "HTTP/1.1 103 Early Hints\r\n\r\n";
    } else if (phase_ == Phase::kStreaming && event_stream_) {
      probe = ": the client half-closed\n\n";
      if (chunked_) probe = StrCat(HexSize(probe.size()), "\r\n", probe, "\r\n");
    } else {
      return false;
    }
    keep_alive_ = false;
    Queue(std::move(probe));
    CheckPeerAfter(0);
    return true;
  }

  // Whether the peer has reset the connection (after bytes sent to a closed socket).
  bool PeerReset() {
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(Socket().native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return true;
    return info.tcpi_state == TCP_CLOSE;
  }

  void CheckPeerAfter(int step) {
    static constexpr std::chrono::milliseconds kAfter[] = {
        std::chrono::milliseconds(50), std::chrono::milliseconds(200),
        std::chrono::milliseconds(750), std::chrono::milliseconds(3000)};
    if (step >= static_cast<int>(std::size(kAfter))) return;
    probe_timer_.expires_after(kAfter[step]);
    probe_timer_.async_wait([self = Self(), step](boost::system::error_code ec) {
      if (ec || self->closed_ || self->answered_) return;
      if (self->PeerReset()) {
        self->ClientGone();
        return self->CloseNow();
      }
      self->CheckPeerAfter(step + 1);
    });
  }

  void ClientGone() {
    if (answered_ || gone_ == nullptr) return;
    auto callback = std::move(gone_);
    gone_ = nullptr;
    callback();
  }

  void CloseNow() {
    if (closed_) return;
    closed_ = true;
    idle_since = 0;
    ++timer_gen_;
    timer_.cancel();
    probe_timer_.cancel();
    boost::system::error_code ec;
    Socket().close(ec);
    out_.clear();
    unsent_ = 0;
    hold_.reset();
    if (reject_) {
      server_->rejecting_ -= 1;
    } else if (!evicted) {  // an evicted one's place went to another (MakeRoom)
      server_->open_ -= 1;
      server_->Leave(client_);
    }
    server_->Unregister(this);
  }

  void ArmTimer(std::chrono::steady_clock::duration d) {
    const uint64_t tg = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = Self(), tg](boost::system::error_code ec) {
      if (ec || tg != self->timer_gen_) return;
      self->CloseNow();
    });
  }

  void Queue(std::string bytes) {
    if (closed_ || bytes.empty()) return;
    unsent_ += bytes.size();
    out_.push_back(std::move(bytes));
    Flush();
  }

  void Flush() {
    if (writing_ || out_.empty() || closed_) return;
    writing_ = true;
    buffers_.clear();
    for (size_t i = 0; i < out_.size() && i < kMaxBuffersPerWrite; ++i) {
      buffers_.emplace_back(out_[i].data(), out_[i].size());
    }
    net::async_write(stream_, buffers_, [self = Self()](boost::system::error_code ec, size_t) {
      self->OnWritten(ec);
    });
  }

  void OnWritten(boost::system::error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      ClientGone();
      return CloseNow();
    }
    for (size_t i = 0; i < buffers_.size(); ++i) {
      unsent_ -= out_.front().size();
      out_.pop_front();
    }
    buffers_.clear();
    if (!out_.empty()) return Flush();
    if (after_write_) {
      after_write_ = false;
      AfterAnswer();
    }
  }

  HttpServer::Impl* const server_;
  Stream stream_;
  net::steady_timer timer_;
  net::steady_timer probe_timer_;  // HalfClosed's checks for a reset
  const Rejection rejection_;      // past a connection bound: requests but probes get 503
  const bool reject_;
  const std::string client_;  // the peer's address

  Phase phase_ = Phase::kReading;
  uint64_t gen_ = 0;              // requests dispatched on this connection
  uint64_t timer_gen_ = 0;        // the armed timer's; a stale expiry is ignored
  boost::beast::flat_buffer in_;  // received, not yet parsed
  std::array<char, kReadChunk> read_buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool reading_ = false, writing_ = false, closed_ = false, tls_shutdown_ = false;
  bool keep_alive_ = true, http10_ = false, chunked_ = false, continue_sent_ = false;
  bool event_stream_ = false;  // the stream is text/event-stream
  bool answered_ = false, after_write_ = false;
  bool awaiting_next_ = false;       // kept alive after an answer, no byte of the next request yet
  bool close_after_answer_ = false;  // CloseIfIdle found a request begun: no keep-alive after it
  std::function<void()> gone_;
  std::shared_ptr<SessionBase> hold_;  // alive while an answer is pending
  std::deque<std::string> out_;
  std::vector<net::const_buffer> buffers_;  // the write in flight: out_'s first ones
  size_t unsent_ = 0;
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor_.async_accept(net::make_strand(io_), [this](boost::system::error_code ec,
                                                       tcp::socket socket) {
    if (!acceptor_.is_open() || stopping_) return;
    if (ec) {
      // Out of descriptors (or similar): wait a moment rather than spin.
      accept_pause_.expires_after(std::chrono::milliseconds(50));
      accept_pause_.async_wait([this](boost::system::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // tokens are small writes
    std::string client = socket.remote_endpoint(ignored).address().to_string();
    const Rejection rejection = Admit(client);
    (rejection != Rejection::kNone ? rejecting_ : open_) += 1;
    if (ssl_.has_value()) {
      auto t = std::make_shared<Session<ssl::stream<tcp::socket>>>(
          this, ssl::stream<tcp::socket>(std::move(socket), *ssl_), rejection, std::move(client));
      Register(t);
      net::dispatch(t->executor(), [t] { t->Start(); });
    } else {
      auto t = std::make_shared<Session<tcp::socket>>(this, std::move(socket), rejection,
                                                      std::move(client));
      Register(t);
      net::dispatch(t->executor(), [t] { t->Start(); });
    }
    if (rejecting_ >= options_.max_connections) {
      // Even the 503s are past their bound: the backlog holds the rest for a moment.
      accept_pause_.expires_after(std::chrono::milliseconds(20));
      accept_pause_.async_wait([this](boost::system::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    Accept();
  });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpServerOptions& options,
                                                               metrics::Metrics* metrics) {
  if (auto st = options.tls.CheckServer(); !st.ok()) return st;
  if (options.threads < 1) return absl::InvalidArgumentError("--http-threads: at least 1");
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("--http-max-connections: at least 1");
  }
  if (options.max_connections_per_client < 0) {
    return absl::InvalidArgumentError("--http-max-connections-per-client: 0 (no bound) or more");
  }
  if (options.request_timeout < std::chrono::milliseconds(1)) {
    return absl::InvalidArgumentError("request timeout: at least 1 ms");
  }
  auto impl = std::make_unique<Impl>(options, metrics);
  if (options.tls.enabled()) {
    std::string pem[3];
    const std::pair<std::string_view, const std::string*> files[3] = {
        {"--tls-cert", &options.tls.cert},
        {"--tls-key", &options.tls.key},
        {"--tls-client-ca", &options.tls.client_ca}};
    for (int i = 0; i < 3; ++i) {
      if (files[i].second->empty()) continue;
      auto read = ReadPemFile(files[i].first, *files[i].second);
      if (!read.ok()) return read.status();
      pem[i] = *std::move(read);
    }
    ssl::context ctx(ssl::context::tls_server);
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                    ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    ctx.use_certificate_chain(net::buffer(pem[0]), ec);
    if (!ec) ctx.use_private_key(net::buffer(pem[1]), ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(StrCat("--tls-cert/--tls-key: cannot load ",
                                               options.tls.cert, " and ", options.tls.key, ": ",
                                               ec.message()));
    }
    if (!pem[2].empty()) {
      ctx.add_certificate_authority(net::buffer(pem[2]), ec);
      if (ec) {
        return absl::InvalidArgumentError(
            StrCat("--tls-client-ca: cannot load ", options.tls.client_ca, ": ", ec.message()));
      }
      ctx.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    impl->ssl_.emplace(std::move(ctx));
  }
  auto server = std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
  Impl* s = server->impl_.get();
  server->Handle("GET", "/health", [s](std::shared_ptr<Exchange> ex) {
    Response ok;
    ok.body = "{\"status\":\"ok\"}";
    if (s->ready_) return ex->Reply(ok);
    std::string message = "not ready";
    {
      std::lock_guard<std::mutex> lock(s->not_ready_mu_);
      if (!s->draining_ && !s->not_ready_why_.empty()) message += ": " + s->not_ready_why_;
    }
    ex->Reply(JsonError(503, message, "service_unavailable"));
  });
  server->Handle("GET", "/ping", [s](std::shared_ptr<Exchange> ex) {
    Response r;
    r.status = s->ready_ ? 200 : 503;
    r.content_type.clear();
    ex->Reply(std::move(r));
  });
  server->Handle("GET", "/metrics", [s](std::shared_ptr<Exchange> ex) {
    if (s->metrics_ == nullptr) {
      return ex->Reply(JsonError(404, "this process exports no metrics", "not_found_error"));
    }
    Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = s->metrics_->Scrape();
    ex->Reply(std::move(r));
  });
  return server;
}

void HttpServer::Handle(std::string_view method, std::string_view path, Handler handler) {
  auto& methods = impl_->routes_[std::string(path)];
  methods.emplace_back(std::string(method), std::move(handler));
}

void HttpServer::HandlePublic(std::string_view method, std::string_view path, Handler handler) {
  impl_->public_paths_.emplace(path);
  Handle(method, path, std::move(handler));
}

absl::Status HttpServer::Listen() {
  Impl& s = *impl_;
  boost::system::error_code ec;
  const auto address = net::ip::make_address(s.options_.host, ec);
  const auto fail = [&](std::string_view what) {
    return absl::UnavailableError(StrCat("--http-port: cannot listen on ", s.options_.host, ":",
                                         s.options_.port, " (", what, ")"));
  };
  if (ec) return fail(ec.message());
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(s.options_.port));
  s.acceptor_.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor_.bind(endpoint, ec);
  if (!ec) s.acceptor_.listen(4096, ec);  // a burst of connects waits here, not reset
  if (ec) return fail(ec.message());
  s.port_ = s.acceptor_.local_endpoint().port();
  net::dispatch(s.accept_strand_, [&s] { s.Accept(); });
  for (int i = 0; i < s.options_.threads; ++i) {
    s.threads_.emplace_back([&s] { s.io_.run(); });
  }
  return absl::OkStatus();
}

int HttpServer::port() const { return impl_->port_; }
bool HttpServer::tls() const { return impl_->ssl_.has_value(); }
void HttpServer::SetReady(bool ready, std::string why) {
  {
    std::lock_guard<std::mutex> lock(impl_->not_ready_mu_);
    impl_->not_ready_why_ = std::move(why);
  }
  impl_->ready_ = ready && !impl_->draining_;
}

void HttpServer::Drain() {
  impl_->draining_ = true;
  impl_->ready_ = false;
}

HttpServerStats HttpServer::Stats() const {
  HttpServerStats stats{.open_connections = impl_->open_, .rejected_total = impl_->rejected_total_};
  std::lock_guard<std::mutex> lock(impl_->sessions_mu_);
  for (const auto& [raw, weak] : impl_->sessions_) {
    std::shared_ptr<SessionBase> s = weak.lock();
    if (s != nullptr && s->idle_since.load() != 0) ++stats.idle_connections;
  }
  return stats;
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.stopping_.exchange(true)) return;
  s.ready_ = false;
  net::post(s.accept_strand_, [&s] {
    boost::system::error_code ec;
    s.acceptor_.close(ec);
    s.accept_pause_.cancel();
  });
  std::vector<std::shared_ptr<SessionBase>> live;
  {
    std::lock_guard<std::mutex> lock(s.sessions_mu_);
    for (auto& [ptr, weak] : s.sessions_) {
      if (auto p = weak.lock()) live.push_back(std::move(p));
    }
  }
  for (auto& p : live) net::post(p->executor(), [p] { p->Kill(); });
  live.clear();
  if (!s.threads_.empty()) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (s.SessionCount() > 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  s.io_.stop();
  for (auto& t : s.threads_) t.join();
  s.threads_.clear();
  std::lock_guard<std::mutex> lock(s.gate_->mu);
  s.gate_->open = false;
}

}  // namespace tandem::http
