#include "common/rpc/engine_convert.h"

#include <algorithm>

#include "common/util/strings.h"
#include "kernels/cpu/matmul_q8.h"

namespace tandem::rpc {

absl::StatusOr<engine::SamplingParams> FromProto(const v1::EngineSamplingParams& p) {
  if (p.logit_bias_ids_size() != p.logit_bias_values_size()) {
    return absl::InvalidArgumentError(
        StrCat("params.logit_bias_values: ", p.logit_bias_values_size(), " values for ",
               p.logit_bias_ids_size(), " ids"));
  }
  engine::SamplingParams s;
  s.max_tokens = p.max_tokens();
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.seed = p.seed();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.repetition_penalty = p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.logprobs = p.logprobs();
  s.ignore_eos = p.ignore_eos();
  s.disable_speculation = p.disable_speculation();
  s.priority = p.priority();
  s.grammar = p.grammar();
  for (int i = 0; i < p.logit_bias_ids_size(); ++i)
    s.logit_bias.emplace_back(p.logit_bias_ids(i), p.logit_bias_values(i));
  return s;
}

v1::WorkerFinishReason ToProto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop:
      return v1::WORKER_FINISH_REASON_STOP;
    case engine::FinishReason::kLength:
      return v1::WORKER_FINISH_REASON_LENGTH;
    case engine::FinishReason::kNone:
    case engine::FinishReason::kCancelled:
      return v1::WORKER_FINISH_REASON_UNSPECIFIED;
  }
  return v1::WORKER_FINISH_REASON_UNSPECIFIED;
}

void ToProto(const engine::TokenEvent& ev, v1::WorkerLogprob* out) {
  out->set_logprob(ev.logprob);
  for (const auto& t : ev.top_logprobs) {
    out->add_top_token_ids(t.token);
    out->add_top_logprobs(t.logprob);
  }
}

void ToProto(const engine::EngineStats& s, v1::WorkerStats* out) {
  out->set_num_blocks(s.blocks.num_blocks);
  out->set_block_size(s.blocks.block_size);
  out->set_free_blocks(s.blocks.free_blocks);
  out->set_cached_blocks(s.blocks.cached_blocks);
  out->set_running(s.running);
  out->set_waiting(s.waiting);
  out->set_preemptions_total(s.preemptions);
  out->set_generated_tokens_total(s.generated_tokens);
  out->set_prefix_query_tokens_total(s.blocks.prefix_query_tokens);
  out->set_prefix_hit_tokens_total(s.blocks.prefix_hit_tokens);
  out->set_evicted_blocks_total(s.blocks.evicted_blocks);
  out->set_prefill_chunks_total(s.prefill_chunks);
  out->set_prompt_tokens_computed_total(s.prompt_tokens_computed);
}

v1::KvLayoutFingerprint MakeFingerprint(const kv::KvLayout& layout, const std::string& model_hash,
                                        std::string_view device, kernels::CpuMath cpu_math) {
  v1::KvLayoutFingerprint f;
  f.set_model_hash(model_hash);
  const bool cpu = device == "cpu" || device == "cpu-fence";
  const kernels::CpuMath math = cpu ? cpu_math : kernels::CpuMath::kExact;
  std::string name(kernels::CpuMathName(math));
  if (math == kernels::CpuMath::kFast) name += StrCat(".", kernels::kQ8ArithmeticVersion);
  f.set_cpu_math(name);
  switch (layout.dtype) {
    case kv::KvDtype::kF32:
      f.set_dtype(v1::KV_DTYPE_FLOAT32);
      break;
    case kv::KvDtype::kBF16:
      f.set_dtype(v1::KV_DTYPE_BFLOAT16);
      break;
    case kv::KvDtype::kF16:
      f.set_dtype(v1::KV_DTYPE_FLOAT16);
      break;
  }
  switch (layout.order) {
    case kv::KvOrder::kKTransposed:
      f.set_element_order(v1::KV_ELEMENT_ORDER_K_TRANSPOSED);
      break;
  }
  f.set_block_size(layout.block_size);
  f.set_num_layers(layout.n_layers);
  f.set_num_kv_heads(layout.n_kv_heads);
  f.set_head_dim(layout.head_dim);
  return f;
}

}  // namespace tandem::rpc
