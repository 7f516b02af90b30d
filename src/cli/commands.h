#pragma once
// Each subcommand lives in its own cmd_*.cpp and registers itself on the top-level CLI11 app.
#include <CLI/CLI.hpp>

namespace kvserve::cli {

void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_kv_calc_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_gen_model_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);

}  // namespace kvserve::cli
