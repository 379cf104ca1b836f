#include "cli/request_flags.h"

#include <iostream>
#include <iterator>

namespace tandem::cli {

void AddRequestFlags(CLI::App* cmd, RequestFlags* o) {
  cmd->add_option("--prompt,-p", o->prompt, "Prompt (default: read stdin)");
  cmd->add_flag("--chat", o->chat,
                "Format the prompt as a user turn with the model's chat template");
  cmd->add_option("--system", o->system, "System message for --chat");
  cmd->add_option("--max-tokens,-n", o->max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", o->top_p)->capture_default_str();
  cmd->add_option("--min-p", o->min_p)->capture_default_str();
  cmd->add_option("--repetition-penalty", o->repetition_penalty)->capture_default_str();
  cmd->add_option("--presence-penalty", o->presence_penalty)->capture_default_str();
  cmd->add_option("--frequency-penalty", o->frequency_penalty)->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (default: random)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-sequence");
  cmd->add_flag("--json", o->json,
                "Print one JSON object {token_ids, text, finish_reason, usage, timings}");
}

engine::SamplingParams ToSamplingParams(const RequestFlags& o) {
  engine::SamplingParams sp;
  sp.max_tokens = o.max_tokens;
  sp.temperature = o.temperature;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.min_p = o.min_p;
  sp.repetition_penalty = o.repetition_penalty;
  sp.presence_penalty = o.presence_penalty;
  sp.frequency_penalty = o.frequency_penalty;
  sp.seed = o.seed;
  sp.ignore_eos = o.ignore_eos;
  return sp;
}

std::string ReadPrompt(const RequestFlags& o) {
  return o.prompt.has_value() ? *o.prompt
                              : std::string(std::istreambuf_iterator<char>(std::cin), {});
}

}  // namespace tandem::cli
