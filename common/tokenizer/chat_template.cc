#include "common/tokenizer/chat_template.h"

#include <algorithm>

#include "absl/status/status.h"
#include "common/util/strings.h"

namespace tandem::tokenizer {

namespace {

absl::Status Prefixed(const absl::Status& s) {
  return absl::Status(s.code(), StrCat("chat template: ", s.message()));
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
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::Dict(
        {{"role", jinja::Value::String(m.role)}, {"content", jinja::Value::String(m.content)}}));
    content_bytes += m.role.size() + m.content.size();
  }
  jinja::ValueDict vars = {
      {"messages", jinja::Value::List(std::move(list))},
      {"add_generation_prompt", jinja::Value::Bool(options.add_generation_prompt)},
      {"tools", jinja::Value::None()},
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
