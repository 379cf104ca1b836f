// tandem: the command-line entry point. Each subcommand lives in its own file.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "cli/attention_bench_command.h"
#include "cli/batch_sweep_command.h"
#include "cli/bench_command.h"
#include "cli/cache_bench_command.h"
#include "cli/client_command.h"
#include "cli/cluster_bench_command.h"
#include "cli/explain_command.h"
#include "cli/generate_command.h"
#include "cli/inspect_command.h"
#include "cli/kld_bench_command.h"
#include "cli/prefill_sweep_command.h"
#include "cli/serve_bench_command.h"
#include "cli/serve_command.h"
#include "cli/speculative_bench_command.h"
#include "cli/tokenize_command.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem — a disaggregated LLM inference server"};
  app.require_subcommand(1);
  tandem::cli::TokenizeOptions tokenize;
  tandem::cli::AddTokenizeCommand(app, &tokenize);
  tandem::cli::InspectOptions inspect;
  tandem::cli::AddInspectCommand(app, &inspect);
  tandem::cli::GenerateOptions generate;
  tandem::cli::AddGenerateCommand(app, &generate);
  tandem::cli::ClientOptions client;
  tandem::cli::AddClientCommand(app, &client);
  tandem::cli::ServeOptions serve;
  tandem::cli::AddServeCommand(app, &serve);
  tandem::cli::BenchOptions bench;
  CLI::App* bench_app = tandem::cli::AddBenchCommand(app, &bench);
  tandem::cli::ClusterBenchOptions cluster_bench;
  tandem::cli::AddClusterBenchCommand(bench_app, &cluster_bench);
  tandem::cli::CacheBenchOptions cache_bench;
  auto [prefix_app, chunked_app] = tandem::cli::AddCacheBenchCommands(bench_app, &cache_bench);
  tandem::cli::ServeBenchOptions serve_bench;
  serve_bench.tokenizer = "models/smollm2-135m-instruct-q4_1.gguf";
  CLI::App* serve_bench_app = tandem::cli::AddServeBenchCommand(bench_app, &serve_bench);
  tandem::cli::PrefillSweepOptions prefill_sweep;
  CLI::App* prefill_sweep_app = tandem::cli::AddPrefillSweepCommand(bench_app, &prefill_sweep);
  tandem::cli::BatchSweepOptions batch_sweep;
  CLI::App* batch_sweep_app = tandem::cli::AddBatchSweepCommand(bench_app, &batch_sweep);
  tandem::cli::ExplainOptions explain;
  CLI::App* explain_app = tandem::cli::AddExplainCommand(bench_app, &explain);
  tandem::cli::AttentionBenchOptions attention_bench;
  CLI::App* attention_app = tandem::cli::AddAttentionBenchCommand(bench_app, &attention_bench);
  tandem::cli::KldBenchOptions kld_bench;
  CLI::App* kld_app = tandem::cli::AddKldBenchCommand(bench_app, &kld_bench);
  tandem::cli::SpeculativeBenchOptions speculative_bench;
  CLI::App* speculative_app =
      tandem::cli::AddSpeculativeBenchCommand(bench_app, &speculative_bench);
  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand("serve")) return tandem::cli::RunServe(serve);
  if (app.got_subcommand("client")) return tandem::cli::RunClient(client);
  if (serve_bench_app->parsed()) return tandem::cli::RunServeBench(serve_bench);
  if (prefill_sweep_app->parsed()) return tandem::cli::RunPrefillSweep(prefill_sweep);
  if (batch_sweep_app->parsed()) return tandem::cli::RunBatchSweep(batch_sweep);
  if (explain_app->parsed()) return tandem::cli::RunExplain(explain);
  if (speculative_app->parsed()) return tandem::cli::RunSpeculativeBench(speculative_bench);
  if (attention_app->parsed()) return tandem::cli::RunAttentionBench(attention_bench);
  if (kld_app->parsed()) return tandem::cli::RunKldBench(kld_bench);
  if (prefix_app->parsed()) return tandem::cli::RunPrefixCacheBench(cache_bench);
  if (chunked_app->parsed()) return tandem::cli::RunChunkedPrefillBench(cache_bench);
  if (bench_app->got_subcommand("cluster")) return tandem::cli::RunClusterBench(cluster_bench);
  if (app.got_subcommand("bench")) return tandem::cli::RunBench(bench);
  if (app.got_subcommand("generate")) return tandem::cli::RunGenerate(generate);
  if (app.got_subcommand("tokenize")) return tandem::cli::RunTokenize(tokenize);
  if (app.got_subcommand("inspect")) return tandem::cli::RunInspect(inspect);
  return 2;
}
