#include "router/openai_front.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "absl/base/thread_annotations.h"
#include "common/model/token_rules.h"
#include "common/rpc/status_convert.h"
#include "common/tokenizer/chat_template.h"
#include "common/util/field_error.h"
#include "common/util/strings.h"
#include "common/util/utf8.h"

namespace tandem::router {

namespace {

using nlohmann::json;

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

http::Response ErrorResponse(const absl::Status& status) {
  const HttpError e = ErrorFor(status.code());
  return http::JsonError(e.status, std::string(status.message()), e.type, ParamOf(status));
}

http::Response JsonResponse(const json& j) {
  http::Response r;
  r.body = Dump(j);
  return r;
}

std::string_view OpenAiFinishReason(const Completion& done) {
  if (done.reason == engine::FinishReason::kLength) return "length";
  return done.tool_calls ? "tool_calls" : "stop";
}

// OpenAI's tool_calls entries; `first_index`: the choice's calls before these (streaming).
json ToolCallsJson(const std::vector<tokenizer::ToolCall>& calls, int first_index, bool stream) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream) c["index"] = first_index + static_cast<int>(i);
    out.push_back(std::move(c));
  }
  return out;
}

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
        choices_(req.choices.size()) {
    // echo: each prompt's text, decoded when it was sent as token ids.
    for (size_t p = 0; p < req.echo_texts.size(); ++p) {
      std::string text = req.echo_texts[p];
      const v1::GenerateRequest& g = req.choices.at(p * req.best_of);
      if (g.has_token_ids()) {
        const auto& ids = g.token_ids().ids();
        auto decoded = tokenizer.Decode(std::vector<int32_t>(ids.begin(), ids.end()));
        if (decoded.ok()) text = *std::move(decoded);
      }
      echo_.push_back(std::move(text));
    }
  }

  // Streaming: the chunks that open each choice (chat sends the role first; completions
  // with echo send the prompt).
  std::vector<json> Opening() const {
    std::vector<json> out;
    if (!chat_) {
      for (size_t i = 0; i < choices_.size() && !echo_.empty(); ++i) {
        out.push_back(Envelope({{"index", i},
                                {"text", echo_[i / req_.best_of]},
                                {"logprobs", nullptr},
                                {"finish_reason", nullptr}}));
      }
      return out;
    }
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
    for (const TokenLogprobs& t : chunk.logprobs) c.cumulative_logprob += t.logprob;
    if (chunk.text.empty() && lp.is_null() && chunk.tool_calls.empty()) return nullptr;
    json choice = {{"index", index}, {"logprobs", lp}, {"finish_reason", nullptr}};
    if (chat_) {
      choice["delta"] = json::object();
      if (!chunk.text.empty() || chunk.tool_calls.empty()) choice["delta"]["content"] = chunk.text;
      if (!chunk.tool_calls.empty()) {
        choice["delta"]["tool_calls"] =
            ToolCallsJson(chunk.tool_calls, static_cast<int>(c.tool_calls.size()), true);
      }
      c.tool_calls.insert(c.tool_calls.end(), chunk.tool_calls.begin(), chunk.tool_calls.end());
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
        {"finish_reason", OpenAiFinishReason(done)},
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

  // Non-streaming: the whole response. With best_of > n each prompt's n candidates of
  // highest total log-probability, in that order.
  json Whole() const {
    json choices = json::array();
    std::vector<size_t> shown;
    const size_t group = static_cast<size_t>(req_.best_of);
    for (size_t p = 0; p * group < choices_.size(); ++p) {
      std::vector<size_t> order(group);
      std::iota(order.begin(), order.end(), p * group);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return choices_[a].cumulative_logprob > choices_[b].cumulative_logprob;
      });
      order.resize(static_cast<size_t>(req_.n));
      shown.insert(shown.end(), order.begin(), order.end());
    }
    for (size_t k = 0; k < shown.size(); ++k) {
      const size_t i = shown[k];
      const Choice& c = choices_[i];
      json choice = {
          {"index", k},
          {"finish_reason", OpenAiFinishReason(c.done)},
          {"stop_reason", c.done.stop_reason.empty() ? json(nullptr) : json(c.done.stop_reason)},
          {"logprobs", c.logprobs.is_null() ? json(nullptr) : c.logprobs}};
      if (chat_) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        if (!c.tool_calls.empty()) {
          if (c.text.empty()) choice["message"]["content"] = nullptr;
          choice["message"]["tool_calls"] = ToolCallsJson(c.tool_calls, 0, false);
        }
      } else {
        choice["text"] = echo_.empty() ? c.text : StrCat(echo_[i / group], c.text);
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
    std::vector<tokenizer::ToolCall> tool_calls;
    int32_t tokens = 0;
    double cumulative_logprob = 0;  // of the sampled tokens (best_of ranks by it)
    json logprobs;                  // accumulated, for the non-streaming response
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
    const int n = req_.best_of;  // candidates per prompt, every one generated
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
  std::vector<std::string> echo_;  // with echo: each prompt's text
};

}  // namespace

// One HTTP request: its router requests (one per choice), the response being built and
// the exchange it is written to. The choices' sinks call in from router threads; each
// event is turned into JSON and queued on the exchange at once (the connection writes
// it on its own thread), so nothing polls and no thread waits for a token.
class HttpCall : public std::enable_shared_from_this<HttpCall> {
 public:
  HttpCall(OpenAiFront* front, Router* router, std::shared_ptr<http::Exchange> exchange,
           std::unique_ptr<OpenAiRequest> req, const tokenizer::Tokenizer& tokenizer,
           std::string model)
      : front_(front),
        router_(router),
        exchange_(std::move(exchange)),
        req_(std::move(req)),
        writer_(*req_, tokenizer, std::move(model)) {}

  const OpenAiRequest& request() const { return *req_; }

  // Before Start: one per choice, in order.
  void Add(std::shared_ptr<RouterRequest> r) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(std::move(r));
  }

  // Every choice is submitted: the answer begins (streaming: its headers and opening
  // chunks), and what arrived meanwhile is written.
  void Start() {
    std::vector<std::shared_ptr<RouterRequest>> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_ = true;
      if (req_->stream && !finished_) {
        exchange_->BeginStream(200, "text/event-stream",
                               {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
        for (const json& j : writer_.Opening()) Send(j);
      }
      for (Event& e : early_) Handle(std::move(e));
      early_.clear();
      if (finished_) cancel.swap(requests_);
    }
    Cancel(cancel);
    std::weak_ptr<HttpCall> weak = weak_from_this();
    exchange_->OnClientGone([weak] {
      if (auto call = weak.lock()) call->Abandon(absl::CancelledError("client disconnected"));
    });
  }

  // Ends the call with `status` (client gone, drain timeout): cancels every choice.
  void Abandon(const absl::Status& status) {
    std::vector<std::shared_ptr<RouterRequest>> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!finished_) Fail(status);
      cancel.swap(requests_);
    }
    Cancel(cancel);
  }

  // A submission failed: no answer was begun, so it is an HTTP error.
  void Refuse(const absl::Status& status) {
    std::vector<std::shared_ptr<RouterRequest>> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
      cancel.swap(requests_);
    }
    exchange_->Reply(ErrorResponse(status));
    front_->Forget(this);
    Cancel(cancel);
  }

  void OnEvent(int index, OutputChunk chunk, const Completion* done, const absl::Status* error) {
    std::vector<std::shared_ptr<RouterRequest>> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Event e{index, std::move(chunk), done != nullptr ? *done : Completion{},
              error != nullptr ? *error : absl::OkStatus(), done != nullptr};
      if (!started_) {
        early_.push_back(std::move(e));
        return;
      }
      Handle(std::move(e));
      if (finished_) cancel.swap(requests_);
    }
    Cancel(cancel);
  }

 private:
  struct Event {
    int index;
    OutputChunk chunk;
    Completion done;
    absl::Status error;
    bool is_done;
  };

  void Handle(Event e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (!e.error.ok()) return Fail(e.error);
    if (e.is_done) {
      json j = writer_.Done(e.index, e.done);
      if (req_->stream) Send(j);
      if (writer_.AllDone()) Succeed();
      return;
    }
    json j = writer_.Chunk(e.index, e.chunk);
    if (req_->stream && !j.is_null()) Send(j);
  }

  void Send(const json& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    exchange_->Write(StrCat("data: ", Dump(j), "\n\n"));
  }

  void Succeed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    if (req_->stream) {
      if (req_->include_usage) Send(writer_.UsageChunk());
      exchange_->Write("data: [DONE]\n\n");
      exchange_->End();
    } else {
      exchange_->Reply(JsonResponse(writer_.Whole()));
    }
    front_->Forget(this);
  }

  // A stream's error is its last event (the status line is long gone).
  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    if (req_->stream && started_) {
      exchange_->Write(StrCat("data: ", ErrorBody(status), "\n\n"));
      exchange_->Write("data: [DONE]\n\n");
      exchange_->End();
    } else {
      exchange_->Reply(ErrorResponse(status));
    }
    front_->Forget(this);
  }

  // Outside mu_: a request's cancel may end it, and its sink calls back in.
  void Cancel(const std::vector<std::shared_ptr<RouterRequest>>& requests) {
    for (const auto& r : requests) router_->Cancel(r);
  }

  OpenAiFront* const front_;
  Router* const router_;
  const std::shared_ptr<http::Exchange> exchange_;
  const std::unique_ptr<OpenAiRequest> req_;

  std::mutex mu_;
  ResponseWriter writer_ ABSL_GUARDED_BY(mu_);
  // Until finished (then they are cancelled — a no-op for those already ended — and
  // dropped, so a request and its call do not hold each other).
  std::vector<std::shared_ptr<RouterRequest>> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> early_ ABSL_GUARDED_BY(mu_);  // arrived before Start
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

class ChoiceSink : public ResponseSink {
 public:
  ChoiceSink(std::shared_ptr<HttpCall> call, int index) : call_(std::move(call)), index_(index) {}
  void OnChunk(OutputChunk chunk) override {
    call_->OnEvent(index_, std::move(chunk), nullptr, nullptr);
  }
  void OnComplete(const Completion& c) override { call_->OnEvent(index_, {}, &c, nullptr); }
  void OnError(const absl::Status& status) override {
    call_->OnEvent(index_, {}, nullptr, &status);
  }

 private:
  std::shared_ptr<HttpCall> call_;
  const int index_;
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
  using http::Exchange;
  server->Handle("POST", "/v1/completions", [this](std::shared_ptr<Exchange> ex) {
    Generate(OpenAiEndpoint::kCompletions, std::move(ex));
  });
  server->Handle("POST", "/v1/chat/completions", [this](std::shared_ptr<Exchange> ex) {
    Generate(OpenAiEndpoint::kChatCompletions, std::move(ex));
  });
  server->Handle("GET", "/v1/models",
                 [this](std::shared_ptr<Exchange> ex) { ex->Reply(Models()); });
  server->Handle("POST", "/tokenize",
                 [this](std::shared_ptr<Exchange> ex) { ex->Reply(Tokenize(ex->request().body)); });
  server->Handle("POST", "/detokenize", [this](std::shared_ptr<Exchange> ex) {
    ex->Reply(Detokenize(ex->request().body));
  });
  server->Handle("GET", "/version", [](std::shared_ptr<Exchange> ex) {
    ex->Reply(JsonResponse({{"version", TANDEM_VERSION}}));
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
    for (const auto& [ptr, call] : open_) calls.push_back(call);
  }
  for (const auto& call : calls) call->Abandon(absl::UnavailableError("server shutting down"));
}

void OpenAiFront::Forget(HttpCall* call) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(call);
}

void OpenAiFront::Generate(OpenAiEndpoint endpoint, std::shared_ptr<http::Exchange> ex) {
  auto parsed = ParseOpenAiRequest(endpoint, ex->request().body);
  if (!parsed.ok()) {
    router_->RecordRejected(parsed.status());
    return ex->Reply(ErrorResponse(parsed.status()));
  }
  auto req = std::make_unique<OpenAiRequest>(*std::move(parsed));
  if (!req->model.empty() && req->model != model_name_) {
    return ex->Reply(
        ErrorResponse(FieldError("model",
                                 StrCat("the model '", req->model,
                                        "' does not exist; this server serves '", model_name_, "'"),
                                 absl::StatusCode::kNotFound)));
  }
  // Validate every choice before any runs: one bad prompt fails the whole request.
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  std::vector<RequestSpec> specs;
  for (const v1::GenerateRequest& g : req->choices) {
    auto spec = validator_->Validate(g, pool_->MaxDecodeCapacity(),
                                     /*fill_context=*/chat && !req->max_tokens_set);
    if (!spec.ok()) {
      router_->RecordRejected(spec.status());
      return ex->Reply(ErrorResponse(spec.status()));
    }
    specs.push_back(*std::move(spec));
  }
  auto call = std::make_shared<HttpCall>(this, router_, std::move(ex), std::move(req), tokenizer_,
                                         model_name_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.emplace(call.get(), call);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto r = router_->Submit(std::move(specs[i]), std::nullopt,
                             std::make_shared<ChoiceSink>(call, static_cast<int>(i)));
    if (!r.ok()) {
      call->Refuse(r.status());
      return;
    }
    call->Add(*std::move(r));
  }
  call->Start();
}

http::Response OpenAiFront::Models() const {
  json model = {{"id", model_name_},   {"object", "model"},
                {"created", created_}, {"owned_by", "tandem"},
                {"root", model_name_}, {"max_model_len", config_.context_length}};
  return JsonResponse({{"object", "list"}, {"data", json::array({model})}});
}

http::Response OpenAiFront::Tokenize(std::string_view body) const {
  auto req = ParseTokenizeRequest(body);
  if (!req.ok()) return ErrorResponse(req.status());
  auto ids = validator_->Tokenize(*req);
  if (!ids.ok()) return ErrorResponse(ids.status());
  return JsonResponse(
      {{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", config_.context_length}});
}

http::Response OpenAiFront::Detokenize(std::string_view body_text) const {
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("tokens") ||
      !body["tokens"].is_array()) {
    return ErrorResponse(FieldError("tokens", "an array of token ids is required"));
  }
  std::vector<int32_t> ids;
  for (const json& t : body["tokens"]) {
    if (!t.is_number_integer()) {
      return ErrorResponse(FieldError("tokens", "an array of token ids is required"));
    }
    // One past int64 (sent unsigned) is out of range, echoed as sent.
    if (t.is_number_unsigned() &&
        t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return ErrorResponse(FieldError("tokens", StrCat("token id ", t.dump(), " is out of range")));
    }
    const int64_t id = t.get<int64_t>();
    if (absl::Status st = model::CheckTokenId("tokens", id, tokenizer_.vocab_size()); !st.ok()) {
      return ErrorResponse(st);
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  auto text = tokenizer_.Decode(ids);
  if (!text.ok()) return ErrorResponse(FieldError("tokens", std::string(text.status().message())));
  return JsonResponse({{"prompt", *text}});
}

}  // namespace tandem::router
