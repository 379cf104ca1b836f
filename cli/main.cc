// tandem: the command-line entry point. Each subcommand lives in its own file.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "cli/bench_command.h"
#include "cli/cache_bench_command.h"
#include "cli/client_command.h"
#include "cli/cluster_bench_command.h"
#include "cli/generate_command.h"
#include "cli/inspect_command.h"
#include "cli/serve_command.h"
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
  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand("serve")) return tandem::cli::RunServe(serve);
  if (app.got_subcommand("client")) return tandem::cli::RunClient(client);
  if (prefix_app->parsed()) return tandem::cli::RunPrefixCacheBench(cache_bench);
  if (chunked_app->parsed()) return tandem::cli::RunChunkedPrefillBench(cache_bench);
  if (bench_app->got_subcommand("cluster")) return tandem::cli::RunClusterBench(cluster_bench);
  if (app.got_subcommand("bench")) return tandem::cli::RunBench(bench);
  if (app.got_subcommand("generate")) return tandem::cli::RunGenerate(generate);
  if (app.got_subcommand("tokenize")) return tandem::cli::RunTokenize(tokenize);
  if (app.got_subcommand("inspect")) return tandem::cli::RunInspect(inspect);
  return 2;
}
