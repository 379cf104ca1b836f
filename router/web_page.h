// WebPage: the router's built-in page at `/` — the cluster, live, and a chat playground
// over the OpenAI API — and the JSON the page reads, `GET /v1/cluster`.
//
// The page is router/web/index.html embedded at build time (cmake/embed_file.cmake): no
// build step of its own, no CDN, it works offline. It is served without the API key (it
// holds no data); when /v1/cluster answers 401 it asks for the key, keeps it in the tab
// (sessionStorage) and sends it only in Authorization headers — never in a URL.
//
// /v1/cluster needs the key like every API path. It reports the router's queue and
// running requests, the decode pool's KV (SummarizePoolKv), and each worker as the
// router last polled it (health, requests in flight from this router, the worker's own
// running and waiting sequences, KV blocks, prefix-cache and KV-transfer totals); the
// page turns the totals into rates between two refreshes.
#ifndef TANDEM_ROUTER_WEB_PAGE_H_
#define TANDEM_ROUTER_WEB_PAGE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/http/http_server.h"
#include "router/router.h"
#include "router/worker_pool.h"

namespace tandem::router {

// The page's HTML (embedded).
std::string_view WebPageHtml();

// Routes GET / (public) and GET /v1/cluster on `server`; the router and pool must
// outlive it.
void MountWebPage(http::HttpServer* server, Router* router, WorkerPool* pool,
                  std::string model_name);

// The body of /v1/cluster: ready when `not_ready_reason` is empty (WorkerPool::NotReadyReason).
std::string ClusterJson(std::string_view model_name, const RouterStats& stats,
                        std::string_view not_ready_reason,
                        const std::vector<WorkerSnapshot>& prefill,
                        const std::vector<WorkerSnapshot>& decode, int64_t time_ms);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WEB_PAGE_H_
