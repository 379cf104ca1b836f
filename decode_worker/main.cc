// tandem-decode-worker: receives prefilled KV blocks and decodes them with continuous
// batching, streaming token ids to the router. See decode_worker.h.
#include <cstdio>

#include "common/engine/loaded_model.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/process_main.h"
#include "common/rpc/worker_main.h"
#include "common/transport/transport_flags.h"
#include "common/util/signals.h"
#include "common/util/strings.h"
#include "decode_worker/decode_service.h"

int main(int argc, char** argv) {
  using namespace tandem;
  BlockTerminationSignals();
  CLI::App app{"tandem-decode-worker — the decode half of a tandem cluster"};
  rpc::ServerFlags flags;
  decode::DecodeWorkerOptions options;
  options.engine.kv_cache_bytes = int64_t{512} << 20;
  options.engine.prefix_caching = true;
  rpc::AddServerFlags(app, &flags);
  rpc::AddEngineFlags(app, &options.engine);
  rpc::SpeculativeFlags speculative;
  rpc::AddSpeculativeFlags(app, &speculative, &options.engine.speculative);
  transport::TransportFlags transport_flags;
  transport::AddTransportFlags(app, &transport_flags);
  int32_t staging_buffers = 4;
  app.add_option("--kv-staging-buffers", staging_buffers,
                 "Peer-transport payloads received and not yet written into the cache")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "tandem-decode-worker: %s\n", st.ToString().c_str());
    return 1;
  };
  if (auto st = metrics::CheckPrefix(flags.metrics_prefix); !st.ok()) return fail(st);

  decode::DecodeService decode_service;
  decode::KvReceiverService kv_service;
  auto server =
      rpc::RpcServer::Start(StrCat(flags.host, ":", flags.port), {&decode_service, &kv_service},
                            {"tandem.v1.DecodeWorker"}, {}, flags.InternalKey());
  if (!server.ok()) return fail(server.status());
  metrics::Metrics metrics(
      {flags.metrics_prefix, rpc::ServedModelName(flags), metrics::Role::kDecode});
  auto http = rpc::StartHttpServer(flags, &metrics);
  if (!http.ok()) return fail(http.status());
  if (auto st = rpc::AnnounceListening("tandem-decode-worker", flags, (*server)->port(),
                                       *http != nullptr ? (*http)->port() : 0);
      !st.ok())
    return fail(st);
  auto transports =
      transport::MakeWorkerTransports(transport_flags, options.engine.device, options.engine.gpu);
  if (!transports.ok()) return fail(transports.status());
  auto model =
      engine::LoadModel(flags.model, {.residence = engine::ResidenceFor(options.engine.device)});
  if (!model.ok()) return fail(model.status());
  options.engine.token_masker = engine::MakeTokenMasker(*model->tokenizer);
  engine::LoadedModel draft;  // --draft-model (outlives the worker)
  if (auto st =
          rpc::ApplySpeculativeFlags(speculative, *model, &draft, &options.engine.speculative);
      !st.ok())
    return fail(st);
  auto worker = decode::DecodeWorker::Create(*model->weights, options);
  if (!worker.ok()) return fail(worker.status());
  decode::DecodeWorker* w = worker->get();
  // The peer transports' end (declared after the worker: destroyed before it).
  std::unique_ptr<decode::PeerKvReceiver> peer;
  if (transports->nccl != nullptr || transports->cuda_ipc != nullptr) {
    auto staging = w->MakeStaging(staging_buffers, transports->staging_bytes);
    if (!staging.ok()) return fail(staging.status());
    peer = std::make_unique<decode::PeerKvReceiver>(
        w, *staging,
        decode::PeerKvReceiverOptions{.nccl = transports->nccl.get(),
                                      .cuda_ipc = transports->cuda_ipc.get(),
                                      .timeout = transports->timeout});
  }
  const v1::KvLayoutFingerprint fingerprint = rpc::MakeFingerprint(
      w->layout(), model->hash, options.engine.device, options.engine.cpu_math);
  decode_service.SetWorker(w, fingerprint, transports->kinds);
  kv_service.SetWorker(
      w, fingerprint,
      {.device = transports->device, .accepted = transports->kinds, .peer = peer.get()});
  const decode::DecodeWorkerStats initial = w->Stats();
  metrics.SetCacheConfig(initial.engine.blocks.block_size, initial.engine.blocks.num_blocks);
  metrics.SetRefresh([w, p = peer.get()](metrics::Metrics& m) {
    const decode::DecodeWorkerStats s = w->Stats();
    rpc::ExportEngineStats(s.engine, s.kv_bytes_received, s.kv_failures,
                           p != nullptr ? p->stats().rebuilt : 0, &m);
  });
  (*server)->SetReady(true);
  if (*http != nullptr) (*http)->SetReady(true);
  rpc::AnnounceReady(flags);
  std::fprintf(stderr, "tandem-decode-worker ready: %d KV blocks of %d tokens\n",
               initial.engine.blocks.num_blocks, options.engine.block_size);
  rpc::ServeUntilSignal("tandem-decode-worker", server->get(), flags,
                        {.server = http->get(), .idle = nullptr, .cancel_all = nullptr});
  metrics.SetRefresh(nullptr);
  peer.reset();
  worker->reset();
  return 0;
}
