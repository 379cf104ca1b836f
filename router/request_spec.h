// RequestSpec: a validated request in the router's own terms (RequestValidator makes
// it from a client's request; the router runs it).
#ifndef TANDEM_ROUTER_REQUEST_SPEC_H_
#define TANDEM_ROUTER_REQUEST_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/engine/sampling_params.h"
#include "router/tool_call_format.h"

namespace tandem::router {

struct RequestSpec {
  std::string request_id;
  std::vector<int32_t> prompt;
  engine::SamplingParams params;  // seed always set
  std::vector<std::string> stop;
  bool stream = true;
  uint64_t cache_salt = 0;  // 0: the shared prefix-cache namespace
  // Chat with tools (tool_choice not "none"): the response takes calls of these tools
  // out of the text, in this format.
  bool parse_tool_calls = false;
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  std::vector<std::string> tool_names;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_REQUEST_SPEC_H_
