#include "cli/cluster_bench_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <thread>

#include "cli/bench_prompts.h"
#include "cli/exit_status.h"
#include "cli/local_cluster.h"
#include "common/engine/engine.h"
#include "common/engine/loaded_model.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/process_main.h"
#include "common/rpc/rpc_server.h"
#include "common/rpc/worker_main.h"
#include "common/transport/stream_kv_sender.h"
#include "common/util/strings.h"
#include "kernels/backend_factory.h"
#include "kernels/kv_storage.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Time from AddRequest to the first token, single process.
double LocalTtftMs(engine::Engine& e, const std::vector<int32_t>& prompt) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1;
  const auto t0 = Clock::now();
  (void)e.AddRequest(prompt, p);
  while (e.HasWork()) (void)e.Step();
  return Ms(t0, Clock::now());
}

// Durations of the engine's steps once `batch` sequences all decode.
std::vector<double> LocalDecodeStepsMs(engine::Engine& e, int batch, int32_t gen, int32_t vocab) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = gen;
  p.ignore_eos = true;
  for (int i = 0; i < batch; ++i) (void)e.AddRequest(BenchPrompt(32, vocab, 77 + i), p);
  (void)e.Step();  // the prefill step
  std::vector<double> steps;
  while (e.HasWork()) {
    const auto t0 = Clock::now();
    const auto events = e.Step();
    if (static_cast<int>(events.size()) >= batch) steps.push_back(Ms(t0, Clock::now()));
  }
  return steps;
}

struct ClusterRun {
  double ttft_ms = 0;  // client-observed
  v1::Timings timings;
  std::vector<double> itl_ms;  // per token, from chunk arrival gaps
};

ClusterRun Generate(v1::Generation::Stub* stub, const std::vector<int32_t>& prompt,
                    int32_t max_tokens) {
  const v1::GenerateRequest req = GreedyTokenRequest(prompt, max_tokens);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  ClusterRun r;
  const auto t0 = Clock::now();
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  Clock::time_point last{};
  while (reader->Read(&msg)) {
    const auto now = Clock::now();
    if (msg.has_chunk() && msg.chunk().token_ids_size() > 0) {
      if (last == Clock::time_point{}) {
        r.ttft_ms = Ms(t0, now);
      } else {
        const int n = msg.chunk().token_ids_size();
        for (int i = 0; i < n; ++i) r.itl_ms.push_back(Ms(last, now) / n);
      }
      last = now;
    } else if (msg.has_complete()) {
      r.timings = msg.complete().timings();
    }
  }
  (void)reader->Finish();
  return r;
}

}  // namespace

void AddClusterBenchCommand(CLI::App* bench, ClusterBenchOptions* o) {
  CLI::App* cmd = bench->add_subcommand(
      "cluster",
      "Disaggregation overhead: TTFT, KV transfer and inter-token latency vs one process");
  cmd->add_option("--model,-m", o->model, "GGUF model")->required();
  cmd->add_option("--threads-per-worker,-t", o->threads_per_worker,
                  "Threads per worker and for the single-process baseline (0: half the cores)")
      ->capture_default_str();
  cmd->add_option("--repetitions,-r", o->repetitions)->capture_default_str();
  cmd->add_option("--prompt-tokens,-p", o->prompt_tokens)->capture_default_str();
  cmd->add_option("--batches", o->batches, "Concurrent requests for the latency runs")
      ->capture_default_str();
  cmd->add_option("--gen-tokens,-n", o->gen_tokens)->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  rpc::AddKvDtypeFlag(*cmd, &o->kv_dtype);
}

int RunClusterBench(const ClusterBenchOptions& o) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads_per_worker > 0 ? o.threads_per_worker : std::max(1, cores / 2);
  auto model = engine::LoadModel(o.model);
  if (!model.ok()) return Fail(model.status());
  const int32_t vocab = static_cast<int32_t>(model->config.vocab_size);
  engine::EngineOptions eo;
  eo.num_threads = threads;
  eo.kv_cache_bytes = int64_t{512} << 20;
  eo.kv_dtype = o.kv_dtype;

  // The cluster, with an internal key this process knows: it calls the decode worker
  // itself below.
  const std::string internal_key = rpc::EnsureInternalKey();
  auto cluster =
      LocalCluster::Start(o.model, {"--threads-per-worker", std::to_string(threads), "--kv-dtype",
                                    std::string(kv::KvDtypeName(o.kv_dtype))});
  if (!cluster.ok()) return Fail(cluster.status());
  const std::string endpoint = (*cluster)->endpoint();
  const std::string decode_addr = (*cluster)->decode()[0];
  auto channel = rpc::MakeChannel(endpoint);
  auto stub = v1::Generation::NewStub(channel);

  // The single-process engine runs in this process while the cluster idles; the two
  // are measured alternately so that the machine's drift hits both alike.
  auto local = engine::Engine::Create(*model->weights, eo);
  if (!local.ok()) return Fail(local.status());
  std::vector<double> local_ttft, ttft, extra, server_ttft, exposed_kv, compute, compute_extra;
  (void)LocalTtftMs(**local, BenchPrompt(o.prompt_tokens, vocab, 999));  // warm-up
  (void)Generate(stub.get(), BenchPrompt(o.prompt_tokens, vocab, 999), 2);
  for (int r = 0; r < o.repetitions; ++r) {
    const std::vector<int32_t> prompt = BenchPrompt(o.prompt_tokens, vocab, r);
    local_ttft.push_back(LocalTtftMs(**local, prompt));
    ClusterRun run = Generate(stub.get(), prompt, 2);
    ttft.push_back(run.ttft_ms);
    extra.push_back(run.ttft_ms - local_ttft.back());
    server_ttft.push_back(run.timings.time_to_first_token_ms());
    exposed_kv.push_back(run.timings.kv_transfer_ms());
    compute.push_back(run.timings.prefill_compute_ms());
    compute_extra.push_back(compute.back() - local_ttft.back());
  }
  std::map<int, std::vector<double>> local_steps;
  for (int b : o.batches) local_steps[b] = LocalDecodeStepsMs(**local, b, o.gen_tokens, vocab);
  local->reset();

  // Host-transport throughput: push a prompt's worth of blocks, nothing computing.
  const kv::KvLayout layout{static_cast<int32_t>(model->config.n_layers),
                            static_cast<int32_t>(model->config.n_kv_heads),
                            static_cast<int32_t>(model->config.head_dim), 16, o.kv_dtype};
  auto backend = kernels::MakeBackend({"cpu", 1});
  if (!backend.ok()) return Fail(backend.status());
  auto cache = kernels::KvStorage::Create(backend->get(), layout, int64_t{64} << 20);
  if (!cache.ok()) return Fail(cache.status());
  auto made = transport::StreamKvSender::Create(
      // The decode worker of the `tandem serve` above: default math, on the CPU.
      cache->get(), rpc::MakeFingerprint(layout, model->hash, "cpu", kernels::DefaultCpuMath()),
      {.api_key = internal_key});
  if (!made.ok()) return Fail(made.status());
  transport::StreamKvSender& sender = **made;
  auto decode = v1::DecodeWorker::NewStub(rpc::MakeChannel(decode_addr, internal_key));
  std::vector<double> gbps, push_ms;
  int64_t push_bytes = 0;
  if (absl::Status st = sender.Connect(decode_addr); !st.ok()) return Fail(st);
  for (int r = 0; r < o.repetitions + 1; ++r) {
    v1::ReserveRequest rq;
    rq.set_num_tokens(o.prompt_tokens);
    rq.set_lease_ms(10000);
    v1::ReserveResponse res;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!decode->Reserve(&ctx, rq, &res).ok())
      return Fail(absl::UnavailableError("Reserve failed"));
    std::vector<int32_t> src(res.block_ids_size());
    for (int i = 0; i < res.block_ids_size(); ++i) src[i] = i;
    auto t = sender.Begin({decode_addr,
                           res.lease_id(),
                           {res.block_ids().begin(), res.block_ids().end()},
                           0,
                           res.epoch()},
                          src);
    if (!t.ok()) return Fail(t.status());
    std::promise<std::pair<absl::Status, transport::KvTransferStats>> done;
    const auto t0 = Clock::now();
    for (int32_t l = 0; l < layout.n_layers; ++l)
      (*t)->SendLayer(l, 0, res.block_ids_size(), nullptr);
    (*t)->Finish([&](absl::Status s, transport::KvTransferStats stats) {
      done.set_value({s, stats});
    });
    auto [status, stats] = done.get_future().get();
    const double ms = Ms(t0, Clock::now());
    if (!status.ok()) return Fail(status);
    if (r > 0) {  // the first is a warm-up
      push_ms.push_back(ms);
      gbps.push_back(static_cast<double>(stats.bytes) / ms / 1e6);
    }
    push_bytes = stats.bytes;
    v1::ReleaseRequest rel;
    rel.set_lease_id(res.lease_id());
    v1::ReleaseResponse rr;
    grpc::ClientContext rctx;
    rctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    (void)decode->Release(&rctx, rel, &rr);
  }

  // Inter-token latency at each batch size.
  nlohmann::json itl = nlohmann::json::array();
  for (int b : o.batches) {
    std::vector<ClusterRun> runs(b);
    std::vector<std::thread> threads_b;
    for (int i = 0; i < b; ++i) {
      threads_b.emplace_back(
          [&, i] { runs[i] = Generate(stub.get(), BenchPrompt(32, vocab, 77 + i), o.gen_tokens); });
    }
    for (auto& t : threads_b) t.join();
    std::vector<double> all;
    for (const auto& r : runs) all.insert(all.end(), r.itl_ms.begin(), r.itl_ms.end());
    const auto& steps = local_steps[b];
    itl.push_back({{"batch", b},
                   {"cluster_itl_p50_ms", Quantile(all, 0.5)},
                   {"cluster_itl_p99_ms", Quantile(all, 0.99)},
                   {"local_step_p50_ms", Quantile(steps, 0.5)},
                   {"local_step_p99_ms", Quantile(steps, 0.99)},
                   {"ratio_p50", Quantile(all, 0.5) / Quantile(steps, 0.5)},
                   {"ratio_p99", Quantile(all, 0.99) / Quantile(steps, 0.99)}});
  }
  cluster->reset();

  const double l_ttft = Quantile(local_ttft, 0.5), c_ttft = Quantile(ttft, 0.5);
  const double kv_full = Quantile(push_ms, 0.5), kv_exposed = Quantile(exposed_kv, 0.5);
  nlohmann::json j = {{"threads_per_process", threads},
                      {"kv_dtype", std::string(kv::KvDtypeName(o.kv_dtype))},
                      {"kv_bytes_per_token", layout.BytesPerToken()},
                      {"prompt_tokens", o.prompt_tokens},
                      {"local_ttft_ms", l_ttft},
                      {"cluster_ttft_ms", c_ttft},
                      {"cluster_ttft_server_ms", Quantile(server_ttft, 0.5)},
                      {"extra_ttft_ms", Quantile(extra, 0.5)},
                      {"prefill_worker_compute_ms", Quantile(compute, 0.5)},
                      {"prefill_worker_compute_extra_ms", Quantile(compute_extra, 0.5)},
                      {"kv_bytes", push_bytes},
                      {"kv_push_ms", kv_full},
                      {"kv_push_gb_per_s", Quantile(gbps, 0.5)},
                      {"kv_exposed_ms_in_ttft", kv_exposed},
                      {"kv_push_share_of_ttft", kv_full / c_ttft},
                      {"kv_exposed_share_of_ttft", kv_exposed / c_ttft},
                      {"itl", itl}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "tandem bench cluster: 1 prefill + 1 decode worker, %d thread(s) per process, median of "
      "%d\n\n",
      threads, o.repetitions);
  std::printf(
      "TTFT, %d-token prompt: one process %.1f ms | cluster %.1f ms (client), %.1f ms (router) | "
      "extra %.1f ms (median of paired differences)\n",
      o.prompt_tokens, l_ttft, c_ttft, Quantile(server_ttft, 0.5), Quantile(extra, 0.5));
  std::printf(
      "  of which the prefill worker's forward pass took %.1f ms (%+.1f ms vs one process: the\n"
      "  layer-by-layer KV push competing for the machine) and RPC + queueing the rest\n",
      Quantile(compute, 0.5), Quantile(compute_extra, 0.5));
  std::printf(
      "KV host transport: %.1f MB in %.1f ms = %.2f GB/s alone; %.1f ms left exposed after compute "
      "(%.0f%% of TTFT)\n\n",
      push_bytes / 1e6, kv_full, Quantile(gbps, 0.5), kv_exposed, 100 * kv_exposed / c_ttft);
  std::printf("%6s %14s %14s %16s %16s %8s %8s\n", "batch", "cluster p50", "cluster p99",
              "1-proc step p50", "1-proc step p99", "x p50", "x p99");
  for (const auto& row : itl) {
    std::printf("%6d %11.2f ms %11.2f ms %13.2f ms %13.2f ms %8.2f %8.2f\n",
                row["batch"].get<int>(), row["cluster_itl_p50_ms"].get<double>(),
                row["cluster_itl_p99_ms"].get<double>(), row["local_step_p50_ms"].get<double>(),
                row["local_step_p99_ms"].get<double>(), row["ratio_p50"].get<double>(),
                row["ratio_p99"].get<double>());
  }
  return 0;
}

}  // namespace tandem::cli
