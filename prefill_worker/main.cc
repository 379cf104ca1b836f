// tandem-prefill-worker: computes prompts in batches and pushes their KV blocks to the
// decode workers the router names. See prefill_worker.h.
#include <cstdio>

#include "common/engine/loaded_model.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/process_main.h"
#include "common/rpc/worker_main.h"
#include "common/transport/stream_kv_sender.h"
#include "common/transport/transport_flags.h"
#include "common/util/signals.h"
#include "common/util/strings.h"
#include "prefill_worker/prefill_service.h"

int main(int argc, char** argv) {
  using namespace tandem;
  BlockTerminationSignals();
  CLI::App app{"tandem-prefill-worker — the prefill half of a tandem cluster"};
  rpc::ServerFlags flags;
  engine::EngineOptions options;
  options.kv_cache_bytes = int64_t{256} << 20;
  options.prefix_caching = true;
  rpc::AddServerFlags(app, &flags);
  rpc::AddEngineFlags(app, &options);
  transport::TransportFlags transport_flags;
  transport::AddTransportFlags(app, &transport_flags);
  CLI11_PARSE(app, argc, argv);
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "tandem-prefill-worker: %s\n", st.ToString().c_str());
    return 1;
  };
  if (auto st = metrics::CheckPrefix(flags.metrics_prefix); !st.ok()) return fail(st);

  prefill::PrefillService service;
  auto server = rpc::RpcServer::Start(StrCat(flags.host, ":", flags.port), {&service},
                                      {"tandem.v1.PrefillWorker"}, {}, flags.InternalKey());
  if (!server.ok()) return fail(server.status());
  metrics::Metrics metrics(
      {flags.metrics_prefix, rpc::ServedModelName(flags), metrics::Role::kPrefill});
  auto http = rpc::StartHttpServer(flags, &metrics);
  if (!http.ok()) return fail(http.status());
  if (auto st = rpc::AnnounceListening("tandem-prefill-worker", flags, (*server)->port(),
                                       *http != nullptr ? (*http)->port() : 0);
      !st.ok())
    return fail(st);
  auto transports = transport::MakeWorkerTransports(transport_flags, options.device, options.gpu);
  if (!transports.ok()) return fail(transports.status());
  auto model = engine::LoadModel(flags.model, {.residence = engine::ResidenceFor(options.device)});
  if (!model.ok()) return fail(model.status());
  options.token_masker = engine::MakeTokenMasker(*model->tokenizer);
  auto worker = prefill::PrefillWorker::Create(
      *model->weights, options,
      [&](const kernels::KvStorage& kv) -> absl::StatusOr<std::unique_ptr<transport::KvSender>> {
        return transport::StreamKvSender::Create(
            &kv, rpc::MakeFingerprint(kv.layout(), model->hash, options.device, options.cpu_math),
            {.api_key = flags.InternalKey(),
             .device = transports->device,
             .offered = transports->kinds,
             .nccl = transports->nccl.get(),
             .cuda_ipc = transports->cuda_ipc.get(),
             .timeout = transports->timeout,
             .staging_bytes = transports->staging_bytes});
      },
      [&metrics](const transport::KvTransferStats& stats, const absl::Status& status) {
        const std::string_view transport = transport::TransportName(stats.transport);
        if (status.ok()) {
          metrics.KvTransferDone(transport, stats.ms / 1e3, stats.bytes);
        } else {
          metrics.KvTransferFailed(transport, absl::StatusCodeToString(status.code()));
        }
      });
  if (!worker.ok()) return fail(worker.status());
  prefill::PrefillWorker* w = worker->get();
  metrics.SetCacheConfig(w->Stats().engine.blocks.block_size, w->Stats().engine.blocks.num_blocks);
  metrics.SetRefresh([w](metrics::Metrics& m) {
    const prefill::PrefillWorkerStats s = w->Stats();
    rpc::ExportEngineStats(s.engine, s.kv_bytes_sent, s.kv_failures, s.kv_comm_rebuilds, &m);
  });
  service.SetWorker(
      w, rpc::MakeFingerprint(w->layout(), model->hash, options.device, options.cpu_math),
      transports->kinds);
  (*server)->SetReady(true);
  if (*http != nullptr) (*http)->SetReady(true);
  rpc::AnnounceReady(flags);
  std::fprintf(stderr, "tandem-prefill-worker ready\n");
  rpc::ServeUntilSignal("tandem-prefill-worker", server->get(), flags,
                        {.server = http->get(), .idle = nullptr, .cancel_all = nullptr});
  metrics.SetRefresh(nullptr);
  worker->reset();
  return 0;
}
