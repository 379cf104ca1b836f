// Exchange: one HTTP request and the handle its handler answers through.
//
// A handler (HttpServer::Handle) receives the exchange on a server thread and may answer
// at once or later from any thread: either one whole Reply, or BeginStream → Write … →
// End (chunked transfer encoding; server-sent events use this). Nothing blocks: each
// call queues bytes for the connection, which writes them in order on its own thread.
// The first answer wins; calls after the answer is complete, after the client has gone
// or after the server stopped do nothing. A handler that never answers leaves the
// connection open until the client leaves, so every path must answer.
//
// OnClientGone: the callback runs once, on a server thread, if the client disconnects
// (or the server stops) before the answer is complete — the moment to cancel the work
// behind the request. It never runs after the answer is complete.
//
// Thread-safe; the exchange may outlive its connection (then every call is a no-op).
#ifndef TANDEM_COMMON_HTTP_EXCHANGE_H_
#define TANDEM_COMMON_HTTP_EXCHANGE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST", …
  std::string path;    // the target without its query string
  Headers headers;     // as received (names compared case-insensitively by Header)
  std::string body;
  // The first header named `name` (ASCII case-insensitive), or "" when absent.
  std::string_view Header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;  // more headers (Retry-After, WWW-Authenticate, …)
};

// An OpenAI-shaped error: {"error": {"message", "type", "param" (null when empty), "code"}}.
std::string JsonErrorBody(int http_status, std::string_view message, std::string_view type,
                          std::string_view param = {});
// A response carrying JsonErrorBody.
Response JsonError(int http_status, std::string_view message, std::string_view type,
                   std::string_view param = {});

class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual const Request& request() const = 0;

  // The whole answer.
  virtual void Reply(Response response) = 0;
  // A streamed answer: the status line and headers now, the body as it comes.
  virtual void BeginStream(int status, std::string content_type, Headers headers = {}) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;

  virtual void OnClientGone(std::function<void()> callback) = 0;
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

}  // namespace tandem::http

#endif  // TANDEM_COMMON_HTTP_EXCHANGE_H_
