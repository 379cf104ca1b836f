// HfDirectory: a Hugging Face model directory (`config.json`, `*.safetensors`,
// `tokenizer.json`, `tokenizer_config.json`) read as the GGUF llama.cpp's converter
// would write for it — without writing it. The result is a GgufFile assembled in
// memory (GgufFile::Assemble), so the config, weights, tokenizer, inspect and serving
// paths read a directory exactly as they read a file.
//
// What the conversion does, per llama.cpp's converter: config.json keys become the
// `<arch>.*` metadata; tensors keep their dtype (F32, F16, BF16) and data in the
// memory-mapped safetensors (sharded ones through `model.safetensors.index.json`),
// renamed to GGUF names; llama and mistral Q/K rows are permuted for adjacent-pair RoPE
// and Gemma's norm weights become 1 + w (float32), in memory owned by the result.
// tokenizer.json's byte-level BPE (vocabulary, merges, added tokens as CONTROL or
// USER_DEFINED, its pre-tokenizer recognised as a `tokenizer.ggml.pre` family,
// ignore_merges) and tokenizer_config.json's special tokens, add_bos_token and chat
// template become `tokenizer.ggml.*` (chat_template.jinja is read too). A directory
// without tokenizer files loads without a tokenizer, as a GGUF without one does; one
// with tokenizer files but no config.json is a vocabulary only (for `tandem tokenize`).
//
// Every file is untrusted input: JSON that does not parse or has the wrong shape, an
// architecture, dtype, tensor name, pre-tokenizer or normalizer tandem does not handle,
// a missing or duplicated tensor — each is an error naming the file and the field.
#ifndef TANDEM_COMMON_MODEL_HF_DIRECTORY_H_
#define TANDEM_COMMON_MODEL_HF_DIRECTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/gguf_file.h"

namespace tandem::model {

absl::StatusOr<std::unique_ptr<GgufFile>> OpenHfDirectory(const std::string& dir);

// A GGUF file (mapped or copied as `residence` says), or a Hugging Face directory
// (OpenHfDirectory; its safetensors are mapped).
absl::StatusOr<std::unique_ptr<GgufFile>> OpenModel(
    const std::string& path, FileResidence residence = FileResidence::kMapped);

}  // namespace tandem::model

#endif  // TANDEM_COMMON_MODEL_HF_DIRECTORY_H_
