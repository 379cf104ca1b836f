#include "router/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/util/field_error.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::router {

namespace {

using nlohmann::json;

absl::Status Bad(std::string_view param, std::string_view why) { return FieldError(param, why); }

// Bounds on a JSON Schema sent as an object (it is re-read in order: SchemaText).
constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxSchemaBodyBytes = 256 << 10;
constexpr int kMaxObjectMembers = 4096;

std::string_view TypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Field readers: absent or null leaves `out` alone and returns false.
absl::StatusOr<bool> ReadNumber(const json& body, const char* key, double* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_number()) return Bad(key, StrCat("must be a number, got ", TypeName(*it)));
  *out = it->get<double>();
  if (!std::isfinite(*out)) return Bad(key, "must be finite");
  return true;
}

// A JSON integer in [lo, hi] into *out; false for any other value, including one past
// int64's range (errors echo such a value as sent, e.dump(), never wrapped negative).
bool IntIn(const json& e, int64_t lo, int64_t hi, int64_t* out) {
  if (e.is_number_unsigned()) {
    const uint64_t u = e.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
  } else if (e.is_number_integer()) {
    *out = e.get<int64_t>();
  } else {
    return false;
  }
  return *out >= lo && *out <= hi;
}

absl::StatusOr<bool> ReadInt(const json& body, const char* key, int64_t* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (it->is_number_integer()) {
    if (!IntIn(*it, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
               out)) {
      return Bad(key, StrCat("must be at most ", std::numeric_limits<int64_t>::max(), ", got ",
                             it->dump()));
    }
    return true;
  }
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return Bad(key, StrCat("must be an integer, got ", TypeName(*it)));
}

absl::StatusOr<bool> ReadBool(const json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) return Bad(key, StrCat("must be a boolean, got ", TypeName(*it)));
  *out = it->get<bool>();
  return true;
}

absl::StatusOr<bool> ReadString(const json& body, const char* key, std::string* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_string()) return Bad(key, StrCat("must be a string, got ", TypeName(*it)));
  *out = it->get<std::string>();
  return true;
}

absl::Status CheckIntRange(const char* key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return Bad(key, StrCat("must be between ", lo, " and ", hi, ", got ", v));
  return absl::OkStatus();
}

// Sampling fields shared by both endpoints, into `s`.
absl::Status ReadSampling(const json& body, v1::SamplingParams* s, bool* max_tokens_set) {
  int64_t i = 0;
  double d = 0;
  bool b = false;
  // max_completion_tokens is the newer name; either sets the limit.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    ASSIGN_OR_RETURN(bool has, ReadInt(body, key, &i));
    if (!has) continue;
    RETURN_IF_ERROR(CheckIntRange(key, i, 1, std::numeric_limits<int32_t>::max()));
    s->set_max_tokens(static_cast<int32_t>(i));
    *max_tokens_set = true;
  }
  ASSIGN_OR_RETURN(bool has, ReadNumber(body, "temperature", &d));
  if (has) {
    if (d < 0 || d > 2) return Bad("temperature", StrCat("must be between 0 and 2, got ", d));
    s->set_temperature(static_cast<float>(d));
  }
  ASSIGN_OR_RETURN(has, ReadNumber(body, "top_p", &d));
  if (has) s->set_top_p(static_cast<float>(d));
  ASSIGN_OR_RETURN(has, ReadInt(body, "top_k", &i));
  if (has) {
    RETURN_IF_ERROR(CheckIntRange("top_k", i, -1, std::numeric_limits<int32_t>::max()));
    s->set_top_k(static_cast<int32_t>(i));
  }
  ASSIGN_OR_RETURN(has, ReadNumber(body, "min_p", &d));
  if (has) s->set_min_p(static_cast<float>(d));
  ASSIGN_OR_RETURN(has, ReadNumber(body, "repetition_penalty", &d));
  if (has) s->set_repetition_penalty(static_cast<float>(d));
  ASSIGN_OR_RETURN(has, ReadNumber(body, "presence_penalty", &d));
  if (has) s->set_presence_penalty(static_cast<float>(d));
  ASSIGN_OR_RETURN(has, ReadNumber(body, "frequency_penalty", &d));
  if (has) s->set_frequency_penalty(static_cast<float>(d));
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    // Any 64-bit seed: 0 … 2^64 − 1 as sent, or a negative one as its two's complement.
    if (it->is_number_unsigned()) {
      s->set_seed(it->get<uint64_t>());
    } else {
      ASSIGN_OR_RETURN(has, ReadInt(body, "seed", &i));
      s->set_seed(static_cast<uint64_t>(i));
    }
  }
  ASSIGN_OR_RETURN(has, ReadInt(body, "min_tokens", &i));
  if (has && i != 0) {
    return Bad("min_tokens", "is not supported by tandem (0 or absent only)");
  }
  ASSIGN_OR_RETURN(has, ReadBool(body, "ignore_eos", &b));
  if (has) s->set_ignore_eos(b);
  ASSIGN_OR_RETURN(has, ReadBool(body, "disable_speculation", &b));
  if (has) s->set_disable_speculation(b);
  ASSIGN_OR_RETURN(has, ReadInt(body, "priority", &i));
  if (has) {
    RETURN_IF_ERROR(CheckIntRange("priority", i, std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int32_t>::max()));
    s->set_priority(static_cast<int32_t>(i));
  }

  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      s->add_stop(it->get<std::string>());
    } else if (it->is_array()) {
      for (const json& e : *it) {
        if (!e.is_string()) return Bad("stop", "must be a string or an array of strings");
        s->add_stop(e.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or an array of strings");
    }
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return Bad("stop_token_ids", "must be an array of integers");
    for (const json& e : *it) {
      if (!e.is_number_integer()) return Bad("stop_token_ids", "must be an array of integers");
      int64_t id = 0;
      if (!IntIn(e, 0, std::numeric_limits<int32_t>::max(), &id)) {
        return Bad("stop_token_ids", StrCat("id ", e.dump(), " is out of range"));
      }
      s->add_stop_token_ids(static_cast<int32_t>(id));
    }
  }
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    // OpenAI's form: {"<token id>": bias, ...}.
    if (!it->is_object()) return Bad("logit_bias", "must be an object of token id → bias");
    for (const auto& [key, value] : it->items()) {
      int64_t id = -1;
      if (key.empty() || key.size() > 10 ||
          !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return Bad("logit_bias", StrCat("key '", key, "' is not a token id"));
      }
      id = std::stoll(key);
      if (id > INT32_MAX) return Bad("logit_bias", StrCat("token id ", key, " is out of range"));
      if (!value.is_number())
        return Bad("logit_bias", StrCat("the bias of ", key, " must be a number"));
      const double bias = value.get<double>();
      if (!std::isfinite(bias) || bias < -100 || bias > 100) {
        return Bad("logit_bias", StrCat("the bias of ", key, " must be in [-100, 100]"));
      }
      (*s->mutable_logit_bias())[static_cast<int32_t>(id)] = static_cast<float>(bias);
    }
  }
  return absl::OkStatus();
}

// The prompts of a completions request.
// Nesting depth of `v`, without recursing (values are untrusted and may be deep).
int Depth(const json& v) {
  int deepest = 0;
  std::vector<std::pair<const json*, int>> todo = {{&v, 1}};
  while (!todo.empty()) {
    auto [x, d] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, d);
    if (x->is_structured() && d <= kMaxSchemaDepth) {
      for (const json& child : *x) todo.push_back({&child, d + 1});
    }
  }
  return deepest;
}

// The JSON Schema `value` (at `path` in the body) as JSON text whose properties keep
// the order the request gives them: the body parsed again, ordered, once it is known
// to be small and shallow enough for that (an ordered object finds a key by scanning).
absl::StatusOr<std::string> SchemaText(std::string_view body, const json& value,
                                       std::initializer_list<const char*> path,
                                       std::string_view field) {
  if (value.is_string()) return value.get<std::string>();
  if (Depth(value) > kMaxSchemaDepth) {
    return Bad(field, StrCat("nests deeper than ", kMaxSchemaDepth));
  }
  if (body.size() > kMaxSchemaBodyBytes) {
    return Bad(field, StrCat("a request with a JSON Schema object is at most ", kMaxSchemaBodyBytes,
                             " bytes (send the schema as a string)"));
  }
  std::vector<int> members;
  bool too_wide = false;
  const nlohmann::ordered_json::parser_callback_t bound =
      [&](int, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json&) {
        using Event = nlohmann::ordered_json::parse_event_t;
        if (event == Event::object_start) members.push_back(0);
        if (event == Event::object_end && !members.empty()) members.pop_back();
        if (event == Event::key && !members.empty() && ++members.back() > kMaxObjectMembers) {
          too_wide = true;
          return false;
        }
        return !too_wide;
      };
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, bound, false);
  if (too_wide) {
    return Bad(field,
               StrCat("the request has an object of more than ", kMaxObjectMembers, " members"));
  }
  const nlohmann::ordered_json* at = &ordered;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return value.dump();  // not found: sorted
    at = &at->at(key);
  }
  return at->dump();
}

// The structured-output constraint, from OpenAI's response_format or vLLM's
// structured_outputs / guided_* fields (at most one of them).
absl::Status ReadStructuredOutput(std::string_view raw, const json& body, v1::SamplingParams* s) {
  int given = 0;
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    const json& rf = *it;
    const std::string type = rf.is_object() && rf.contains("type") && rf.at("type").is_string()
                                 ? rf.at("type").get<std::string>()
                                 : "";
    if (type == "json_object") {
      s->set_json_object(true);
      ++given;
    } else if (type == "json_schema") {
      const json* schema = nullptr;
      if (rf.contains("json_schema") && rf.at("json_schema").is_object()) {
        const json& js = rf.at("json_schema");
        if (js.contains("schema")) schema = &js.at("schema");
      }
      if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
        return Bad("response_format", "json_schema.schema must be a JSON Schema object");
      }
      ASSIGN_OR_RETURN(std::string text,
                       SchemaText(raw, *schema, {"response_format", "json_schema", "schema"},
                                  "response_format"));
      s->set_json_schema(std::move(text));
      ++given;
    } else if (type != "text") {
      return Bad("response_format", "type must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  // vLLM: structured_outputs {json, regex, choice, grammar, json_object}, or the older
  // guided_json / guided_regex / guided_choice / guided_grammar.
  struct Entry {
    std::string field, key;
    const json* value;
  };
  std::vector<Entry> entries;
  if (auto it = body.find("structured_outputs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return Bad("structured_outputs", "must be an object");
    for (const auto& [key, v] : it->items())
      entries.push_back({"structured_outputs." + key, key, &v});
  }
  for (auto [old_name, name] : {std::pair{"guided_json", "json"},
                                {"guided_regex", "regex"},
                                {"guided_choice", "choice"},
                                {"guided_grammar", "grammar"}}) {
    if (auto it = body.find(old_name); it != body.end() && !it->is_null()) {
      entries.push_back({old_name, name, &*it});
    }
  }
  for (const Entry& e : entries) {
    const json& v = *e.value;
    if (v.is_null()) continue;
    const std::string& field = e.field;
    if (e.key == "json") {
      if (!v.is_object() && !v.is_string() && !v.is_boolean()) {
        return Bad(field, "must be a JSON Schema (an object or its JSON text)");
      }
      const bool nested = field.starts_with("structured_outputs.");
      ASSIGN_OR_RETURN(std::string text,
                       nested ? SchemaText(raw, v, {"structured_outputs", "json"}, field)
                              : SchemaText(raw, v, {"guided_json"}, field));
      s->set_json_schema(std::move(text));
    } else if (e.key == "regex" || e.key == "grammar") {
      if (!v.is_string()) return Bad(field, "must be a string");
      e.key == "regex" ? s->set_regex(v.get<std::string>()) : s->set_grammar(v.get<std::string>());
    } else if (e.key == "choice") {
      if (!v.is_array()) return Bad(field, "must be an array of strings");
      v1::Choices* c = s->mutable_choice();
      for (const json& x : v) {
        if (!x.is_string()) return Bad(field, "must be an array of strings");
        c->add_choices(x.get<std::string>());
      }
    } else if (e.key == "json_object") {
      if (!v.is_boolean()) return Bad(field, "must be true or false");
      if (!v.get<bool>()) continue;
      s->set_json_object(true);
    } else {
      return Bad(field, "is not supported by tandem (json, regex, choice, grammar, json_object)");
    }
    ++given;
  }
  if (given > 1) {
    return Bad("response_format", "give at most one structured-output constraint");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::GenerateRequest>> ReadPrompts(const json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return Bad("prompt", "is required");
  auto token_ids = [](const json& arr, v1::GenerateRequest* req) -> absl::Status {
    for (const json& e : arr) {
      if (!e.is_number_integer()) return Bad("prompt", "token ids must be integers");
      int64_t id = 0;
      if (!IntIn(e, 0, std::numeric_limits<int32_t>::max(), &id)) {
        return Bad("prompt", StrCat("token id ", e.dump(), " is out of range"));
      }
      req->mutable_token_ids()->add_ids(static_cast<int32_t>(id));
    }
    if (req->token_ids().ids_size() == 0) return Bad("prompt", "must not be empty");
    return absl::OkStatus();
  };
  std::vector<v1::GenerateRequest> out;
  if (it->is_string()) {
    out.emplace_back().set_text(it->get<std::string>());
    return out;
  }
  if (!it->is_array() || it->empty()) {
    return Bad("prompt", "must be a string, an array of token ids, or an array of those");
  }
  if ((*it)[0].is_number()) {
    RETURN_IF_ERROR(token_ids(*it, &out.emplace_back()));
    return out;
  }
  for (const json& p : *it) {
    if (p.is_string()) {
      out.emplace_back().set_text(p.get<std::string>());
    } else if (p.is_array()) {
      RETURN_IF_ERROR(token_ids(p, &out.emplace_back()));
    } else {
      return Bad("prompt", "must be a string, an array of token ids, or an array of those");
    }
  }
  return out;
}

// tools, tool_choice and parallel_tool_calls (OpenAI's), into `chat`.
absl::Status ReadTools(std::string_view raw, const json& body, v1::Chat* chat) {
  auto it = body.find("tools");
  const bool has_tools = it != body.end() && !it->is_null() && !(it->is_array() && it->empty());
  if (has_tools) {
    if (!it->is_array()) return Bad("tools", "must be an array");
    // Parameters keep the order their properties were sent in (SchemaText).
    ASSIGN_OR_RETURN(const std::string text, SchemaText(raw, *it, {"tools"}, "tools"));
    const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!tools.is_array()) return Bad("tools", "must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const nlohmann::ordered_json& t = tools[i];
      const std::string field = StrCat("tools[", i, "]");
      if (!t.is_object()) return Bad(field, "must be an object");
      if (auto type = t.find("type");
          type != t.end() && !(type->is_string() && type->get<std::string>() == "function")) {
        return Bad(StrCat(field, ".type"), "must be \"function\"");
      }
      auto f = t.find("function");
      if (f == t.end() || !f->is_object()) return Bad(StrCat(field, ".function"), "is required");
      v1::Tool* tool = chat->add_tools();
      auto name = f->find("name");
      if (name == f->end() || !name->is_string()) {
        return Bad(StrCat(field, ".function.name"), "is required (a string)");
      }
      tool->set_name(name->get<std::string>());
      if (auto d = f->find("description"); d != f->end() && !d->is_null()) {
        if (!d->is_string()) return Bad(StrCat(field, ".function.description"), "must be a string");
        tool->set_description(d->get<std::string>());
      }
      if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
        if (!p->is_object()) {
          return Bad(StrCat(field, ".function.parameters"), "must be a JSON Schema object");
        }
        tool->set_parameters(p->dump());
      }
    }
  }
  v1::ToolChoice* choice = chat->mutable_tool_choice();
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (c->is_string()) {
      const std::string mode = c->get<std::string>();
      if (mode == "none") {
        choice->set_mode(v1::ToolChoice::TOOL_CHOICE_NONE);
      } else if (mode == "required") {
        choice->set_mode(v1::ToolChoice::TOOL_CHOICE_REQUIRED);
      } else if (mode != "auto") {
        return Bad("tool_choice", "must be \"none\", \"auto\", \"required\" or a function");
      }
    } else if (c->is_object()) {
      const json* name = nullptr;
      if (auto f = c->find("function"); f != c->end() && f->is_object()) {
        if (auto n = f->find("name"); n != f->end()) name = &*n;
      }
      if (name == nullptr || !name->is_string()) {
        return Bad("tool_choice",
                   "must name a function: {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}");
      }
      choice->set_mode(v1::ToolChoice::TOOL_CHOICE_FUNCTION);
      choice->set_function(name->get<std::string>());
    } else {
      return Bad("tool_choice", "must be a string or an object");
    }
    if (!has_tools && choice->mode() != v1::ToolChoice::TOOL_CHOICE_NONE &&
        choice->mode() != v1::ToolChoice::TOOL_CHOICE_AUTO) {
      return Bad("tool_choice", "needs tools");
    }
    if (!has_tools) choice->Clear();
  }
  if (has_tools) {
    bool parallel = true;
    ASSIGN_OR_RETURN(bool has, ReadBool(body, "parallel_tool_calls", &parallel));
    if (has) chat->set_parallel_tool_calls(parallel);
  }
  return absl::OkStatus();
}

// The messages of a chat request.
absl::StatusOr<v1::Chat> ReadMessages(const json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return Bad("messages", "is required");
  if (!it->is_array() || it->empty()) return Bad("messages", "must be a non-empty array");
  v1::Chat chat;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string field = StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(field, "must be an object");
    std::string role;
    ASSIGN_OR_RETURN(bool has, ReadString(m, "role", &role));
    if (!has) return Bad(StrCat(field, ".role"), "is required");
    if (role == "developer") role = "system";  // OpenAI's newer name for system
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Bad(
          StrCat(field, ".role"),
          StrCat("'", role, "' is not supported (system, developer, user, assistant, tool)"));
    }
    std::string content;
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      if (role != "assistant") return Bad(StrCat(field, ".content"), "is required");
    } else if (c->is_string()) {
      content = c->get<std::string>();
    } else if (c->is_array()) {
      for (size_t k = 0; k < c->size(); ++k) {
        const json& part = (*c)[k];
        const std::string pf = StrCat(field, ".content[", k, "]");
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return Bad(pf, "only parts of type \"text\" with a string \"text\" are supported");
        }
        content += part["text"].get<std::string>();
      }
    } else {
      return Bad(StrCat(field, ".content"), "must be a string or an array of text parts");
    }
    v1::ChatMessage* out = chat.add_messages();
    out->set_role(role);
    out->set_content(content);
    std::string text;
    ASSIGN_OR_RETURN(has, ReadString(m, "tool_call_id", &text));
    if (has) out->set_tool_call_id(text);
    if (role == "tool" && !has) return Bad(StrCat(field, ".tool_call_id"), "is required");
    ASSIGN_OR_RETURN(has, ReadString(m, "name", &text));
    if (has) out->set_name(text);
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (role != "assistant") return Bad(StrCat(field, ".tool_calls"), "is only for assistant");
      if (!calls->is_array()) return Bad(StrCat(field, ".tool_calls"), "must be an array");
      for (size_t k = 0; k < calls->size(); ++k) {
        const json& c = (*calls)[k];
        const std::string cf = StrCat(field, ".tool_calls[", k, "]");
        if (!c.is_object()) return Bad(cf, "must be an object");
        v1::ToolCall* call = out->add_tool_calls();
        ASSIGN_OR_RETURN(has, ReadString(c, "id", &text));
        call->set_id(text);
        auto f = c.find("function");
        if (f == c.end() || !f->is_object()) return Bad(StrCat(cf, ".function"), "is required");
        ASSIGN_OR_RETURN(has, ReadString(*f, "name", &text));
        if (!has) return Bad(StrCat(cf, ".function.name"), "is required");
        call->set_name(text);
        auto args = f->find("arguments");
        if (args == f->end() || args->is_null()) {
          call->set_arguments("{}");
        } else if (args->is_string()) {
          call->set_arguments(args->get<std::string>());
        } else if (args->is_object()) {
          call->set_arguments(args->dump());
        } else {
          return Bad(StrCat(cf, ".function.arguments"), "must be a JSON object's text");
        }
      }
    }
  }
  return chat;
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("body", "is not valid JSON");
  if (!j.is_object()) return Bad("body", "must be a JSON object");

  OpenAiRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  ASSIGN_OR_RETURN(bool has, ReadString(j, "model", &r.model));
  (void)has;
  v1::SamplingParams sampling;
  RETURN_IF_ERROR(ReadSampling(j, &sampling, &r.max_tokens_set));
  ASSIGN_OR_RETURN(has, ReadBool(j, "stream", &r.stream));
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return Bad("stream_options", "must be an object");
    if (!r.stream) return Bad("stream_options", "is only allowed with stream: true");
    ASSIGN_OR_RETURN(has, ReadBool(*it, "include_usage", &r.include_usage));
  }
  int64_t n = 1;
  ASSIGN_OR_RETURN(has, ReadInt(j, "n", &n));
  RETURN_IF_ERROR(CheckIntRange("n", n, 1, kMaxChoices));
  r.n = static_cast<int>(n);
  int64_t best_of = n;
  ASSIGN_OR_RETURN(has, ReadInt(j, "best_of", &best_of));
  if (has && best_of != n) {
    if (chat) return Bad("best_of", "is only for /v1/completions");
    RETURN_IF_ERROR(CheckIntRange("best_of", best_of, n, kMaxChoices));
    if (r.stream)
      return Bad("best_of", "greater than n cannot stream (the best are known at the end)");
  }
  r.best_of = static_cast<int>(best_of);

  // Log-probabilities: completions take an int, chat a bool plus top_logprobs.
  if (chat) {
    bool want = false;
    ASSIGN_OR_RETURN(has, ReadBool(j, "logprobs", &want));
    int64_t top = 0;
    ASSIGN_OR_RETURN(bool has_top, ReadInt(j, "top_logprobs", &top));
    if (has_top) {
      RETURN_IF_ERROR(CheckIntRange("top_logprobs", top, 0, kMaxTopLogprobs));
      if (!want) return Bad("top_logprobs", "requires logprobs: true");
    }
    if (want) r.logprobs = static_cast<int>(top);
  } else {
    int64_t lp = 0;
    ASSIGN_OR_RETURN(has, ReadInt(j, "logprobs", &lp));
    if (has) {
      RETURN_IF_ERROR(CheckIntRange("logprobs", lp, 0, kMaxTopLogprobs));
      r.logprobs = static_cast<int>(lp);
    }
  }
  if (r.logprobs >= 0) sampling.set_logprobs(r.logprobs);

  ASSIGN_OR_RETURN(has, ReadBool(j, "echo", &r.echo));
  if (r.echo && chat) return Bad("echo", "is only for /v1/completions");
  if (r.echo && r.logprobs >= 0) {
    return Bad("echo", "cannot be combined with logprobs (tandem does not score the prompt)");
  }
  // best_of > n ranks candidates by their total log-probability: the workers report it.
  if (r.best_of > r.n && r.logprobs < 0) sampling.set_logprobs(0);
  std::string text;
  ASSIGN_OR_RETURN(has, ReadString(j, "suffix", &text));
  if (has && !text.empty()) return Bad("suffix", "is not supported by tandem");
  if (!chat) {
    for (const char* key : {"tools", "tool_choice"}) {
      if (auto it = j.find(key); it != j.end() && !it->is_null()) {
        return Bad(key, "is only for /v1/chat/completions");
      }
    }
  }
  RETURN_IF_ERROR(ReadStructuredOutput(body, j, &sampling));
  std::string salt, request_id;
  ASSIGN_OR_RETURN(has, ReadString(j, "cache_salt", &salt));
  ASSIGN_OR_RETURN(has, ReadString(j, "request_id", &request_id));

  std::vector<v1::GenerateRequest> prompts;
  if (chat) {
    ASSIGN_OR_RETURN(v1::Chat messages, ReadMessages(j));
    RETURN_IF_ERROR(ReadTools(body, j, &messages));
    *prompts.emplace_back().mutable_chat() = std::move(messages);
  } else {
    ASSIGN_OR_RETURN(prompts, ReadPrompts(j));
  }
  const int group = r.best_of;  // candidates per prompt
  if (prompts.size() * static_cast<size_t>(group) > static_cast<size_t>(kMaxChoices)) {
    return Bad(chat ? "n" : "prompt", StrCat("prompts × ", group == r.n ? "n" : "best_of", " is ",
                                             prompts.size() * group, "; at most ", kMaxChoices));
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (r.echo) {
      r.echo_texts.push_back(prompts[p].has_text() ? prompts[p].text() : std::string());
    }
    for (int i = 0; i < group; ++i) {
      v1::GenerateRequest req = prompts[p];
      *req.mutable_sampling_params() = sampling;
      if (sampling.has_seed() && i > 0)
        req.mutable_sampling_params()->set_seed(sampling.seed() + i);
      req.set_stream(true);
      req.set_cache_salt(salt);
      if (!request_id.empty()) {
        const size_t index = p * static_cast<size_t>(group) + static_cast<size_t>(i);
        req.set_request_id(index == 0 ? request_id : StrCat(request_id, "-", index));
      }
      r.choices.push_back(std::move(req));
    }
  }
  return r;
}

absl::StatusOr<v1::TokenizeRequest> ParseTokenizeRequest(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("body", "is not valid JSON");
  if (!j.is_object()) return Bad("body", "must be a JSON object");
  v1::TokenizeRequest req;
  if (j.contains("messages")) {
    ASSIGN_OR_RETURN(*req.mutable_chat(), ReadMessages(j));
  } else if (auto it = j.find("prompt"); it != j.end() && it->is_string()) {
    req.set_text(it->get<std::string>());
  } else {
    return Bad("prompt", "a string prompt or messages is required");
  }
  return req;
}

}  // namespace tandem::router
