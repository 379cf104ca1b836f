#include "cli/tokenize_command.h"

#include <cstdio>
#include <iostream>
#include <iterator>

#include "common/model/gguf_file.h"
#include "common/model/hf_directory.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

void AddTokenizeCommand(CLI::App& app, TokenizeOptions* o) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("--model,-m", o->model, "GGUF model or vocab-only file")->required();
  cmd->add_option("--text,-t", o->text, "Text to tokenize (default: read stdin)");
  cmd->add_flag("--json", o->json, "Print a JSON array of ids");
  cmd->add_flag("--show-pieces", o->show_pieces, "Print one line per token: id and its text");
  cmd->add_flag("--no-special", o->no_special, "Do not add BOS/EOS even if the model asks");
  cmd->add_flag("--no-parse-special", o->no_parse_special,
                "Treat control-token text (e.g. <|im_start|>) as plain text");
}

int RunTokenize(const TokenizeOptions& o) {
  auto file = model::OpenModel(o.model);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", o.model.c_str(),
                 std::string(tok.status().message()).c_str());
    return 1;
  }
  std::string text =
      o.text.has_value() ? *o.text : std::string(std::istreambuf_iterator<char>(std::cin), {});
  tokenizer::EncodeOptions eo;
  eo.add_special = !o.no_special;
  eo.parse_special = !o.no_parse_special;
  auto ids = (*tok)->Encode(text, eo);
  if (!ids.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(ids.status().message()).c_str());
    return 1;
  }
  if (o.json) {
    std::printf("%s\n", nlohmann::json(*ids).dump().c_str());
  } else if (o.show_pieces) {
    for (int32_t id : *ids) {
      nlohmann::json piece = (*tok)->vocab().tokens[id];
      std::printf("%d\t%s\n", id,
                  piece.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  } else {
    for (size_t i = 0; i < ids->size(); ++i) std::printf(i ? " %d" : "%d", (*ids)[i]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace tandem::cli
