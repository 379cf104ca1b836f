// tandem-decode-worker: receives prefilled KV blocks and decodes them with continuous
// batching, streaming token ids to the router. See decode_worker.h.
#include <cstdio>

#include "common/engine/loaded_model.h"
#include "common/rpc/engine_convert.h"
#include "common/rpc/process_main.h"
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
  CLI11_PARSE(app, argc, argv);
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "tandem-decode-worker: %s\n", st.ToString().c_str());
    return 1;
  };
  if (auto st = metrics::CheckPrefix(flags.metrics_prefix); !st.ok()) return fail(st);

  decode::DecodeService decode_service{rpc::ApiKey(flags.api_key)};
  decode::KvReceiverService kv_service{rpc::ApiKey(flags.api_key)};
  auto server = rpc::RpcServer::Start(StrCat(flags.host, ":", flags.port),
                                      {&decode_service, &kv_service}, {"tandem.v1.DecodeWorker"});
  if (!server.ok()) return fail(server.status());
  metrics::Metrics metrics(
      {flags.metrics_prefix, rpc::ServedModelName(flags), metrics::Role::kDecode});
  auto http = rpc::StartHttpServer(flags, &metrics);
  if (!http.ok()) return fail(http.status());
  if (auto st = rpc::AnnounceListening("tandem-decode-worker", flags, (*server)->port(),
                                       *http != nullptr ? (*http)->port() : 0);
      !st.ok())
    return fail(st);
  auto model = engine::LoadModel(flags.model);
  if (!model.ok()) return fail(model.status());
  auto worker = decode::DecodeWorker::Create(*model->weights, options);
  if (!worker.ok()) return fail(worker.status());
  decode::DecodeWorker* w = worker->get();
  const v1::KvLayoutFingerprint fingerprint = rpc::MakeFingerprint(w->layout(), model->hash);
  decode_service.SetWorker(w, fingerprint);
  kv_service.SetWorker(w, fingerprint);
  const decode::DecodeWorkerStats initial = w->Stats();
  metrics.SetCacheConfig(initial.engine.blocks.block_size, initial.engine.blocks.num_blocks);
  metrics.SetRefresh([w](metrics::Metrics& m) {
    const decode::DecodeWorkerStats s = w->Stats();
    rpc::ExportEngineStats(s.engine, s.kv_bytes_received, s.kv_failures, &m);
  });
  (*server)->SetReady(true);
  if (*http != nullptr) (*http)->SetReady(true);
  rpc::AnnounceReady(flags);
  std::fprintf(stderr, "tandem-decode-worker ready: %d KV blocks of %d tokens\n",
               initial.engine.blocks.num_blocks, options.engine.block_size);
  rpc::ServeUntilSignal("tandem-decode-worker", server->get(), flags,
                        {.server = http->get(), .idle = nullptr, .cancel_all = nullptr});
  metrics.SetRefresh(nullptr);
  worker->reset();
  return 0;
}
