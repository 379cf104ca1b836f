#include "cli/batch_sweep_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/engine_batch.h"
#include "cli/exit_status.h"
#include "common/engine/loaded_model.h"
#include "common/rpc/worker_main.h"
#include "common/util/strings.h"

namespace tandem::cli {

CLI::App* AddBatchSweepCommand(CLI::App* bench, BatchSweepOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "batch-sweep", "Decode at growing batch sizes: TPOT, aggregate tokens/s, KV memory");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  cmd->add_option("--threads,-t", o->threads, "Compute threads (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--batches", o->batches)->delimiter(',')->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens)->capture_default_str();
  cmd->add_option("--gen-tokens", o->gen_tokens)
      ->capture_default_str()
      ->check(CLI::Range(2, 100000));
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes)->capture_default_str();
  cmd->add_option("--result-json", o->result_json, "Also write the results here");
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  rpc::AddDeviceFlags(*cmd, &o->device, &o->gpu, &o->batch_invariant, &o->kv_dtype, &o->cpu_math);
  return cmd;
}

int RunBatchSweep(const BatchSweepOptions& o) {
  auto loaded = engine::LoadModel(o.model);
  if (!loaded.ok()) return Fail(loaded.status());
  engine::EngineOptions eo;
  eo.num_threads = o.threads;
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.device = o.device;
  eo.gpu = o.gpu;
  eo.batch_invariant = o.batch_invariant;
  eo.kv_dtype = o.kv_dtype;
  eo.cpu_math = o.cpu_math;
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  eo.scheduler.max_running = std::max(64, max_batch);
  eo.scheduler.max_batched_tokens = std::max(2048, max_batch * o.prompt_tokens);
  auto eng = engine::Engine::Create(*loaded->weights, eo);
  if (!eng.ok()) return Fail(eng.status());
  engine::Engine& e = **eng;
  const int32_t vocab = static_cast<int32_t>(loaded->config.vocab_size);
  const kv::BlockManagerStats blocks = e.Stats().blocks;
  const int64_t block_bytes = e.kv_layout().BlockBytes();
  const int64_t capacity_tokens = int64_t{blocks.num_blocks} * blocks.block_size;
  const int64_t per_seq_blocks =
      (o.prompt_tokens + o.gen_tokens + blocks.block_size - 1) / blocks.block_size;

  (void)RunBatch(e, 1, 16, 4, vocab, 7);  // warm-up
  nlohmann::json rows = nlohmann::json::array();
  std::string stopped;
  for (int b : o.batches) {
    if (per_seq_blocks * b > blocks.num_blocks) {
      stopped = StrCat("batch ", b, " needs ", per_seq_blocks * b, " KV blocks; the pool has ",
                       blocks.num_blocks, " (", capacity_tokens, " tokens)");
      break;
    }
    const BatchRun r = RunBatch(e, b, o.prompt_tokens, o.gen_tokens, vocab, 1000u * b);
    const double steps = o.gen_tokens - 1;  // decode steps after the prefill's token
    const double tpot_ms = r.decode_s / steps * 1e3;
    rows.push_back({{"batch", b},
                    {"tpot_ms", tpot_ms},
                    {"tokens_per_s", b * steps / r.decode_s},
                    {"prefill_s", r.first_token_s},
                    {"kv_bytes_in_use", int64_t{r.peak_used_blocks} * block_bytes},
                    {"preemptions", r.preemptions}});
    if (!o.json) {
      std::fprintf(stderr, "  batch %3d: TPOT %.2f ms, %.1f tokens/s\n", b, tpot_ms,
                   b * steps / r.decode_s);
    }
  }
  // The knee: the smallest batch that already reaches 90 % of the best aggregate tokens/s;
  // bigger batches mostly add latency (TPOT) and KV memory.
  int knee = 0;
  double best = 0;
  for (const auto& r : rows) best = std::max(best, r["tokens_per_s"].get<double>());
  for (const auto& r : rows) {
    if (r["tokens_per_s"].get<double>() >= 0.9 * best) {
      knee = r["batch"];
      break;
    }
  }
  nlohmann::json j = {{"model", o.model},
                      {"threads", e.num_threads()},
                      {"prompt_tokens", o.prompt_tokens},
                      {"gen_tokens", o.gen_tokens},
                      {"kv_pool_bytes", int64_t{blocks.num_blocks} * block_bytes},
                      {"rows", rows},
                      {"knee_batch", knee},
                      {"stopped", stopped}};
  if (!o.result_json.empty()) std::ofstream(o.result_json) << j.dump(1) << "\n";
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("batch sweep: %s, %d threads, %d prompt + %d generated tokens per sequence\n",
              o.model.c_str(), e.num_threads(), o.prompt_tokens, o.gen_tokens);
  std::printf("  %6s %10s %12s %12s %12s\n", "batch", "TPOT ms", "tokens/s", "KV MiB", "preempted");
  for (const auto& r : rows) {
    std::printf("  %6d %10.2f %12.1f %12.1f %12lld\n", r["batch"].get<int>(),
                r["tpot_ms"].get<double>(), r["tokens_per_s"].get<double>(),
                r["kv_bytes_in_use"].get<double>() / (1 << 20),
                static_cast<long long>(r["preemptions"].get<int64_t>()));
  }
  if (knee > 0) std::printf("  knee: batch %d already reaches 90 %% of the best tokens/s\n", knee);
  if (!stopped.empty()) std::printf("  stopped: %s\n", stopped.c_str());
  return 0;
}

}  // namespace tandem::cli
