#include "common/tokenizer/chat_template.h"

#include <algorithm>

#include "absl/status/status.h"
#include "common/util/bounded_json.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "nlohmann/json.hpp"

namespace tandem::tokenizer {

namespace {

using json = nlohmann::ordered_json;

absl::Status Prefixed(const absl::Status& s) {
  return absl::Status(s.code(), StrCat("chat template: ", s.message()));
}

// A JSON value as Python's json.loads gives it to a template (key order kept).
jinja::Value FromJson(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return jinja::Value::None();
    case json::value_t::boolean:
      return jinja::Value::Bool(j.get<bool>());
    case json::value_t::number_integer:
      return jinja::Value::Int(j.get<int64_t>());
    case json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return jinja::Value::Int(static_cast<int64_t>(u));
      return jinja::Value::Float(static_cast<double>(u));
    }
    case json::value_t::number_float:
      return jinja::Value::Float(j.get<double>());
    case json::value_t::string:
      return jinja::Value::String(j.get<std::string>());
    case json::value_t::array: {
      jinja::ValueList items;
      for (const json& e : j) items.push_back(FromJson(e));
      return jinja::Value::List(std::move(items));
    }
    case json::value_t::object: {
      jinja::ValueDict items;
      for (const auto& [k, v] : j.items()) items.emplace_back(k, FromJson(v));
      return jinja::Value::Dict(std::move(items));
    }
    default:
      return jinja::Value::None();
  }
}

// `text` (named `what` in errors) as the dict a JSON object parses to.
absl::StatusOr<jinja::Value> JsonObject(std::string_view what, std::string_view text) {
  absl::StatusOr<json> j = ParseBoundedJson(text);
  if (!j.ok()) return absl::InvalidArgumentError(StrCat(what, " ", j.status().message()));
  if (!j->is_object()) return absl::InvalidArgumentError(StrCat(what, " must be a JSON object"));
  return FromJson(*j);
}

absl::StatusOr<jinja::Value> MessageValue(size_t index, const ChatMessage& m) {
  jinja::ValueDict d = {{"role", jinja::Value::String(m.role)},
                        {"content", jinja::Value::String(m.content)}};
  if (!m.tool_calls.empty()) {
    jinja::ValueList calls;
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      const ToolCall& c = m.tool_calls[k];
      ASSIGN_OR_RETURN(jinja::Value args,
                       JsonObject(StrCat("messages[", index, "].tool_calls[", k, "].arguments"),
                                  c.arguments.empty() ? "{}" : c.arguments));
      calls.push_back(jinja::Value::Dict(
          {{"id", jinja::Value::String(c.id)},
           {"type", jinja::Value::String("function")},
           {"function", jinja::Value::Dict({{"name", jinja::Value::String(c.name)},
                                            {"arguments", std::move(args)}})}}));
    }
    d.emplace_back("tool_calls", jinja::Value::List(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.emplace_back("tool_call_id", jinja::Value::String(m.tool_call_id));
  if (!m.name.empty()) d.emplace_back("name", jinja::Value::String(m.name));
  return jinja::Value::Dict(std::move(d));
}

absl::StatusOr<jinja::Value> ToolsValue(const std::optional<std::vector<ToolDefinition>>& tools) {
  if (!tools) return jinja::Value::None();
  jinja::ValueList list;
  for (size_t i = 0; i < tools->size(); ++i) {
    const ToolDefinition& t = (*tools)[i];
    jinja::ValueDict f = {{"name", jinja::Value::String(t.name)}};
    if (t.description) f.emplace_back("description", jinja::Value::String(*t.description));
    if (!t.parameters.empty()) {
      ASSIGN_OR_RETURN(jinja::Value p,
                       JsonObject(StrCat("tools[", i, "].parameters"), t.parameters));
      f.emplace_back("parameters", std::move(p));
    }
    list.push_back(jinja::Value::Dict({{"type", jinja::Value::String("function")},
                                       {"function", jinja::Value::Dict(std::move(f))}}));
  }
  return jinja::Value::List(std::move(list));
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Create(std::string_view template_source,
                                                  const jinja::Limits& limits) {
  if (template_source.empty()) {
    return absl::UnimplementedError("chat template: the model has none; use a raw prompt");
  }
  absl::StatusOr<jinja::Template> tpl = jinja::Template::Parse(template_source, limits);
  if (!tpl.ok()) return Prefixed(tpl.status());
  return ChatTemplate(*std::move(tpl), limits);
}

absl::StatusOr<std::string> ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                                const ChatTemplateOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("chat template: no messages");
  jinja::ValueList list;
  size_t content_bytes = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    absl::StatusOr<jinja::Value> v = MessageValue(i, m);
    if (!v.ok()) return Prefixed(v.status());
    list.push_back(*std::move(v));
    content_bytes += m.role.size() + m.content.size();
    for (const ToolCall& c : m.tool_calls) content_bytes += c.name.size() + c.arguments.size();
  }
  absl::StatusOr<jinja::Value> tools = ToolsValue(options.tools);
  if (!tools.ok()) return Prefixed(tools.status());
  if (options.tools) {
    for (const ToolDefinition& t : *options.tools) {
      content_bytes += t.name.size() + t.parameters.size() + t.description.value_or("").size();
    }
  }
  jinja::ValueDict vars = {
      {"messages", jinja::Value::List(std::move(list))},
      {"add_generation_prompt", jinja::Value::Bool(options.add_generation_prompt)},
      {"tools", *std::move(tools)},
      {"documents", jinja::Value::None()},
  };
  if (options.bos_token) vars.emplace_back("bos_token", jinja::Value::String(*options.bos_token));
  if (options.eos_token) vars.emplace_back("eos_token", jinja::Value::String(*options.eos_token));
  // Later entries win: the interpreter binds the variables in order.
  vars.insert(vars.end(), options.extra_variables.begin(), options.extra_variables.end());

  jinja::Limits limits = limits_;
  limits.max_output_bytes = std::max(limits.max_output_bytes, 4 * content_bytes);
  absl::StatusOr<std::string> text = template_.Render(vars, limits);
  if (!text.ok()) return Prefixed(text.status());
  return text;
}

absl::StatusOr<std::string> ChatTemplate::Render(std::string_view template_source,
                                                 const std::vector<ChatMessage>& messages,
                                                 const ChatTemplateOptions& options) {
  absl::StatusOr<ChatTemplate> tpl = Create(template_source);
  if (!tpl.ok()) return tpl.status();
  return tpl->Apply(messages, options);
}

absl::StatusOr<std::string> ChatTemplate::Render(std::string_view template_source,
                                                 const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) {
  ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return Render(template_source, messages, options);
}

}  // namespace tandem::tokenizer
