#include "common/rpc/worker_main.h"

#include <cstdlib>
#include <string>

#include "common/util/status_macros.h"
#include "kernels/backend_factory.h"

namespace tandem::rpc {

void AddDeviceFlags(CLI::App& app, std::string* device, int* gpu, bool* batch_invariant,
                    kv::KvDtype* kv_dtype, kernels::CpuMath* cpu_math) {
  if (const char* d = std::getenv("TANDEM_DEVICE"); d != nullptr && *d != '\0') *device = d;
  app.add_option("--device", *device, "Compute backend (default: $TANDEM_DEVICE, else cpu)")
      ->check(CLI::IsMember(kernels::DeviceNames()))
      ->capture_default_str();
  app.add_option("--gpu", *gpu, "CUDA device index (--device cuda)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--batch-invariant", *batch_invariant,
               "A request's tokens do not depend on what it is batched with (the CPU always; "
               "on a GPU: pinned GEMM algorithms, fixed attention splits, no tensor-core "
               "attention)");
  AddKvDtypeFlag(app, kv_dtype);
  if (cpu_math == nullptr) return;
  app.add_option_function<std::string>(
         "--cpu-math",
         [cpu_math](const std::string& name) {
           absl::StatusOr<kernels::CpuMath> m = kernels::ParseCpuMath(name);
           if (!m.ok()) throw CLI::ValidationError(std::string(m.status().message()));
           *cpu_math = *m;
         },
         "CPU arithmetic for quantized weights: exact (float32, within 1e-4 of transformers) "
         "or fast (8-bit activations, integer dot products for every block-quantized type: "
         "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K … Q6_K, IQ4_XS)")
      ->default_str(std::string(kernels::CpuMathName(*cpu_math)));
}

void AddKvDtypeFlag(CLI::App& app, kv::KvDtype* kv_dtype) {
  app.add_option_function<std::string>(
         "--kv-dtype",
         [kv_dtype](const std::string& name) {
           absl::StatusOr<kv::KvDtype> d = kv::ParseKvDtype(name);
           if (!d.ok()) throw CLI::ValidationError(std::string(d.status().message()));
           *kv_dtype = *d;
         },
         "KV cache element type: f32, bf16, f16")
      ->default_str(std::string(kv::KvDtypeName(*kv_dtype)));
}

void AddEngineFlags(CLI::App& app, engine::EngineOptions* o) {
  AddDeviceFlags(app, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype, &o->cpu_math);
  app.add_flag("--enforce-eager", o->enforce_eager,
               "Run every pass eagerly: no CUDA graphs for decode steps")
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                 "Fraction of the GPU's memory this worker may use; sizes the KV pool from what "
                 "weights and activations leave (instead of --kv-cache-bytes; 0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--threads,-t", o->num_threads, "Compute threads (0: every core)")
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", o->kv_cache_bytes, "KV cache memory budget")
      ->capture_default_str();
  app.add_option("--block-size", o->block_size, "Tokens per KV block")->capture_default_str();
  app.add_option("--max-running", o->scheduler.max_running, "Sequences per batch")
      ->capture_default_str();
  app.add_option("--max-batched-tokens", o->scheduler.max_batched_tokens, "Tokens per forward pass")
      ->capture_default_str();
  app.add_option("--max-prefill-chunk", o->scheduler.max_prefill_chunk,
                 "Prompt tokens one sequence computes per step (chunked prefill; 0: whole prompt)")
      ->capture_default_str();
  app.add_flag("--prefix-caching,!--no-prefix-caching", o->prefix_caching,
               "Reuse the K/V of cached prompt prefixes")
      ->capture_default_str();
}

void AddSpeculativeFlags(CLI::App& app, SpeculativeFlags* flags,
                         engine::EngineOptions::Speculative* o) {
  app.add_option("--speculative", flags->method,
                 "Speculative decoding: ngram (prompt lookup), draft (a draft model: "
                 "--draft-model) or off")
      ->check(CLI::IsMember({"ngram", "draft", "off"}))
      ->default_str("draft with --draft-model, else " + flags->otherwise);
  app.add_option("--draft-model", flags->draft_model,
                 "GGUF file of a smaller model with the same vocabulary that drafts tokens "
                 "(implies --speculative draft)");
  app.add_option("--num-speculative-tokens", o->num_tokens,
                 "Most tokens one draft proposes (adapted per sequence to its acceptance)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--speculative-disable-by-batch-size", o->disable_by_batch_size,
                 "No drafts while more sequences than this decode at once (0: never off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

absl::Status ApplySpeculativeFlags(const SpeculativeFlags& flags, const engine::ModelFile& target,
                                   engine::LoadedModel* draft,
                                   engine::EngineOptions::Speculative* o) {
  using Method = engine::EngineOptions::Speculative::Method;
  const bool has_model = !flags.draft_model.empty();
  const std::string method =
      !flags.method.empty() ? flags.method : (has_model ? "draft" : flags.otherwise);
  if (method == "draft") {
    if (!has_model) {
      return absl::InvalidArgumentError("--speculative draft: needs --draft-model FILE");
    }
    ASSIGN_OR_RETURN(*draft, engine::LoadDraftModel(flags.draft_model, target));
    o->method = Method::kDraftModel;
    o->draft_weights = draft->weights.get();
    return absl::OkStatus();
  }
  if (has_model) {
    return absl::InvalidArgumentError("--draft-model: given with --speculative " + method);
  }
  o->method = method == "ngram" ? Method::kNgram : Method::kOff;
  return absl::OkStatus();
}

void ExportEngineStats(const engine::EngineStats& s, int64_t kv_transfer_bytes,
                       int64_t kv_transfer_failures, int64_t kv_comm_rebuilds,
                       metrics::Metrics* m) {
  metrics::LoadGauges g;
  g.running = s.running;
  g.waiting = s.waiting;
  if (s.blocks.num_blocks > 0) {
    g.kv_usage = static_cast<double>(s.blocks.used_blocks) / s.blocks.num_blocks;
  }
  m->SetLoadGauges(g);
  metrics::WorkerTotals t;
  t.prefix_queries = s.blocks.prefix_query_tokens;
  t.prefix_hits = s.blocks.prefix_hit_tokens;
  t.preemptions = s.preemptions;
  t.kv_transfer_bytes = kv_transfer_bytes;
  t.kv_transfer_failures = kv_transfer_failures;
  t.kv_comm_rebuilds = kv_comm_rebuilds;
  t.spec_drafts = s.spec_drafts;
  t.spec_draft_tokens = s.spec_draft_tokens;
  t.spec_accepted_tokens = s.spec_accepted_tokens;
  t.spec_accepted_per_position = s.spec_accepted_per_position;
  m->SyncTotals(t);
}

}  // namespace tandem::rpc
