#include "cli/inspect_command.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/engine/model_weights.h"
#include "common/model/ggml_type.h"
#include "common/model/gguf_file.h"
#include "common/model/hf_directory.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/strings.h"
#include "kernels/cpu/matmul_q8.h"

namespace tandem::cli {

namespace {

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30)) return StrCat(b / double(1ull << 30)).substr(0, 6) + " GiB";
  if (b >= (1ull << 20)) return StrCat(b / double(1ull << 20)).substr(0, 6) + " MiB";
  if (b >= (1ull << 10)) return StrCat(b / double(1ull << 10)).substr(0, 6) + " KiB";
  return StrCat(b, " B");
}

std::string ValueSummary(const model::GgufValue& v) {
  using model::GgufArray;
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string_view>) {
          std::string s(x.substr(0, 80));
          for (char& c : s)
            if (c == '\n') c = ' ';
          return StrCat("\"", s, x.size() > 80 ? "...\"" : "\"");
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          return StrCat("[", model::GgufValueTypeName(x.element_type), " × ", x.count, "]");
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
          return StrCat(int{x});
        } else {
          return StrCat(x);
        }
      },
      v);
}

// Whether tandem can serve the file, and if not why: the config (architecture, shapes,
// special ids), then what loading refuses (a missing or misshapen tensor, a type it has
// no decoder for, a feature it lacks: engine::ModelWeights::Check, which converts
// nothing). Also every tensor type without a decoder, used by the model or not, and, when
// servable, the memory its weights take as stored and converted to F32.
void PrintSupport(const model::GgufFile& f) {
  std::vector<std::string> problems;
  absl::StatusOr<engine::ModelWeights::Footprint> footprint =
      absl::FailedPreconditionError("not checked");
  if (auto c = model::ModelConfig::FromGguf(f); !c.ok()) {
    problems.push_back(StrCat("config: ", c.status().message()));
  } else {
    footprint = engine::ModelWeights::Check(f, *c);
    if (!footprint.ok()) problems.push_back(std::string(footprint.status().message()));
  }
  std::map<std::string, std::vector<std::string>> no_decoder;  // type → tensor names
  uint64_t matrix_bytes = 0, integer_bytes = 0;  // 2-D weights; those --cpu-math fast covers
  for (const auto& t : f.tensors()) {
    const model::GgmlTypeTraits& traits = model::Traits(t.type);
    if (!traits.can_dequantize) no_decoder[std::string(traits.name)].push_back(std::string(t.name));
    if (t.n_dims == 2 || t.n_dims == 3) {  // 3: a mixture of experts' stacked experts
      matrix_bytes += t.n_bytes;
      if (kernels::Q8Supports(t.type)) integer_bytes += t.n_bytes;
    }
  }
  std::printf("\nsupport:\n  servable          %s\n", problems.empty() ? "yes" : "no");
  for (const std::string& p : problems) std::printf("  unsupported       %s\n", p.c_str());
  for (const auto& [type, names] : no_decoder) {
    std::printf("  not decodable     type %s: no decoder in tandem (%zu %s%s)\n", type.c_str(),
                names.size(), names.size() == 1 ? "tensor: " : "tensors, first ", names[0].c_str());
  }
  if (footprint.ok()) {
    std::printf("  weights in memory %s as stored + %s converted to F32 at load\n",
                HumanBytes(footprint->stored_bytes).c_str(),
                HumanBytes(footprint->converted_bytes).c_str());
  }
  std::printf(
      "  --cpu-math fast   integer dot products (%s) for %s of %s of matrices "
      "(every block-quantized type); the rest, and --cpu-math exact, in float32\n",
      kernels::MatMulQ8Isa(), HumanBytes(integer_bytes).c_str(), HumanBytes(matrix_bytes).c_str());
}

}  // namespace

void AddInspectCommand(CLI::App& app, InspectOptions* o) {
  CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF file's config, tensors and tokenizer");
  cmd->add_option("--model,-m", o->model, "GGUF file")->required();
  cmd->add_flag("--metadata", o->metadata, "Also list every metadata key");
}

int RunInspect(const InspectOptions& o) {
  auto file = model::OpenModel(o.model);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  const model::GgufFile& f = **file;
  if (f.assembled()) {
    int64_t weight_bytes = 0;
    for (const auto& t : f.tensors()) weight_bytes += static_cast<int64_t>(t.n_bytes);
    std::printf(
        "directory: %s\n  Hugging Face model read as GGUF: %zu metadata keys, %zu tensors"
        " (%s)\n",
        o.model.c_str(), f.metadata().size(), f.tensors().size(), HumanBytes(weight_bytes).c_str());
  } else {
    std::printf("file: %s\n  GGUF v%u, %s, %zu metadata keys, %zu tensors, alignment %u\n",
                o.model.c_str(), f.version(), HumanBytes(f.file_size()).c_str(),
                f.metadata().size(), f.tensors().size(), f.alignment());
  }

  std::printf("\nconfig:\n");
  if (auto c = model::ModelConfig::FromGguf(f); c.ok()) {
    std::printf("  architecture      %s (%s)\n", c->architecture.c_str(), c->name.c_str());
    std::printf("  layers            %lld\n", static_cast<long long>(c->n_layers));
    std::printf("  hidden size       %lld\n", static_cast<long long>(c->hidden_size));
    std::printf("  heads / kv heads  %lld / %lld (head dim %lld)\n",
                static_cast<long long>(c->n_heads), static_cast<long long>(c->n_kv_heads),
                static_cast<long long>(c->head_dim));
    std::printf("  ffn size          %lld\n", static_cast<long long>(c->ffn_size));
    if (c->moe.experts > 0) {
      const model::MoeConfig& m = c->moe;
      const char* gating = m.gating == model::ExpertGating::kSigmoid ? "sigmoid"
                           : m.gating == model::ExpertGating::kSoftmaxWeight
                               ? "softmax of the picked"
                               : "softmax";
      std::printf("  experts           %lld, %lld used per token, each %lld wide (%s gating%s",
                  static_cast<long long>(m.experts), static_cast<long long>(m.used),
                  static_cast<long long>(m.ffn_size), gating,
                  m.weights_norm ? ", weights renormalised" : "");
      if (m.weights_scale != 1.0) std::printf(", scaled by %g", m.weights_scale);
      if (m.shared_ffn_size > 0) {
        std::printf("; a shared expert %lld wide", static_cast<long long>(m.shared_ffn_size));
      }
      if (m.leading_dense_layers > 0) {
        std::printf("; the first %lld layers dense",
                    static_cast<long long>(m.leading_dense_layers));
      }
      std::printf(")\n");
    }
    const model::ModelConfig::ParameterCount params = c->Parameters();
    std::printf("  parameters        %.4g B, %.4g B read per token\n", params.total / 1e9,
                params.per_token / 1e9);
    std::printf("  vocab             %lld\n", static_cast<long long>(c->vocab_size));
    std::printf("  context length    %lld\n", static_cast<long long>(c->context_length));
    std::printf("  rms norm eps      %g\n", c->rms_norm_eps);
    std::printf("  rope theta        %g (dims %lld, scaling %s)\n", c->rope_theta,
                static_cast<long long>(c->rope_dim),
                c->rope_scaling.type == model::RopeScalingType::kNone     ? "none"
                : c->rope_scaling.type == model::RopeScalingType::kLinear ? "linear"
                : c->rope_scaling.type == model::RopeScalingType::kYarn   ? "yarn"
                                                                          : "llama3");
    if (c->sliding_window > 0) {
      int64_t local = 0;
      for (int64_t l = 0; l < c->n_layers; ++l) local += c->LayerIsLocal(l) ? 1 : 0;
      std::printf("  sliding window    %lld keys on %lld of %lld layers",
                  static_cast<long long>(c->sliding_window), static_cast<long long>(local),
                  static_cast<long long>(c->n_layers));
      if (c->rope_theta_local > 0) std::printf(" (their rope theta %g)", c->rope_theta_local);
      std::printf("\n");
    }
    std::printf("  ffn               %s%s\n",
                c->ffn_activation == model::FfnActivation::kGeluTanh ? "GeGLU" : "SwiGLU",
                c->post_norms ? ", norms after attention and FFN" : "");
    if (c->attn_softcap > 0 || c->final_softcap > 0) {
      std::printf("  soft-capping      attention %g, logits %g\n", c->attn_softcap,
                  c->final_softcap);
    }
    std::printf("  tied embeddings   %s\n", c->tied_embeddings ? "yes" : "no");
    std::printf("  kv bytes/token    %lld (f32), %lld (bf16)\n",
                static_cast<long long>(c->KvElementsPerToken() * 4),
                static_cast<long long>(c->KvElementsPerToken() * 2));
    std::printf("  special ids       bos %d, eos %d, pad %d, unk %d\n", c->bos_token_id,
                c->eos_token_id, c->pad_token_id, c->unk_token_id);
    std::printf("  chat template     %s\n", c->chat_template.empty() ? "none" : "yes");
  } else {
    std::printf("  (not a runnable model: %s)\n", std::string(c.status().message()).c_str());
  }

  std::printf("\ntokenizer:\n");
  if (auto t = tokenizer::Tokenizer::FromGguf(f); t.ok()) {
    const auto& v = (*t)->vocab();
    std::printf("  model             %s (pre-tokenizer '%s')\n", v.model_name.c_str(),
                v.pre.c_str());
    std::printf("  vocab             %d tokens, %zu merges, %zu special\n", v.size(),
                v.merges.size(), (*t)->num_special_tokens());
    std::printf("  add bos / eos     %s / %s, space prefix %s\n", v.add_bos ? "yes" : "no",
                v.add_eos ? "yes" : "no", v.add_space_prefix ? "yes" : "no");
  } else {
    std::printf("  (none: %s)\n", std::string(t.status().message()).c_str());
  }

  if (!f.tensors().empty()) {
    std::printf("\ntensors:\n  %-32s %-6s %-22s %12s\n", "name", "type", "shape (ne0, ne1, ...)",
                "bytes");
    std::map<std::string, std::pair<int, uint64_t>> by_type;
    uint64_t total = 0;
    for (const auto& t : f.tensors()) {
      std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
      std::string name(model::GgmlTypeName(t.type));
      std::printf("  %-32.*s %-6s %-22s %12llu\n", static_cast<int>(t.name.size()), t.name.data(),
                  name.c_str(), StrCat("[", Join(shape, ", "), "]").c_str(),
                  static_cast<unsigned long long>(t.n_bytes));
      by_type[name].first++;
      by_type[name].second += t.n_bytes;
      total += t.n_bytes;
    }
    std::printf("  total %s:", HumanBytes(total).c_str());
    for (const auto& [name, c] : by_type) {
      std::printf(" %s ×%d (%s)", name.c_str(), c.first, HumanBytes(c.second).c_str());
    }
    std::printf("\n");
  }

  PrintSupport(f);

  if (o.metadata) {
    std::printf("\nmetadata:\n");
    for (const auto& kv : f.metadata()) {
      std::printf("  %-44.*s %s\n", static_cast<int>(kv.key.size()), kv.key.data(),
                  ValueSummary(kv.value).c_str());
    }
  }
  return 0;
}

}  // namespace tandem::cli
