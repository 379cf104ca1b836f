#include "router/tool_call_format.h"

#include <algorithm>
#include <optional>
#include <random>

#include "common/grammar/grammar.h"
#include "common/grammar/json_schema_grammar.h"
#include "common/util/bounded_json.h"
#include "common/util/field_error.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"
#include "nlohmann/json.hpp"

namespace tandem::router {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The longest suffix of `s` that is a proper prefix of `tag` (text that may yet become it).
size_t HeldSuffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// The end of the JSON object or array starting at s[pos] (one past its closing bracket),
// or npos when it does not close within `s`. Strings and escapes are skipped.
size_t JsonEnd(std::string_view s, size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<json> ParseJson(std::string_view text) {
  absl::StatusOr<json> j = ParseBoundedJson(text);
  return j.ok() ? std::optional<json>(*std::move(j)) : std::nullopt;
}

json ToolJson(const tokenizer::ToolDefinition& t) {
  json f = {{"name", t.name}};
  if (t.description) f["description"] = *t.description;
  if (!t.parameters.empty()) {
    if (std::optional<json> p = ParseJson(t.parameters)) f["parameters"] = *p;
  }
  return {{"type", "function"}, {"function", std::move(f)}};
}

// How a format writes its calls, as the grammar forces them (the parser reads more).
struct Writing {
  std::string_view list_open, separator, list_close;      // around and between the calls
  std::string_view call_open, arguments_key, call_close;  // around one call's JSON
};

Writing WritingOf(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3Json:
      return {"", "; ", "", "", "parameters", ""};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS] [", ", ", "]", "", "arguments", ""};
    case ToolCallFormat::kHermes:
      break;
  }
  return {"", "\n", "", "<tool_call>\n", "arguments", "\n</tool_call>"};
}

}  // namespace

absl::StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return absl::InvalidArgumentError(
      StrCat("tool call parser '", name, "' is not one of hermes, llama3_json, mistral"));
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "hermes";
}

ToolCallFormat ToolCallFormatForTemplate(std::string_view chat_template) {
  if (chat_template.find(kMistralTag) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (chat_template.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (chat_template.find(kPythonTag) != std::string_view::npos ||
      chat_template.find("<|start_header_id|>ipython") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

std::string ToolsSystemPrompt(const std::vector<tokenizer::ToolDefinition>& tools) {
  std::string out =
      "You may call functions to answer. They are described in JSON within <tools></tools>:\n"
      "<tools>";
  for (const tokenizer::ToolDefinition& t : tools) out += StrCat("\n", ToolJson(t).dump());
  out +=
      "\n</tools>\n\nTo call one, answer with its name and arguments as JSON within "
      "<tool_call></tool_call>, one block per call:\n<tool_call>\n{\"name\": <function name>, "
      "\"arguments\": <the arguments as a JSON object>}\n</tool_call>";
  return out;
}

std::string HermesCallsText(const std::vector<tokenizer::ToolCall>& calls) {
  std::string out;
  for (const tokenizer::ToolCall& c : calls) {
    if (!out.empty()) out += "\n";
    out +=
        StrCat(kHermesOpen, "\n{\"name\": ", json(c.name).dump(),
               ", \"arguments\": ", c.arguments.empty() ? "{}" : c.arguments, "}\n", kHermesClose);
  }
  return out;
}

absl::StatusOr<std::string> ToolCallGbnf(ToolCallFormat format,
                                         const std::vector<tokenizer::ToolDefinition>& tools,
                                         std::string_view only, bool parallel) {
  const Writing w = WritingOf(format);
  std::string rules;
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < tools.size(); ++i) {
    const tokenizer::ToolDefinition& t = tools[i];
    if (!only.empty() && t.name != only) continue;
    const std::string args = StrCat("tool-", i, "-args");
    if (t.parameters.empty()) {
      rules += StrCat(args, " ::= object\n");
    } else {
      absl::StatusOr<std::string> r = grammar::JsonSchemaRules(t.parameters, args);
      if (!r.ok()) {
        return FieldError(StrCat("tools[", i, "].function.parameters"),
                          std::string(r.status().message()));
      }
      rules += *r;
    }
    const std::string call =
        StrCat(grammar::GbnfLiteral(StrCat(w.call_open, "{\"name\": ", json(t.name).dump(), ", \"",
                                           w.arguments_key, "\": ")),
               " ", args, " ", grammar::GbnfLiteral(StrCat("}", w.call_close)));
    rules += StrCat("tool-", i, "-call ::= ", call, "\n");
    alternatives.push_back(StrCat("tool-", i, "-call"));
  }
  if (alternatives.empty()) {
    return FieldError("tool_choice", StrCat("no tool is named '", only, "'"));
  }
  std::string root = StrCat("root ::= ", grammar::GbnfLiteral(w.list_open), " call");
  if (parallel) root += StrCat(" (", grammar::GbnfLiteral(w.separator), " call)*");
  root += StrCat(" ", grammar::GbnfLiteral(w.list_close), "\n");
  std::string call = "call ::= ";
  for (size_t i = 0; i < alternatives.size(); ++i) {
    call += StrCat(i > 0 ? " | " : "", alternatives[i]);
  }
  return StrCat(root, call, "\n", rules, grammar::JsonBaseRules());
}

ToolCallStream::ToolCallStream(ToolCallFormat format, std::vector<std::string> tool_names)
    : format_(format), names_(std::move(tool_names)) {}

std::string ToolCallStream::NewId() const {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 gen{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, sizeof(kAlnum) - 2);
  const bool mistral = format_ == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[pick(gen)];
  return id;
}

void ToolCallStream::Emit(std::string_view text, std::string* content) {
  if (after_call_) {
    while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    after_call_ = false;
  }
  size_t end = text.size();
  while (end > 0 && IsSpace(text[end - 1])) --end;
  if (end == 0) {
    whitespace_ += text;
    return;
  }
  *content += whitespace_;
  whitespace_.clear();
  content->append(text.substr(0, end));
  whitespace_ = std::string(text.substr(end));
}

std::optional<tokenizer::ToolCall> ToolCallStream::ReadCall(std::string_view json_text) const {
  std::optional<json> j = ParseJson(Trim(json_text));
  if (!j || !j->is_object()) return std::nullopt;
  auto name = j->find("name");
  if (name == j->end() || !name->is_string()) return std::nullopt;
  const std::string n = name->get<std::string>();
  if (std::find(names_.begin(), names_.end(), n) == names_.end()) return std::nullopt;
  auto args = j->find("arguments");
  if (args == j->end()) args = j->find("parameters");
  json a = json::object();
  if (args != j->end() && !args->is_null()) {
    a = *args;
    if (a.is_string()) {
      std::optional<json> inner = ParseJson(a.get<std::string>());
      if (!inner) return std::nullopt;
      a = *std::move(inner);
    }
    if (!a.is_object()) return std::nullopt;
  }
  return tokenizer::ToolCall{NewId(), n, a.dump()};
}

bool ToolCallStream::ParseCalls(std::string_view text, std::vector<tokenizer::ToolCall>* calls) {
  std::vector<tokenizer::ToolCall> found;
  text = Trim(text);
  if (format_ == ToolCallFormat::kMistral && !text.empty() && text.front() == '[') {
    std::optional<json> j = ParseJson(text);
    if (!j || !j->is_array() || j->empty()) return false;
    for (const json& e : *j) {
      std::optional<tokenizer::ToolCall> c = ReadCall(e.dump());
      if (!c) return false;
      found.push_back(*std::move(c));
    }
  } else {
    // One object (hermes), or objects separated by ";" (llama3_json, and mistral's
    // single-object form).
    size_t pos = 0;
    while (pos < text.size()) {
      if (text[pos] != '{') return false;
      const size_t end = JsonEnd(text, pos);
      if (end == std::string_view::npos) return false;
      std::optional<tokenizer::ToolCall> c = ReadCall(text.substr(pos, end - pos));
      if (!c) return false;
      found.push_back(*std::move(c));
      pos = end;
      while (pos < text.size() && IsSpace(text[pos])) ++pos;
      if (pos < text.size() && text[pos] == ';' && format_ != ToolCallFormat::kHermes) {
        ++pos;
        while (pos < text.size() && IsSpace(text[pos])) ++pos;
      } else if (pos < text.size()) {
        return false;
      }
    }
  }
  if (found.empty()) return false;
  calls_made_ += static_cast<int>(found.size());
  whitespace_.clear();
  after_call_ = true;
  for (tokenizer::ToolCall& c : found) calls->push_back(std::move(c));
  return true;
}

void ToolCallStream::PushHermes(std::string* content, std::vector<tokenizer::ToolCall>* calls) {
  while (true) {
    if (state_ == State::kCall) {
      const size_t j = pending_.find(kHermesClose);
      if (j == std::string::npos) return;
      const std::string body = pending_.substr(0, j);
      pending_.erase(0, j + kHermesClose.size());
      state_ = State::kText;
      if (!ParseCalls(body, calls)) Emit(StrCat(kHermesOpen, body, kHermesClose), content);
      continue;
    }
    const size_t i = pending_.find(kHermesOpen);
    if (i != std::string::npos) {
      Emit(std::string_view(pending_).substr(0, i), content);
      pending_.erase(0, i + kHermesOpen.size());
      state_ = State::kCall;
      continue;
    }
    const size_t held = HeldSuffix(pending_, kHermesOpen);
    Emit(std::string_view(pending_).substr(0, pending_.size() - held), content);
    pending_.erase(0, pending_.size() - held);
    return;
  }
}

void ToolCallStream::Push(std::string_view text, std::string* content,
                          std::vector<tokenizer::ToolCall>* calls) {
  pending_ += text;
  switch (format_) {
    case ToolCallFormat::kHermes:
      state_ = state_ == State::kStart ? State::kText : state_;
      PushHermes(content, calls);
      return;
    case ToolCallFormat::kLlama3Json: {
      if (state_ == State::kStart) {
        const std::string_view t = Trim(pending_);
        if (t.empty() || (t.size() < kPythonTag.size() && kPythonTag.substr(0, t.size()) == t)) {
          return;  // undecided
        }
        state_ = t.front() == '{' || t.substr(0, kPythonTag.size()) == kPythonTag ? State::kCall
                                                                                  : State::kText;
      }
      if (state_ == State::kText) {
        Emit(pending_, content);
        pending_.clear();
      }
      return;
    }
    case ToolCallFormat::kMistral: {
      if (state_ == State::kCall) return;
      state_ = State::kText;
      const size_t i = pending_.find(kMistralTag);
      if (i != std::string::npos) {
        Emit(std::string_view(pending_).substr(0, i), content);
        pending_.erase(0, i + kMistralTag.size());
        whitespace_.clear();
        state_ = State::kCall;
        return;
      }
      const size_t held = HeldSuffix(pending_, kMistralTag);
      Emit(std::string_view(pending_).substr(0, pending_.size() - held), content);
      pending_.erase(0, pending_.size() - held);
      return;
    }
  }
}

void ToolCallStream::Finish(std::string* content, std::vector<tokenizer::ToolCall>* calls) {
  if (state_ == State::kCall) {
    std::string_view body = pending_;
    std::string_view prefix;
    if (format_ == ToolCallFormat::kHermes) prefix = kHermesOpen;
    if (format_ == ToolCallFormat::kMistral) prefix = kMistralTag;
    if (format_ == ToolCallFormat::kLlama3Json) {
      body = Trim(body);
      if (body.substr(0, kPythonTag.size()) == kPythonTag) body.remove_prefix(kPythonTag.size());
    }
    if (!ParseCalls(body, calls)) {
      after_call_ = false;
      Emit(StrCat(prefix, pending_), content);
    }
  } else {
    Emit(pending_, content);
  }
  pending_.clear();
  state_ = State::kText;
  if (calls_made_ == 0) *content += whitespace_;
  whitespace_.clear();
}

}  // namespace tandem::router
