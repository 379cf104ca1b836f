#include "cli/client_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "common/rpc/rpc_server.h"
#include "common/rpc/status_convert.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::cli {

void AddClientCommand(CLI::App& app, ClientOptions* o) {
  CLI::App* cmd = app.add_subcommand("client", "Stream a completion from a running cluster");
  cmd->add_option("--endpoint,-e", o->endpoint, "Router address")->capture_default_str();
  AddRequestFlags(cmd, &o->request);
  cmd->add_option("--stop", o->stop, "Stop string (repeatable); not part of the output");
  cmd->add_option("--timeout", o->timeout_s, "Deadline for the whole request, seconds")
      ->capture_default_str();
  cmd->add_option("--api-key", o->security.api_key, "The router's --api-key")
      ->envname("TANDEM_API_KEY");
  cmd->add_option("--tls-ca", o->security.tls_ca, "PEM CA bundle: connect with TLS, verify by it");
  cmd->add_option("--tls-cert", o->security.tls_cert, "PEM client certificate (mTLS)");
  cmd->add_option("--tls-key", o->security.tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-server-name", o->security.tls_server_name,
                  "The name to verify in the server's certificate (default: the endpoint's host)");
}

int RunClient(const ClientOptions& o) {
  const RequestFlags& f = o.request;
  v1::GenerateRequest req;
  req.set_stream(true);
  const std::string text = ReadPrompt(f);
  if (f.chat) {
    if (!f.system.empty()) {
      v1::ChatMessage* m = req.mutable_chat()->add_messages();
      m->set_role("system");
      m->set_content(f.system);
    }
    v1::ChatMessage* m = req.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(text);
  } else {
    req.set_text(text);
  }
  const engine::SamplingParams sp = ToSamplingParams(f);
  v1::SamplingParams* p = req.mutable_sampling_params();
  p->set_max_tokens(sp.max_tokens);
  p->set_temperature(static_cast<float>(sp.temperature));
  p->set_top_k(sp.top_k);
  p->set_top_p(static_cast<float>(sp.top_p));
  p->set_min_p(static_cast<float>(sp.min_p));
  p->set_repetition_penalty(static_cast<float>(sp.repetition_penalty));
  p->set_presence_penalty(static_cast<float>(sp.presence_penalty));
  p->set_frequency_penalty(static_cast<float>(sp.frequency_penalty));
  if (sp.seed.has_value()) p->set_seed(*sp.seed);
  p->set_ignore_eos(sp.ignore_eos);
  for (const auto& s : o.stop) p->add_stop(s);

  auto channel = rpc::MakeSecureChannel(o.endpoint, o.security);
  if (!channel.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(channel.status().message()).c_str());
    return 1;
  }
  auto stub = v1::Generation::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  std::vector<int32_t> ids;
  std::string out;
  v1::GenerateComplete done;
  while (reader->Read(&msg)) {
    if (msg.has_chunk()) {
      ids.insert(ids.end(), msg.chunk().token_ids().begin(), msg.chunk().token_ids().end());
      out += msg.chunk().text();
      if (!f.json) {
        std::fwrite(msg.chunk().text().data(), 1, msg.chunk().text().size(), stdout);
        std::fflush(stdout);
      }
    } else if (msg.has_complete()) {
      done = msg.complete();
    }
  }
  const grpc::Status s = reader->Finish();
  if (!s.ok()) {
    if (!f.json && !out.empty()) std::printf("\n");
    std::fprintf(stderr, "error: %s: %s\n", rpc::CodeName(s.error_code()).c_str(),
                 s.error_message().c_str());
    return 1;
  }
  const char* reason = done.finish_reason() == v1::FINISH_REASON_STOP     ? "stop"
                       : done.finish_reason() == v1::FINISH_REASON_LENGTH ? "length"
                                                                          : "";
  const v1::Usage& u = done.usage();
  const v1::Timings& t = done.timings();
  if (f.json) {
    nlohmann::json j = {{"token_ids", ids},
                        {"text", out},
                        {"finish_reason", reason},
                        {"usage",
                         {{"prompt_tokens", u.prompt_tokens()},
                          {"completion_tokens", u.completion_tokens()},
                          {"total_tokens", u.prompt_tokens() + u.completion_tokens()}}},
                        {"timings",
                         {{"queue_ms", t.queue_ms()},
                          {"prefill_ms", t.prefill_ms()},
                          {"kv_transfer_ms", t.kv_transfer_ms()},
                          {"time_to_first_token_ms", t.time_to_first_token_ms()},
                          {"decode_ms", t.decode_ms()},
                          {"e2e_ms", t.e2e_ms()},
                          {"prefill_compute_ms", t.prefill_compute_ms()},
                          {"prefill_queue_ms", t.prefill_queue_ms()}}},
                        {"request_id", done.request_id()}};
    if (!done.stop_reason().empty()) j["stop_reason"] = done.stop_reason();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    if (isatty(fileno(stderr))) {
      std::fprintf(stderr, "[%d prompt tokens, %d generated, first token after %.0f ms, %s]\n",
                   u.prompt_tokens(), u.completion_tokens(), t.time_to_first_token_ms(), reason);
    }
  }
  return 0;
}

}  // namespace tandem::cli
