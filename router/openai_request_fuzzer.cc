// libFuzzer target: an OpenAI request body from the wire to a RequestSpec — JSON
// parsing and checking (openai_request.h), then the router's validation of every
// choice (request_validator.h: tokenizing, the chat template, limits), with the
// default model's tokenizer and config.
//
// The first byte picks the endpoint (completions, chat completions, tokenize); the
// rest is the body. Every refusal must be InvalidArgument (the HTTP 400 of docs/api.md,
// "Errors"). Every accepted request must be one the engine can run: a non-empty prompt of
// in-vocabulary ids, a seed, sampling parameters that validate again, and the prompt
// plus max_tokens within the context and the KV capacity given. Anything else — a
// crash, a sanitizer report, another code, a spec the checks should have refused — is
// a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/engine/model_file.h"
#include "router/openai_request.h"
#include "router/request_validator.h"

namespace {

using tandem::router::OpenAiEndpoint;

constexpr int64_t kKvCapacityTokens = 2048;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "openai_request_fuzzer: %s\n", what.c_str());
  std::abort();
}

void CheckRefusal(const absl::Status& st, const char* stage) {
  if (!absl::IsInvalidArgument(st)) Fail(std::string(stage) + " refused with " + st.ToString());
}

const tandem::engine::ModelFile& Model() {
  static const tandem::engine::ModelFile* model = [] {
    auto m = tandem::engine::OpenModelFile(std::string(TANDEM_SOURCE_DIR) +
                                           "/models/smollm2-135m-instruct-q4_1.gguf");
    if (!m.ok()) Fail("the default model: " + m.status().ToString() + " (scripts/fetch-model.sh)");
    return new tandem::engine::ModelFile(std::move(*m));
  }();
  return *model;
}

void CheckSpec(const tandem::router::RequestSpec& spec, const tandem::model::ModelConfig& config) {
  if (spec.prompt.empty()) Fail("an empty prompt was accepted");
  for (int32_t id : spec.prompt) {
    if (id < 0 || id >= static_cast<int64_t>(config.vocab_size))
      Fail("a prompt id outside the vocabulary");
  }
  if (!spec.params.seed.has_value()) Fail("an accepted request without a seed");
  if (absl::Status st =
          spec.params.Validate(static_cast<int32_t>(config.vocab_size), config.context_length);
      !st.ok()) {
    Fail("accepted sampling parameters fail validation: " + st.ToString());
  }
  const int64_t total = static_cast<int64_t>(spec.prompt.size()) + spec.params.max_tokens;
  if (total > config.context_length || total > kKvCapacityTokens) {
    Fail("prompt plus max_tokens past the context or the KV capacity");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tandem::engine::ModelFile& model = Model();
  static const tandem::router::RequestValidator validator(*model.tokenizer, model.config);
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 3 == 2) {
    auto req = tandem::router::ParseTokenizeRequest(body);
    if (!req.ok()) return CheckRefusal(req.status(), "ParseTokenizeRequest"), 0;
    auto ids = validator.Tokenize(*req);
    if (!ids.ok()) return CheckRefusal(ids.status(), "Tokenize"), 0;
    for (int32_t id : *ids) {
      if (id < 0 || id >= static_cast<int64_t>(model.config.vocab_size))
        Fail("Tokenize: id out of range");
    }
    return 0;
  }
  const OpenAiEndpoint endpoint =
      data[0] % 3 == 0 ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions;
  auto req = tandem::router::ParseOpenAiRequest(endpoint, body);
  if (!req.ok()) return CheckRefusal(req.status(), "ParseOpenAiRequest"), 0;
  if (req->choices.empty() || req->choices.size() > tandem::router::kMaxChoices) {
    Fail("an accepted request with " + std::to_string(req->choices.size()) + " choices");
  }
  for (const auto& choice : req->choices) {
    // As the HTTP front calls it.
    auto spec = validator.Validate(
        choice, kKvCapacityTokens,
        /*fill_context=*/endpoint == OpenAiEndpoint::kChatCompletions && !req->max_tokens_set);
    if (!spec.ok()) {
      CheckRefusal(spec.status(), "Validate");
      continue;
    }
    CheckSpec(*spec, model.config);
  }
  return 0;
}
