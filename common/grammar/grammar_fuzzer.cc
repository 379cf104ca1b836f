// libFuzzer target: every way a request's constraint becomes a grammar (GBNF, a
// regular expression, a JSON Schema), then the matcher and a token mask on it.
//
// The first byte picks the source kind; the rest, up to the first NUL, is the source;
// what follows the NUL is fed to the matcher byte by byte. Compilation succeeds or
// fails with InvalidArgument; matching stays within the matcher's bounds; the mask
// over a small vocabulary agrees with checking each token alone. Anything else — a
// crash, a sanitizer report, another status code, a hang caught by -timeout — is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/grammar/constraint.h"
#include "common/grammar/grammar.h"
#include "common/grammar/json_schema_grammar.h"
#include "common/grammar/regex_grammar.h"

using namespace tandem::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int kind = data[0] % 4;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view source = rest.substr(0, nul);
  const std::string_view input = nul == std::string_view::npos ? "" : rest.substr(nul + 1);

  absl::StatusOr<std::string> gbnf = std::string(source);
  if (kind == 1 || kind == 2) {
    RegexOptions o;
    o.json_string = kind == 2;
    o.search = kind == 2;
    auto body = RegexToGbnf(source, o);
    gbnf = body.ok() ? absl::StatusOr<std::string>("root ::= " + *body + "\n") : body.status();
  } else if (kind == 3) {
    gbnf = JsonSchemaToGbnf(source);
  }
  if (!gbnf.ok()) {
    if (gbnf.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  auto g = Grammar::Compile(*gbnf);
  if (!g.ok()) {
    // A compiler's own output that does not compile is a finding, except a grammar
    // that accepts nothing (a schema can say that) or grows past the size limit.
    if (g.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    const std::string message(g.status().message());
    if (kind != 0 && message.find("accepts no string") == std::string::npos &&
        message.find("more than") == std::string::npos) {
      std::abort();
    }
    return 0;
  }
  auto grammar = std::make_shared<const Grammar>(*std::move(g));
  static const std::vector<std::string> kVocab = {
      "a", "b",    "{",        "}",  "\"",    ":", ",", " ",  "\n", "0", "12", "true", "null",
      "é", "\xE4", "\xB8\x96", "ab", "\"a\"", "[", "]", "\\", "-",  ".", "e",  "",     "x"};
  static const auto masker = std::make_shared<const TokenMasker>(kVocab, std::vector<int32_t>{24});
  Constraint c(grammar, masker);
  GrammarMatcher probe_base(grammar);
  for (size_t i = 0; i < input.size() && i < 64; ++i) {
    const TokenMask& mask = c.Allowed();
    // The mask agrees with trying each token alone.
    for (int32_t id = 0; id < masker->vocab_size(); ++id) {
      if (id == 24) continue;
      GrammarMatcher probe = probe_base;
      const bool want = !kVocab[id].empty() && probe.Accept(kVocab[id]);
      if (Allowed(mask, id) != want && !probe.exhausted()) std::abort();
    }
    const int32_t id = static_cast<uint8_t>(input[i]) % masker->vocab_size();
    if (c.Accept(id).ok() && id != 24) probe_base.Accept(kVocab[id]);
  }
  return 0;
}
