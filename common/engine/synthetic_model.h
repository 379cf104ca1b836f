// Synthetic models: named Llama-family shapes with random weights, so benchmarks and
// device checks need no download (a GPU machine has no network, and a real 8B model
// does not fit the checkout that travels to it).
//
//   llama3-8b   32 layers, hidden 4096, 32 heads, 8 KV heads, FFN 14336, vocab 128256,
//               RoPE θ 500000, context 8192 (Llama 3 8B's numbers)
//   llama3-1b   16 layers, hidden 2048, 32 heads, 8 KV heads, FFN 8192, vocab 128256
//   tiny        4 layers, hidden 256, 8 heads, 2 KV heads, FFN 640, vocab 1024 (tests)
//   tiny-moe    tiny's attention, each FFN 16 experts 128 wide of which 4 picked (as
//               Mixtral: softmax, renormalised) (tests)
//
// The weights are ModelWeights::Random's; the tokens are plain ids (no tokenizer).
#ifndef TANDEM_COMMON_ENGINE_SYNTHETIC_MODEL_H_
#define TANDEM_COMMON_ENGINE_SYNTHETIC_MODEL_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"

namespace tandem::engine {

std::vector<std::string> SyntheticShapes();

// InvalidArgument naming the known shapes for an unknown one.
absl::StatusOr<model::ModelConfig> SyntheticConfig(std::string_view shape);

}  // namespace tandem::engine

#endif  // TANDEM_COMMON_ENGINE_SYNTHETIC_MODEL_H_
