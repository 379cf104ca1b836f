#include "common/http/http_server.h"

#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "common/http/connection_pool.h"
#include "common/http/peer_socket.h"
#include "common/metrics/metrics.h"
#include "common/util/bearer_token.h"
#include "common/util/strings.h"

namespace tandem::http {

std::string JsonErrorBody(int http_status, std::string_view message, std::string_view type,
                          std::string_view param) {
  nlohmann::json err = {{"message", message},
                        {"type", type},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", http_status}};
  return nlohmann::json{{"error", err}}.dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

void SetJsonError(httplib::Response& res, int http_status, std::string_view message,
                  std::string_view type, std::string_view param) {
  res.status = http_status;
  res.set_content(JsonErrorBody(http_status, message, type, param), "application/json");
}

namespace {

// httplib (a shared library here) listens with a backlog of 5: a burst of connects
// overflows it and the kernel resets connections the client believes open. Listening
// again on the bound socket raises the backlog (Linux keeps the socket, takes the new
// length). The socket is found among our descriptors by its port.
void RaiseListenBacklog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = 0;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) listen(fd, 4096);
  }
  closedir(dir);
}

// TLS files must exist and be PEM (httplib would only say "not valid").
absl::Status CheckTlsFiles(const TlsFiles& tls) {
  for (const auto& [flag, path] :
       {std::pair<std::string_view, const std::string*>{"--tls-cert", &tls.cert},
        {"--tls-key", &tls.key},
        {"--tls-client-ca", &tls.client_ca}}) {
    if (path->empty()) continue;
    if (auto pem = ReadPemFile(flag, *path); !pem.ok()) return pem.status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const HttpServerOptions& options,
                                                               metrics::Metrics* metrics) {
  if (auto st = options.tls.CheckServer(); !st.ok()) return st;
  std::unique_ptr<httplib::Server> server;
  if (options.tls.enabled()) {
    if (auto st = CheckTlsFiles(options.tls); !st.ok()) return st;
    auto ssl = std::make_unique<httplib::SSLServer>(
        options.tls.cert.c_str(), options.tls.key.c_str(),
        options.tls.client_ca.empty() ? nullptr : options.tls.client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          StrCat("--tls-cert/--tls-key: cannot load ", options.tls.cert, " and ", options.tls.key));
    }
    server = std::move(ssl);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  return std::unique_ptr<HttpServer>(new HttpServer(options, std::move(server), metrics));
}

HttpServer::HttpServer(const HttpServerOptions& options, std::unique_ptr<httplib::Server> server,
                       metrics::Metrics* metrics)
    : options_(options), server_(std::move(server)), metrics_(metrics) {
  const int threads = options_.threads;
  // As many connections may wait for a thread as are served; the rest are answered 503.
  server_->new_task_queue = [threads] { return new ConnectionPool(threads, threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_keep_alive_timeout(30);
  // Streamed tokens are small writes: send each at once rather than waiting for the
  // previous one's acknowledgement (Nagle).
  server_->set_tcp_nodelay(true);
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (ConnectionPool::Rejecting()) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");
      const std::string body = JsonErrorBody(
          503,
          StrCat("server busy: ", options_.threads,
                 " connections are being served and as many are waiting (--http-threads); "
                 "retry later"),
          "service_unavailable");
      // httplib keeps even a Connection: close response's connection open for the next
      // request; ending its reading side once the body is out closes it, so a rejecting
      // thread is never held by a client that does not hang up.
      auto peer = PeerSocket::Find(req.remote_addr, req.remote_port, req.local_port);
      res.set_content_provider(body.size(), "application/json",
                               [body, peer](size_t offset, size_t length, httplib::DataSink& sink) {
                                 sink.write(body.data() + offset, length);
                                 if (offset + length >= body.size() && peer.has_value())
                                   peer->StopReading();
                                 return true;
                               });
      return httplib::Server::HandlerResponse::Handled;
    }
    if (Authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    SetJsonError(res, 401, "missing or invalid API key (Authorization: Bearer <key>)",
                 "authentication_error");
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready_) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    } else {
      SetJsonError(res, 503, "not ready", "service_unavailable");
    }
  });
  server_->Get("/ping", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_ ? 200 : 503;
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (metrics_ == nullptr) {
      SetJsonError(res, 404, "this process exports no metrics", "not_found_error");
      return;
    }
    res.set_content(metrics_->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return;  // a handler wrote its error
    if (res.status == 404) {
      SetJsonError(res, 404, StrCat("no route for ", req.method, " ", req.path), "not_found_error");
    } else if (res.status == 413) {
      SetJsonError(res, 413, "request body too large", "invalid_request_error");
    } else if (res.status >= 400) {
      SetJsonError(res, res.status, StrCat("HTTP ", res.status), "invalid_request_error");
    }
  });
}

HttpServer::~HttpServer() { Stop(); }

bool HttpServer::Authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  if (req.path == "/health" || req.path == "/metrics" || req.path == "/ping") return true;
  return BearerTokenMatches(req.get_header_value("Authorization"), options_.api_key);
}

absl::Status HttpServer::Listen() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) port_ = 0;
  } else if (server_->bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(
        StrCat("--http-port: cannot listen on ", options_.host, ":", options_.port));
  }
  RaiseListenBacklog(port_);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  ready_ = false;
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace tandem::http
