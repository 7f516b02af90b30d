// kvserve tokenize: token ids of a text as a JSON array, for checking tokenizer parity from outside.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "model/loaders.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace kvserve::cli {

namespace {
struct TokenizeArgs {
  std::string model;
  std::string tokenizer;
  std::string text;
  bool text_given = false;
  bool no_bos = false;
  bool pieces = false;
};

void run_tokenize(const TokenizeArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  std::string text = a.text;
  if (!a.text_given) text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  // A GGUF file needs only its vocabulary (so vocab-only files and architectures the engine does not
  // run, such as BERT, tokenize too); other formats load the model for theirs.
  std::unique_ptr<Tokenizer> tokenizer;
  if (is_gguf_file(path)) {
    tokenizer = Tokenizer::create(load_gguf_vocab(path));
  } else {
    LoadOptions lo;
    lo.tokenizer_path = a.tokenizer;
    tokenizer = std::move(load_model(path, lo)->tokenizer);
  }
  // --no-bos: no special tokens added and special-token text treated as plain text (llama.cpp's
  // tokenizer tests use add_special=false, parse_special=false).
  const auto ids = tokenizer->encode(text, !a.no_bos, !a.no_bos);
  nlohmann::json j = ids;
  if (a.pieces) {
    nlohmann::json p = nlohmann::json::array();
    for (int32_t id : ids) p.push_back(tokenizer->token_to_piece(id, true));
    j = {{"ids", ids}, {"pieces", p}};
  }
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}
}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* c = app.add_subcommand("tokenize", "Print the token ids of a text (stdin when no TEXT) as JSON");
  c->add_option("-m,--model", a->model, "Model file or folder (default: the default model)");
  c->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer.bin");
  c->add_option("text", a->text, "Text to tokenize")->each([a](const std::string&) { a->text_given = true; });
  c->add_flag("--no-bos", a->no_bos, "Add no special tokens and treat special-token text as plain text");
  c->add_flag("--pieces", a->pieces, "Also print each token's text");
  c->callback([a] { run_tokenize(*a); });
}

}  // namespace kvserve::cli
