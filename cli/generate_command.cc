#include "cli/generate_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cli/exit_status.h"
#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/model/gguf_file.h"
#include "common/rpc/worker_main.h"
#include "common/tokenizer/chat_template.h"
#include "common/tokenizer/detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

void AddGenerateCommand(CLI::App& app, GenerateOptions* o) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (single process)");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  AddRequestFlags(cmd, &o->request);
  cmd->add_option("--threads,-t", o->threads, "Compute threads (default: all cores)");
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes, "KV cache memory budget")
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size, "Tokens per KV block")->capture_default_str();
  rpc::AddDeviceFlags(*cmd, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype, &o->cpu_math);
}

int RunGenerate(const GenerateOptions& o) {
  const auto t_start = Clock::now();
  const bool tty = isatty(fileno(stderr));
  engine::LoadOptions lo;
  lo.residence = engine::ResidenceFor(o.device);
  lo.progress = [&](int done, int total) {
    if (tty && !o.request.json) {
      const int width = 30, filled = done * width / total;
      std::fprintf(stderr, "\rloading [%.*s%*s] %d/%d layers", filled,
                   "##############################", width - filled, "", done, total);
      if (done == total) std::fprintf(stderr, "\r%*s\r", 60, "");
    }
  };
  auto loaded = engine::LoadModel(o.model, lo);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::ModelConfig* config = &loaded->config;
  const std::unique_ptr<tokenizer::Tokenizer>& tok = loaded->tokenizer;
  const std::unique_ptr<engine::ModelWeights>& weights = loaded->weights;
  engine::EngineOptions eo;
  eo.num_threads = o.threads;
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.block_size = o.block_size;
  eo.device = o.device;
  eo.gpu = o.gpu;
  eo.batch_invariant = o.batch_invariant;
  eo.kv_dtype = o.kv_dtype;
  eo.cpu_math = o.cpu_math;
  auto eng = engine::Engine::Create(*weights, eo);
  if (!eng.ok()) return Fail(eng.status());
  const auto t_loaded = Clock::now();

  std::string text = ReadPrompt(o.request);
  if (o.request.chat) {
    std::vector<tokenizer::ChatMessage> messages;
    auto add = [&messages](std::string role, std::string content) {
      messages.emplace_back();
      messages.back().role = std::move(role);
      messages.back().content = std::move(content);
    };
    if (!o.request.system.empty()) add("system", o.request.system);
    add("user", text);
    tokenizer::ChatTemplateOptions options;
    // BOS comes from Encode (as the vocab asks); EOS text for templates that close turns with it.
    if (config->eos_token_id >= 0) options.eos_token = tok->TokenBytes(config->eos_token_id);
    auto rendered = tokenizer::ChatTemplate::Render(config->chat_template, messages, options);
    if (!rendered.ok()) return Fail(rendered.status());
    text = *rendered;
  }
  auto prompt = tok->Encode(text);
  if (!prompt.ok()) return Fail(prompt.status());

  const engine::SamplingParams sp = ToSamplingParams(o.request);
  const size_t n_prompt = prompt->size();
  auto id = (*eng)->AddRequest(*std::move(prompt), sp);
  if (!id.ok()) return Fail(id.status());

  tokenizer::Detokenizer detok(*tok);
  std::vector<int32_t> out_ids;
  std::string out_text;
  engine::FinishReason reason = engine::FinishReason::kNone;
  Clock::time_point t_first{};
  while ((*eng)->HasWork()) {
    for (const auto& ev : (*eng)->Step()) {
      if (!ev.error.ok()) return Fail(ev.error);
      if (ev.token >= 0) {
        if (out_ids.empty()) t_first = Clock::now();
        out_ids.push_back(ev.token);
        // The end-of-sequence token ends the text; it is not part of it.
        const bool eos = ev.finished && ev.reason == engine::FinishReason::kStop &&
                         ev.token == config->eos_token_id;
        if (!eos) {
          std::string piece = *detok.Push(ev.token);
          out_text += piece;
          if (!o.request.json) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
          }
        }
      }
      if (ev.finished) reason = ev.reason;
    }
  }
  const std::string tail = detok.Finish();
  out_text += tail;
  const auto t_end = Clock::now();
  const double prefill_ms = out_ids.empty() ? 0 : Ms(t_loaded, t_first);
  const double decode_ms = out_ids.size() > 1 ? Ms(t_first, t_end) : 0;
  if (o.request.json) {
    nlohmann::json j = {
        {"token_ids", out_ids},
        {"text", out_text},
        {"finish_reason", std::string(engine::FinishReasonName(reason))},
        {"usage",
         {{"prompt_tokens", n_prompt},
          {"completion_tokens", out_ids.size()},
          {"total_tokens", n_prompt + out_ids.size()}}},
        {"timings",
         {{"load_ms", Ms(t_start, t_loaded)},
          {"prefill_ms", prefill_ms},
          {"decode_ms", decode_ms},
          {"prefill_tokens_per_s", prefill_ms > 0 ? n_prompt * 1000.0 / prefill_ms : 0.0},
          {"decode_tokens_per_s",
           decode_ms > 0 ? (out_ids.size() - 1) * 1000.0 / decode_ms : 0.0}}}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::printf("\n");
    if (tty) {
      std::fprintf(stderr, "[%zu prompt tokens in %.0f ms, %zu generated at %.1f tokens/s, %s]\n",
                   n_prompt, prefill_ms, out_ids.size(),
                   decode_ms > 0 ? (out_ids.size() - 1) * 1000.0 / decode_ms : 0.0,
                   std::string(engine::FinishReasonName(reason)).c_str());
    }
  }
  return 0;
}

}  // namespace tandem::cli
