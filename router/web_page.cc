#include "router/web_page.h"

#include <chrono>

#include "nlohmann/json.hpp"

namespace tandem::router {

std::string ClusterJson(std::string_view model_name, const RouterStats& stats,
                        std::string_view not_ready_reason,
                        const std::vector<WorkerSnapshot>& prefill,
                        const std::vector<WorkerSnapshot>& decode, int64_t time_ms) {
  const PoolKv kv = SummarizePoolKv(decode);
  nlohmann::json workers = nlohmann::json::array();
  auto add = [&](const char* role, const std::vector<WorkerSnapshot>& list) {
    for (const WorkerSnapshot& w : list) {
      workers.push_back({{"role", role},
                         {"address", w.address},
                         {"healthy", w.healthy},
                         {"unpaired", w.unpaired},
                         {"in_flight", w.in_flight},
                         {"running", w.load.running},
                         {"waiting", w.load.waiting},
                         {"num_blocks", w.load.num_blocks},
                         {"block_size", w.load.block_size},
                         {"free_blocks", w.load.free_blocks},
                         {"cached_blocks", w.load.cached_blocks},
                         {"prefix_query_tokens", w.load.prefix_query_tokens},
                         {"prefix_hit_tokens", w.load.prefix_hit_tokens},
                         {"kv_transfer_bytes", w.load.kv_transfer_bytes},
                         {"generated_tokens", w.load.generated_tokens},
                         {"kv_transports", w.load.kv_transports}});
    }
  };
  add("prefill", prefill);
  add("decode", decode);
  const nlohmann::json j = {
      {"model", model_name},
      {"time_ms", time_ms},
      {"router",
       {{"ready", not_ready_reason.empty()},
        {"not_ready_reason", not_ready_reason},
        {"queued", stats.queued_requests},
        {"queued_tokens", stats.queued_tokens},
        {"running", stats.running_requests}}},
      {"decode_pool",
       {{"kv_usage", kv.usage}, {"num_blocks", kv.num_blocks}, {"block_size", kv.block_size}}},
      {"workers", workers}};
  // Addresses and the model name come from the command line: bad UTF-8 is replaced,
  // not thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void MountWebPage(http::HttpServer* server, Router* router, WorkerPool* pool,
                  std::string model_name) {
  using http::Exchange;
  server->HandlePublic("GET", "/", [](std::shared_ptr<Exchange> ex) {
    http::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(WebPageHtml());
    r.headers.push_back({"Cache-Control", "no-cache"});
    // The page loads nothing from elsewhere and may not be framed.
    r.headers.push_back({"Content-Security-Policy",
                         "default-src 'self'; script-src 'unsafe-inline'; style-src "
                         "'unsafe-inline'; frame-ancestors 'none'"});
    ex->Reply(std::move(r));
  });
  server->Handle("GET", "/v1/cluster", [router, pool, model_name](std::shared_ptr<Exchange> ex) {
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    http::Response r;
    r.body = ClusterJson(model_name, router->Stats(), pool->NotReadyReason(),
                         pool->Snapshot(WorkerRole::kPrefill), pool->Snapshot(WorkerRole::kDecode),
                         now_ms);
    ex->Reply(std::move(r));
  });
}

}  // namespace tandem::router
