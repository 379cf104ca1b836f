#include "router/openai_front.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>

#include "common/http/peer_socket.h"
#include "common/model/token_rules.h"
#include "common/rpc/status_convert.h"
#include "common/tokenizer/chat_template.h"
#include "common/util/field_error.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::router {

namespace {

using nlohmann::json;
constexpr auto kPollInterval = std::chrono::milliseconds(20);

// JSON text; bytes that are not UTF-8 (a token that is part of a character) become U+FFFD.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomHex() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

struct HttpError {
  int status;
  std::string_view type;
};

HttpError ErrorFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return {400, "invalid_request_error"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "authentication_error"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "permission_error"};
    case absl::StatusCode::kNotFound:
      return {404, "not_found_error"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "rate_limit_error"};
    case absl::StatusCode::kCancelled:
      return {499, "cancelled"};
    case absl::StatusCode::kUnavailable:
      return {503, "service_unavailable"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "timeout"};
    default:
      return {500, "internal_error"};
  }
}

// The parameter a FieldError names, in OpenAI's terms ("" for other statuses).
std::string ParamOf(const absl::Status& status) {
  std::optional<std::string> named = ErrorField(status);
  if (!named.has_value()) return {};
  std::string field = *std::move(named);
  if (field == "text" || field == "token_ids" || field == "input") return "prompt";
  if (field.starts_with("chat.messages")) return field.substr(5);
  if (field == "chat") return "messages";
  return field;
}

// The OpenAI error body of `status` (the body of an HTTP error, or a stream's last event).
std::string ErrorBody(const absl::Status& status) {
  const HttpError e = ErrorFor(status.code());
  return http::JsonErrorBody(e.status, std::string(status.message()), e.type, ParamOf(status));
}

void SetError(httplib::Response& res, const absl::Status& status) {
  const HttpError e = ErrorFor(status.code());
  http::SetJsonError(res, e.status, std::string(status.message()), e.type, ParamOf(status));
}

std::string_view OpenAiFinishReason(engine::FinishReason r) {
  return r == engine::FinishReason::kLength ? "length" : "stop";
}

// Where a request's output goes: events for the HTTP thread, from router threads.
struct Event {
  enum Kind { kChunk, kDone, kError } kind;
  int index;
  OutputChunk chunk;
  Completion done;
  absl::Status error;
};

}  // namespace

// One HTTP request: its router requests (one per choice) and their events.
class HttpCall {
 public:
  std::vector<std::shared_ptr<RouterRequest>> requests;

  void Push(Event e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Events since the last call; waits up to `timeout` for the first.
  std::deque<Event> Take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    std::deque<Event> out;
    out.swap(events_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

namespace {

class ChoiceSink : public ResponseSink {
 public:
  ChoiceSink(std::shared_ptr<HttpCall> call, int index) : call_(std::move(call)), index_(index) {}
  void OnChunk(OutputChunk chunk) override {
    call_->Push({Event::kChunk, index_, std::move(chunk), {}, {}});
  }
  void OnComplete(const Completion& c) override { call_->Push({Event::kDone, index_, {}, c, {}}); }
  void OnError(const absl::Status& status) override {
    call_->Push({Event::kError, index_, {}, {}, status});
  }

 private:
  std::shared_ptr<HttpCall> call_;
  const int index_;
};

// Builds the response JSON of one HTTP request.
class ResponseWriter {
 public:
  ResponseWriter(const OpenAiRequest& req, const tokenizer::Tokenizer& tokenizer, std::string model)
      : req_(req),
        tokenizer_(tokenizer),
        chat_(req.endpoint == OpenAiEndpoint::kChatCompletions),
        id_(StrCat(chat_ ? "chatcmpl-" : "cmpl-", RandomHex(), RandomHex())),
        model_(std::move(model)),
        created_(UnixNow()),
        choices_(req.choices.size()) {}

  // Streaming: the chunks that open each choice (chat sends the role first).
  std::vector<json> Opening() const {
    std::vector<json> out;
    if (!chat_) return out;
    for (size_t i = 0; i < choices_.size(); ++i) {
      json choice = {{"index", i},
                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
      out.push_back(Envelope(std::move(choice)));
    }
    return out;
  }

  // Streaming: a chunk of choice `index`, or null when it carries nothing to send.
  json Chunk(int index, const OutputChunk& chunk) {
    Choice& c = choices_[index];
    json lp = Logprobs(chunk, &c);
    c.text += chunk.text;
    c.tokens += static_cast<int32_t>(chunk.token_ids.size());
    if (chunk.text.empty() && lp.is_null()) return nullptr;
    json choice = {{"index", index}, {"logprobs", lp}, {"finish_reason", nullptr}};
    if (chat_) {
      choice["delta"] = {{"content", chunk.text}};
    } else {
      choice["text"] = chunk.text;
    }
    return Envelope(std::move(choice));
  }

  // Choice `index` finished; streaming: the chunk that says so.
  json Done(int index, const Completion& done) {
    Choice& c = choices_[index];
    c.done = done;
    c.finished = true;
    json choice = {
        {"index", index},
        {"logprobs", nullptr},
        {"finish_reason", OpenAiFinishReason(done.reason)},
        {"stop_reason", done.stop_reason.empty() ? json(nullptr) : json(done.stop_reason)}};
    if (chat_) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    return Envelope(std::move(choice));
  }

  // Streaming, with include_usage: the last chunk, no choices.
  json UsageChunk() const {
    json j = Envelope(nullptr);
    j["choices"] = json::array();
    j["usage"] = Usage();
    return j;
  }

  // Non-streaming: the whole response.
  json Whole() const {
    json choices = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& c = choices_[i];
      json choice = {
          {"index", i},
          {"finish_reason", OpenAiFinishReason(c.done.reason)},
          {"stop_reason", c.done.stop_reason.empty() ? json(nullptr) : json(c.done.stop_reason)},
          {"logprobs", c.logprobs.is_null() ? json(nullptr) : c.logprobs}};
      if (chat_) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      } else {
        choice["text"] = c.text;
      }
      choices.push_back(std::move(choice));
    }
    return {{"id", id_},
            {"object", chat_ ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", std::move(choices)},
            {"usage", Usage()}};
  }

  bool AllDone() const {
    for (const Choice& c : choices_) {
      if (!c.finished) return false;
    }
    return true;
  }

 private:
  struct Choice {
    std::string text;
    int32_t tokens = 0;
    json logprobs;  // accumulated, for the non-streaming response
    Completion done;
    bool finished = false;
    int64_t text_offset = 0;
  };

  json Envelope(json choice) const {
    json j = {{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_}};
    j["choices"] = choice.is_null() ? json::array() : json::array({std::move(choice)});
    if (req_.include_usage) j["usage"] = nullptr;
    return j;
  }

  static json Bytes(const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  }

  // The chunk's log-probabilities in the endpoint's format (null if none), also
  // appended to the choice's running total.
  json Logprobs(const OutputChunk& chunk, Choice* c) {
    if (req_.logprobs < 0 || chunk.logprobs.empty()) return nullptr;
    if (chat_) {
      json content = json::array();
      for (const TokenLogprobs& t : chunk.logprobs) {
        const std::string& tok = tokenizer_.TokenBytes(t.token);
        json top = json::array();
        for (const auto& [id, lp] : t.top) {
          const std::string& s = tokenizer_.TokenBytes(id);
          top.push_back({{"token", s}, {"logprob", lp}, {"bytes", Bytes(s)}});
        }
        content.push_back(
            {{"token", tok}, {"logprob", t.logprob}, {"bytes", Bytes(tok)}, {"top_logprobs", top}});
      }
      if (c->logprobs.is_null()) c->logprobs = {{"content", json::array()}};
      for (const json& e : content) c->logprobs["content"].push_back(e);
      return {{"content", std::move(content)}};
    }
    json out = {{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
    for (const TokenLogprobs& t : chunk.logprobs) {
      const std::string& tok = tokenizer_.TokenBytes(t.token);
      out["tokens"].push_back(tok);
      out["token_logprobs"].push_back(t.logprob);
      json top = json::object();
      for (const auto& [id, lp] : t.top) top[tokenizer_.TokenBytes(id)] = lp;
      out["top_logprobs"].push_back(std::move(top));
      out["text_offset"].push_back(c->text_offset);
      c->text_offset += static_cast<int64_t>(tok.size());
    }
    if (c->logprobs.is_null()) {
      c->logprobs = out;
    } else {
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (const json& e : out[k]) c->logprobs[k].push_back(e);
      }
    }
    return out;
  }

  // Prompt tokens count once per prompt (its n choices share it), completions per choice.
  json Usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    const int n = req_.n;
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Completion& d = choices_[i].done;
      completion += d.completion_tokens;
      if (i % n == 0) {
        prompt += d.prompt_tokens;
        int32_t best = 0;
        for (size_t k = i; k < i + n && k < choices_.size(); ++k) {
          best = std::max(best, choices_[k].done.cached_tokens);
        }
        cached += best;
      }
    }
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  const OpenAiRequest& req_;
  const tokenizer::Tokenizer& tokenizer_;
  const bool chat_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  std::vector<Choice> choices_;
};

}  // namespace

OpenAiFront::OpenAiFront(Router* router, WorkerPool* pool, const RequestValidator* validator,
                         const tokenizer::Tokenizer& tokenizer, const model::ModelConfig& config,
                         std::string served_model_name)
    : router_(router),
      pool_(pool),
      validator_(validator),
      tokenizer_(tokenizer),
      config_(config),
      model_name_(std::move(served_model_name)),
      created_(UnixNow()) {}

OpenAiFront::~OpenAiFront() { CancelAll(); }

void OpenAiFront::Mount(http::HttpServer* server) {
  httplib::Server& s = server->server();
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(OpenAiEndpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(OpenAiEndpoint::kChatCompletions, req, res);
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { Models(res); });
  s.Post("/tokenize",
         [this](const httplib::Request& req, httplib::Response& res) { Tokenize(req, res); });
  s.Post("/detokenize",
         [this](const httplib::Request& req, httplib::Response& res) { Detokenize(req, res); });
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump({{"version", TANDEM_VERSION}}), "application/json");
  });
}

bool OpenAiFront::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.empty();
}

void OpenAiFront::CancelAll() {
  std::vector<std::shared_ptr<HttpCall>> calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls.assign(open_.begin(), open_.end());
  }
  for (const auto& call : calls) {
    for (const auto& r : call->requests) router_->Cancel(r);
  }
}

void OpenAiFront::Forget(const std::shared_ptr<HttpCall>& call) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(call);
}

void OpenAiFront::Generate(OpenAiEndpoint endpoint, const httplib::Request& http_req,
                           httplib::Response& res) {
  auto parsed = ParseOpenAiRequest(endpoint, http_req.body);
  if (!parsed.ok()) {
    router_->RecordRejected(parsed.status());
    SetError(res, parsed.status());
    return;
  }
  auto req = std::make_shared<OpenAiRequest>(*std::move(parsed));
  if (!req->model.empty() && req->model != model_name_) {
    SetError(res, FieldError("model",
                             StrCat("the model '", req->model,
                                    "' does not exist; this server serves '", model_name_, "'"),
                             absl::StatusCode::kNotFound));
    return;
  }
  // Validate every choice before any runs: one bad prompt fails the whole request.
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  std::vector<RequestSpec> specs;
  for (const v1::GenerateRequest& g : req->choices) {
    auto spec = validator_->Validate(g, pool_->MaxDecodeCapacity(),
                                     /*fill_context=*/chat && !req->max_tokens_set);
    if (!spec.ok()) {
      router_->RecordRejected(spec.status());
      SetError(res, spec.status());
      return;
    }
    specs.push_back(*std::move(spec));
  }
  auto call = std::make_shared<HttpCall>();
  for (size_t i = 0; i < specs.size(); ++i) {
    auto r = router_->Submit(std::move(specs[i]), std::nullopt,
                             std::make_shared<ChoiceSink>(call, static_cast<int>(i)));
    if (!r.ok()) {
      for (const auto& started : call->requests) router_->Cancel(started);
      SetError(res, r.status());
      return;
    }
    call->requests.push_back(*std::move(r));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.insert(call);
  }
  auto peer =
      http::PeerSocket::Find(http_req.remote_addr, http_req.remote_port, http_req.local_port);
  auto writer = std::make_shared<ResponseWriter>(*req, tokenizer_, model_name_);
  auto cancel_all = [this, call] {
    for (const auto& r : call->requests) router_->Cancel(r);
  };

  if (!req->stream) {
    absl::Status error;
    while (!writer->AllDone() && error.ok()) {
      for (Event& e : call->Take(kPollInterval)) {
        if (e.kind == Event::kChunk) writer->Chunk(e.index, e.chunk);
        if (e.kind == Event::kDone) writer->Done(e.index, e.done);
        if (e.kind == Event::kError && error.ok()) error = e.error;
      }
      if (peer.has_value() && peer->Gone()) error = absl::CancelledError("client disconnected");
    }
    if (!error.ok()) cancel_all();
    Forget(call);
    if (!error.ok()) {
      SetError(res, error);
    } else {
      res.set_content(Dump(writer->Whole()), "application/json");
    }
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", [this, req, call, writer, peer, cancel_all](
                                                            size_t, httplib::DataSink& sink) {
    auto send_text = [&](const std::string& data) {
      const std::string s = StrCat("data: ", data, "\n\n");
      return sink.write(s.data(), s.size());
    };
    auto send = [&](const json& j) { return send_text(Dump(j)); };
    bool ok = true;
    for (const json& j : writer->Opening()) ok = ok && send(j);
    absl::Status error;
    while (ok && error.ok() && !writer->AllDone()) {
      for (Event& e : call->Take(kPollInterval)) {
        if (!ok) break;
        if (e.kind == Event::kChunk) {
          json j = writer->Chunk(e.index, e.chunk);
          if (!j.is_null()) ok = send(j);
        } else if (e.kind == Event::kDone) {
          ok = send(writer->Done(e.index, e.done));
        } else if (error.ok()) {
          error = e.error;
        }
      }
      if (peer.has_value() && peer->Gone()) ok = false;
    }
    if (!ok || !error.ok()) cancel_all();
    if (ok && !error.ok()) ok = send_text(ErrorBody(error));
    if (ok && error.ok() && req->include_usage) ok = send(writer->UsageChunk());
    if (ok) {
      static constexpr std::string_view kDone = "data: [DONE]\n\n";
      sink.write(kDone.data(), kDone.size());
    }
    Forget(call);
    sink.done();
    return true;
  });
}

void OpenAiFront::Models(httplib::Response& res) {
  json model = {{"id", model_name_},   {"object", "model"},
                {"created", created_}, {"owned_by", "tandem"},
                {"root", model_name_}, {"max_model_len", config_.context_length}};
  res.set_content(Dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
}

void OpenAiFront::Tokenize(const httplib::Request& http_req, httplib::Response& res) {
  auto req = ParseTokenizeRequest(http_req.body);
  if (!req.ok()) {
    SetError(res, req.status());
    return;
  }
  auto ids = validator_->Tokenize(*req);
  if (!ids.ok()) {
    SetError(res, ids.status());
    return;
  }
  res.set_content(
      Dump({{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", config_.context_length}}),
      "application/json");
}

void OpenAiFront::Detokenize(const httplib::Request& http_req, httplib::Response& res) {
  json body = json::parse(http_req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("tokens") ||
      !body["tokens"].is_array()) {
    SetError(res, FieldError("tokens", "an array of token ids is required"));
    return;
  }
  std::vector<int32_t> ids;
  for (const json& t : body["tokens"]) {
    if (!t.is_number_integer()) {
      SetError(res, FieldError("tokens", "an array of token ids is required"));
      return;
    }
    const int64_t id = t.get<int64_t>();
    if (absl::Status st = model::CheckTokenId("tokens", id, tokenizer_.vocab_size()); !st.ok()) {
      SetError(res, st);
      return;
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  auto text = tokenizer_.Decode(ids);
  if (!text.ok()) {
    SetError(res, FieldError("tokens", std::string(text.status().message())));
    return;
  }
  res.set_content(Dump({{"prompt", *text}}), "application/json");
}

}  // namespace tandem::router
