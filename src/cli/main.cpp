// kvserve: one executable, one subcommand per job.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kvserve: an LLM inference engine built around the KV cache"};
  app.require_subcommand(1);
  // Subcommands (each registered from its own cmd_*.cpp):
  kvserve::cli::add_generate_command(app);
  kvserve::cli::add_tokenize_command(app);
  kvserve::cli::add_kv_calc_command(app);
  kvserve::cli::add_serve_command(app);
  kvserve::cli::add_gen_model_command(app);
  kvserve::cli::add_bench_command(app);
  kvserve::cli::add_perplexity_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvserve::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
