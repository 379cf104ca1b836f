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

  decode::DecodeService decode_service;
  decode::KvReceiverService kv_service;
  auto server = rpc::RpcServer::Start(StrCat(flags.host, ":", flags.port),
                                      {&decode_service, &kv_service}, {"tandem.v1.DecodeWorker"});
  if (!server.ok()) {
    std::fprintf(stderr, "tandem-decode-worker: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (auto st = rpc::AnnounceListening("tandem-decode-worker", flags, (*server)->port());
      !st.ok()) {
    std::fprintf(stderr, "tandem-decode-worker: %s\n", st.ToString().c_str());
    return 1;
  }
  auto model = engine::LoadModel(flags.model);
  if (!model.ok()) {
    std::fprintf(stderr, "tandem-decode-worker: %s\n", model.status().ToString().c_str());
    return 1;
  }
  auto worker = decode::DecodeWorker::Create(*model->weights, options);
  if (!worker.ok()) {
    std::fprintf(stderr, "tandem-decode-worker: %s\n", worker.status().ToString().c_str());
    return 1;
  }
  const v1::KvLayoutFingerprint fingerprint =
      rpc::MakeFingerprint((*worker)->layout(), model->hash);
  decode_service.SetWorker(worker->get(), fingerprint);
  kv_service.SetWorker(worker->get(), fingerprint);
  (*server)->SetReady(true);
  std::fprintf(stderr, "tandem-decode-worker ready: %d KV blocks of %d tokens\n",
               (*worker)->Stats().engine.blocks.num_blocks, options.engine.block_size);
  rpc::ServeUntilSignal("tandem-decode-worker", server->get(), flags);
  worker->reset();
  return 0;
}
