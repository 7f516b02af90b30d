#pragma once
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "model/model.h"

namespace kvserve::cli {

// The model used when no -m is given: $KVSERVE_MODEL, else the default model in the model cache
// ($KVSERVE_MODELS or ~/.cache/kvserve/models) that scripts/setup.sh installs. Throws Error telling
// the user how to install it when it is missing.
std::string default_model_path();

// Loads `model_arg` (or the default model when empty), with a progress bar on stderr when asked.
// `tokenizer` is a llama.cpp-format tokenizer.bin for llama2.c checkpoints (empty: beside the file).
// `chat_template`, a family's name ("chatml", "llama3", ...) or a Jinja file (chat_template_from_arg),
// replaces the file's template when given.
std::unique_ptr<Model> load_cli_model(const std::string& model_arg, const std::string& tokenizer, bool progress,
                                      const std::string& chat_template = {});

// One line on stderr naming the GGUF tensors `model`'s loader left unread (the first few), as a warning.
void warn_unread_tensors(const std::string& path, const Model& model);

// --chat-template's check: one of the families' names (chat_template_names()) or an existing file.
CLI::Validator chat_template_name_check();
// What --chat-template gives the vocabulary: a family's name as it is, or a file's Jinja source, which must
// parse (Error naming the file and the line otherwise).
std::string chat_template_from_arg(const std::string& arg);

}  // namespace kvserve::cli
