#include "common/tokenizer/vocab.h"

#include "absl/status/status.h"
#include "common/util/status_macros.h"
#include "common/util/strings.h"

namespace tandem::tokenizer {

using model::ArrayElement;
using model::GgufArray;
using model::GgufFile;
using model::GgufValueType;

namespace {

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("tokenizer: ", what));
}

absl::StatusOr<int32_t> OptionalId(const GgufFile& f, std::string_view key, int32_t n_vocab) {
  if (f.Find(key) == nullptr) return -1;
  ASSIGN_OR_RETURN(int64_t id, f.GetInt(key));
  if (id < -1 || id >= n_vocab) {
    return Invalid(StrCat(key, " = ", id, " is outside the vocabulary of ", n_vocab));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<bool> OptionalBool(const GgufFile& f, std::string_view key, bool fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetBool(key);
}

}  // namespace

absl::StatusOr<Vocab> Vocab::FromGguf(const GgufFile& f) {
  Vocab v;
  ASSIGN_OR_RETURN(std::string_view model_name, f.GetString("tokenizer.ggml.model"));
  v.model_name = std::string(model_name);
  if (model_name == "gpt2") {
    v.model = TokenizerModel::kByteLevelBpe;
  } else if (model_name == "llama") {
    v.model = TokenizerModel::kSentencePieceBpe;
  } else if (model_name == "gemma4") {
    v.model = TokenizerModel::kCodePointBpe;
  } else {
    return absl::UnimplementedError(StrCat("tokenizer: tokenizer.ggml.model '", model_name,
                                           "' is not supported (gpt2, llama, gemma4)"));
  }
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view pre, f.GetString("tokenizer.ggml.pre"));
    v.pre = std::string(pre);
  }
  // GGUF has no key for it: the families whose tokenizer.json sets it.
  for (std::string_view name :
       {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "tekken", "glm4"}) {
    if (v.pre == name) v.ignore_merges = true;
  }
  // tandem's own key, written for Hugging Face directories whose tokenizer.json has the
  // normalizer; a GGUF from llama.cpp's converter has none, and llama.cpp normalizes
  // nothing, so neither does tandem there.
  if (f.Find("tandem.tokenizer.normalizer") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view form, f.GetString("tandem.tokenizer.normalizer"));
    if (form != "NFC") {
      return absl::UnimplementedError(
          StrCat("tokenizer: tandem.tokenizer.normalizer '", form, "' is not supported (NFC)"));
    }
    v.normalization = Normalization::kNfc;
  }
  // tandem's own key, written for Hugging Face directories (their tokenizer.json says).
  if (f.Find("tokenizer.ggml.ignore_merges") != nullptr) {
    ASSIGN_OR_RETURN(v.ignore_merges, f.GetBool("tokenizer.ggml.ignore_merges"));
  }

  ASSIGN_OR_RETURN(const GgufArray* tokens,
                   f.GetArray("tokenizer.ggml.tokens", GgufValueType::kString));
  if (tokens->count == 0 || tokens->count > INT32_MAX) {
    return Invalid(StrCat("tokenizer.ggml.tokens has ", tokens->count, " entries"));
  }
  const int32_t n = static_cast<int32_t>(tokens->count);
  v.tokens.assign(tokens->strings.begin(), tokens->strings.end());

  v.types.assign(n, TokenType::kNormal);
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    ASSIGN_OR_RETURN(const GgufArray* types,
                     f.GetArray("tokenizer.ggml.token_type", GgufValueType::kInt32));
    if (types->count != tokens->count) {
      return Invalid(
          StrCat("tokenizer.ggml.token_type has ", types->count, " entries for ", n, " tokens"));
    }
    for (int32_t i = 0; i < n; ++i) {
      int32_t t = ArrayElement<int32_t>(*types, i);
      if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
        return Invalid(StrCat("token ", i, " has unknown token type ", t));
      }
      v.types[i] = static_cast<TokenType>(t);
    }
  }
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    ASSIGN_OR_RETURN(const GgufArray* scores,
                     f.GetArray("tokenizer.ggml.scores", GgufValueType::kFloat32));
    if (scores->count != tokens->count) {
      return Invalid(
          StrCat("tokenizer.ggml.scores has ", scores->count, " entries for ", n, " tokens"));
    }
    v.scores.resize(n);
    for (int32_t i = 0; i < n; ++i) v.scores[i] = ArrayElement<float>(*scores, i);
  } else if (v.model == TokenizerModel::kSentencePieceBpe) {
    return Invalid("a SentencePiece vocabulary needs tokenizer.ggml.scores");
  }
  if (f.Find("tokenizer.ggml.merges") != nullptr) {
    ASSIGN_OR_RETURN(const GgufArray* merges,
                     f.GetArray("tokenizer.ggml.merges", GgufValueType::kString));
    v.merges.assign(merges->strings.begin(), merges->strings.end());
  } else if (v.model != TokenizerModel::kSentencePieceBpe) {
    return Invalid("a BPE vocabulary needs tokenizer.ggml.merges");
  }

  v.token_to_id.reserve(n);
  for (int32_t i = 0; i < n; ++i) v.token_to_id[v.tokens[i]] = i;

  ASSIGN_OR_RETURN(v.bos_id, OptionalId(f, "tokenizer.ggml.bos_token_id", n));
  ASSIGN_OR_RETURN(v.eos_id, OptionalId(f, "tokenizer.ggml.eos_token_id", n));
  ASSIGN_OR_RETURN(v.unk_id, OptionalId(f, "tokenizer.ggml.unknown_token_id", n));
  ASSIGN_OR_RETURN(v.pad_id, OptionalId(f, "tokenizer.ggml.padding_token_id", n));
  const bool spm = v.model == TokenizerModel::kSentencePieceBpe;
  // Defaults follow llama.cpp and transformers: SentencePiece vocabularies add BOS and
  // the "▁" prefix unless the file says otherwise.
  ASSIGN_OR_RETURN(v.add_bos,
                   OptionalBool(f, "tokenizer.ggml.add_bos_token", spm && v.bos_id >= 0));
  // Gemma 4 always begins with BOS; some converted files say otherwise (llama.cpp
  // overrides them the same way).
  if (v.model == TokenizerModel::kCodePointBpe && v.bos_id >= 0) v.add_bos = true;
  ASSIGN_OR_RETURN(v.add_eos, OptionalBool(f, "tokenizer.ggml.add_eos_token", false));
  ASSIGN_OR_RETURN(v.add_space_prefix, OptionalBool(f, "tokenizer.ggml.add_space_prefix", spm));
  if (f.Find("tandem.tokenizer.metaspace") != nullptr) {
    ASSIGN_OR_RETURN(std::string_view scheme, f.GetString("tandem.tokenizer.metaspace"));
    if (scheme == "always") {
      v.space_prefix = SpacePrefix::kMetaspaceAlways;
    } else if (scheme == "first") {
      v.space_prefix = SpacePrefix::kMetaspaceFirst;
    } else {
      return Invalid(StrCat("tandem.tokenizer.metaspace is '", scheme, "' (always or first)"));
    }
  }
  if (v.add_bos && v.bos_id < 0)
    return Invalid("add_bos_token is set but there is no bos_token_id");
  if (v.add_eos && v.eos_id < 0)
    return Invalid("add_eos_token is set but there is no eos_token_id");
  return v;
}

}  // namespace tandem::tokenizer
