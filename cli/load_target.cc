#include "cli/load_target.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/rpc/rpc_server.h"
#include "common/rpc/status_convert.h"
#include "common/util/strings.h"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Client-side timing of one streamed request.
class Timer {
 public:
  Timer() : t0_(Clock::now()) {}
  // An output chunk arrived.
  void Output() {
    const double now = Since(t0_);
    if (result.ttft == 0) {
      result.ttft = now;
    } else {
      result.itl.push_back(now - last_);
    }
    last_ = now;
    ++chunks;
  }
  void End() { result.e2e = Since(t0_); }

  RequestResult result;
  int64_t chunks = 0;

 private:
  Clock::time_point t0_;
  double last_ = 0;
};

class GrpcTarget : public LoadTarget {
 public:
  GrpcTarget(std::shared_ptr<grpc::Channel> channel, double timeout_s)
      : stub_(v1::Generation::NewStub(std::move(channel))), timeout_s_(timeout_s) {}

  RequestResult Send(const BenchRequest& r) override {
    v1::GenerateRequest req;
    if (!r.prompt_ids.empty()) {
      req.mutable_token_ids()->mutable_ids()->Assign(r.prompt_ids.begin(), r.prompt_ids.end());
    } else {
      req.set_text(r.prompt_text);
    }
    req.set_stream(true);
    req.mutable_sampling_params()->set_max_tokens(r.max_tokens);
    req.mutable_sampling_params()->set_temperature(0);
    req.mutable_sampling_params()->set_ignore_eos(r.ignore_eos);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1e3)));
    Timer t;
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      if (msg.has_chunk() && msg.chunk().token_ids_size() > 0) {
        t.Output();
      } else if (msg.has_complete()) {
        t.result.prompt_tokens = msg.complete().usage().prompt_tokens();
        t.result.output_tokens = msg.complete().usage().completion_tokens();
      }
    }
    const grpc::Status st = reader->Finish();
    t.End();
    t.result.ok = st.ok();
    if (!st.ok()) t.result.error = StrCat(rpc::CodeName(st.error_code()), ": ", st.error_message());
    return t.result;
  }

 private:
  std::unique_ptr<v1::Generation::Stub> stub_;
  const double timeout_s_;
};

class OpenAiTarget : public LoadTarget {
 public:
  explicit OpenAiTarget(const TargetOptions& o) : o_(o) {}

  RequestResult Send(const BenchRequest& r) override {
    const bool chat = o_.backend == "openai-chat";
    nlohmann::json body = {{"max_tokens", r.max_tokens},
                           {"temperature", 0},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}}};
    if (r.ignore_eos) body["ignore_eos"] = true;
    if (!o_.model.empty()) body["model"] = o_.model;
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", r.prompt_text}}};
    } else if (!r.prompt_ids.empty()) {
      body["prompt"] = r.prompt_ids;
    } else {
      body["prompt"] = r.prompt_text;
    }
    httplib::Client client(o_.endpoint);
    client.set_read_timeout(static_cast<time_t>(o_.timeout_s));
    client.set_write_timeout(60);
    client.enable_server_certificate_verification(false);
    httplib::Headers headers;
    if (!o_.api_key.empty()) headers.emplace("Authorization", StrCat("Bearer ", o_.api_key));

    Timer t;
    std::string pending, error_body;
    bool saw_usage = false;
    auto on_event = [&](std::string_view data) {
      if (data == "[DONE]") return;
      nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
      if (j.is_discarded()) return;
      if (j.contains("error")) {
        error_body = j["error"].dump();
        return;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        t.result.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        t.result.output_tokens = j["usage"].value("completion_tokens", 0);
        saw_usage = true;
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
      const nlohmann::json& c = j["choices"][0];
      std::string text;
      if (chat && c.contains("delta") && c["delta"].contains("content") &&
          c["delta"]["content"].is_string()) {
        text = c["delta"]["content"].get<std::string>();
      } else if (c.contains("text") && c["text"].is_string()) {
        text = c["text"].get<std::string>();
      }
      if (!text.empty()) t.Output();
    };
    httplib::Request req;
    req.method = "POST";
    req.path = chat ? "/v1/chat/completions" : "/v1/completions";
    req.headers = headers;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      pending.append(data, len);
      size_t end;
      while ((end = pending.find("\n\n")) != std::string::npos) {
        std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        size_t at = 0;
        while (at <= event.size()) {
          size_t nl = event.find('\n', at);
          if (nl == std::string::npos) nl = event.size();
          const std::string_view line(event.data() + at, nl - at);
          if (line.starts_with("data: ")) on_event(line.substr(6));
          at = nl + 1;
        }
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = client.send(req, res, err);
    t.End();
    if (!sent) {
      t.result.error = StrCat("HTTP: ", httplib::to_string(err));
    } else if (res.status != 200) {
      t.result.error = StrCat("HTTP ", res.status, ": ", pending);
    } else if (!error_body.empty()) {
      t.result.error = error_body;
    } else {
      t.result.ok = true;
      if (!saw_usage) {  // a server that reports no usage: count what arrived
        t.result.prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
        t.result.output_tokens = t.chunks;
      }
    }
    return t.result;
  }

 private:
  const TargetOptions o_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LoadTarget>> MakeLoadTarget(const TargetOptions& o) {
  if (o.backend == "grpc") {
    rpc::ChannelSecurity security;
    security.api_key = o.api_key;
    auto channel = rpc::MakeSecureChannel(o.endpoint, security);
    if (!channel.ok()) return channel.status();
    return std::unique_ptr<LoadTarget>(new GrpcTarget(*channel, o.timeout_s));
  }
  if (o.backend == "openai" || o.backend == "openai-chat") {
    if (!o.endpoint.starts_with("http://") && !o.endpoint.starts_with("https://")) {
      return absl::InvalidArgumentError(
          StrCat("--endpoint: an OpenAI target is a base URL like http://127.0.0.1:8000, got '",
                 o.endpoint, "'"));
    }
    return std::unique_ptr<LoadTarget>(new OpenAiTarget(o));
  }
  return absl::InvalidArgumentError(
      StrCat("--backend: '", o.backend, "' (one of grpc, openai, openai-chat)"));
}

}  // namespace tandem::cli
