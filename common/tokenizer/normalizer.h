// Normalizer: the Unicode normalization a vocabulary applies to text before it is
// pre-tokenized (Hugging Face tokenizers' `normalizer` section).
//
// Only NFC is needed so far: the tokenizer.json of Qwen2, Qwen2.5, Qwen3, Qwen3.5 and
// GPT-NeoX (MPT, Pythia) composes its input. Hugging Face directories carry it
// (Vocab::normalization, from the tandem.tokenizer.normalizer key the conversion
// writes); a GGUF does not, and llama.cpp normalizes none, so neither does tandem.
// Normalize() is a pure function of its input (utf8proc's Unicode tables) and may be
// called from any thread.
#ifndef TANDEM_COMMON_TOKENIZER_NORMALIZER_H_
#define TANDEM_COMMON_TOKENIZER_NORMALIZER_H_

#include <string>
#include <string_view>

namespace tandem::tokenizer {

enum class Normalization {
  kNone,
  kNfc,  // canonical decomposition, then canonical composition
};

// `text` (valid UTF-8) in the normal form. Text already in it comes back unchanged.
std::string Normalize(Normalization form, std::string_view text);

}  // namespace tandem::tokenizer

#endif  // TANDEM_COMMON_TOKENIZER_NORMALIZER_H_
