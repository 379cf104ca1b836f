// `tandem tokenize`: prints the token ids of a text (from --text or stdin).
#ifndef TANDEM_CLI_TOKENIZE_COMMAND_H_
#define TANDEM_CLI_TOKENIZE_COMMAND_H_

#include <optional>
#include <string>

#include "CLI/CLI.hpp"

namespace tandem::cli {

struct TokenizeOptions {
  std::string model;
  std::optional<std::string> text;  // stdin when absent
  bool json = false;
  bool show_pieces = false;
  bool no_special = false;        // do not add BOS/EOS
  bool no_parse_special = false;  // special-token text is ordinary text
};

void AddTokenizeCommand(CLI::App& app, TokenizeOptions* options);

// Process exit code: 0 on success, 1 on error (message on stderr).
int RunTokenize(const TokenizeOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_CLI_TOKENIZE_COMMAND_H_
