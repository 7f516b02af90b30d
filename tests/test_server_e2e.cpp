// End-to-end: launches the real `kvserve serve` on a free loopback port with a small model and drives it
// with the official OpenAI Python SDK (tests/server/test_openai_e2e.py, through pytest), then checks that
// SIGTERM drains in-flight requests and exits 0. Skips when python's openai/pytest are not installed
// (scripts/requirements-test.txt) or the model file is missing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run_command.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;

// KVSERVE_E2E_MODEL picks another model (then set KVSERVE_VOCAB to its vocabulary size).
std::string e2e_model() {
  if (const char* m = std::getenv("KVSERVE_E2E_MODEL"); m && *m) return m;
  return KVSERVE_SHARED_DIR "/golden/gguf/models/tiny-gqa.gguf";
}

bool python_has_sdk() { return std::system("python3 -c 'import openai, pytest' >/dev/null 2>&1") == 0; }

// The server process, with its stderr captured in a file; SIGKILLed if the test forgets to stop it.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra_args, const std::string& model = e2e_model()) {
    log_path_ = std::filesystem::temp_directory_path() /
                ("kvserve-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".log");
    std::vector<std::string> args = {KVSERVE_BINARY, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, KVSERVE_BINARY, &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove(log_path_, ec);
  }

  // The port from the "serving ... on http://127.0.0.1:PORT" line; 0 when it never came or it died.
  int wait_for_port(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const std::regex serving(R"(on http://127\.0\.0\.1:(\d+))");
    while (std::chrono::steady_clock::now() < deadline && pid_ > 0) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, serving)) return std::stoi(m[1]);
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return 0;
      }
      std::this_thread::sleep_for(50ms);
    }
    return 0;
  }

  // Sends SIGTERM and waits (bounded); returns the exit status, or -1 when it had to be killed.
  int terminate(std::chrono::seconds limit) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(50ms);
    }
    return -1;
  }

  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool started() const { return pid_ > 0; }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::filesystem::path log_path_;
};

void skip_unless_ready(bool need_python) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  if (std::system(KVSERVE_BINARY " --help 2>&1 | grep -q '^  serve '") != 0)
    GTEST_SKIP() << "kvserve has no serve command";
  if (!std::filesystem::exists(e2e_model())) GTEST_SKIP() << "model not found: " << e2e_model();
  if (need_python && !python_has_sdk())
    GTEST_SKIP() << "python3 openai/pytest missing: python3 -m pip install -r scripts/requirements-test.txt";
}

// One raw HTTP request on its own connection; returns the whole response (read until close/limit).
std::string http_exchange(int port, const std::string& req, std::chrono::seconds limit) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    timeval tv{static_cast<time_t>(limit.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return got;
}

// A completion request (streaming or not, as the body says).
std::string stream_request(int port, const std::string& body, std::chrono::seconds limit) {
  return http_exchange(port,
                       "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                       "Content-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body,
                       limit);
}

std::string http_get(int port, const std::string& path) {
  return http_exchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 30s);
}

TEST(ServerE2E, OpenAiSdkAgainstLiveServer) {
  skip_unless_ready(/*need_python=*/true);
  if (IsSkipped()) return;  // GTEST_SKIP in a helper only leaves the helper
  // A KV budget of 1 MiB (f16, serve's default) is ~1k tokens for tiny-gqa: 32 concurrent requests of up to ~350 tokens
  // must preempt. KVSERVE_E2E_KV overrides it for other models.
  const char* kv = std::getenv("KVSERVE_E2E_KV");
  // --tool-call-parser hermes: the tiny model's template writes no tool calls; the forced-call test needs a format.
  ServerProcess server({"--api-key", "e2e-key", "--served-model-name", "tiny-e2e", "--kv-cache-memory",
                        kv && *kv ? kv : "1M", "--max-num-seqs", "32", "-t", "2", "--tool-call-parser", "hermes"});
  ASSERT_TRUE(server.started());
  const int port = server.wait_for_port(120s);
  ASSERT_GT(port, 0) << "server did not start:\n" << server.log();

  const std::string env = "KVSERVE_BASE_URL=http://127.0.0.1:" + std::to_string(port) +
                          " KVSERVE_API_KEY=e2e-key KVSERVE_MODEL_NAME=tiny-e2e KVSERVE_VOCAB=${KVSERVE_VOCAB:-512}";
  const std::string cmd = env + " timeout 900 python3 -m pytest -q -x -p no:cacheprovider -s " KVSERVE_SOURCE_DIR
                                "/tests/server/test_web_page.py " KVSERVE_SOURCE_DIR "/tests/server/test_openai_e2e.py";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "pytest failed (its output is above); server log:\n" << server.log();
  EXPECT_EQ(server.terminate(60s), 0) << server.log();
}

TEST(ServerE2E, SigtermFinishesInFlightStreamsThenExitsZero) {
  skip_unless_ready(/*need_python=*/false);
  if (IsSkipped()) return;
  ServerProcess server({"--served-model-name", "tiny-e2e", "-t", "2"});
  ASSERT_TRUE(server.started());
  const int port = server.wait_for_port(120s);
  ASSERT_GT(port, 0) << "server did not start:\n" << server.log();

  std::string response;
  std::thread client([&] {
    response = stream_request(port, R"({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true,
                                        "stream": true, "stream_options": {"include_usage": true}})",
                              120s);
  });
  std::this_thread::sleep_for(300ms);  // the request is in flight
  const int status = server.terminate(120s);
  client.join();
  EXPECT_EQ(status, 0) << server.log();
  EXPECT_NE(response.find("\"completion_tokens\":200"), std::string::npos) << response;
  EXPECT_NE(response.find("data: [DONE]"), std::string::npos) << response;
}

TEST(ServerE2E, ServesALlama2cCheckpointWithItsTokenizerNamedOnTheCommandLine) {
  // stories260K's tokenizer is tok512.bin, not the tokenizer.bin the loader looks for beside the checkpoint.
  skip_unless_ready(/*need_python=*/false);
  if (IsSkipped()) return;
  const std::string dir = KVSERVE_SHARED_DIR "/models/stories260K";
  if (!std::filesystem::exists(dir + "/stories260K.bin")) GTEST_SKIP() << "no stories260K in " << dir;
  {
    ServerProcess without({"-t", "1"}, dir + "/stories260K.bin");
    ASSERT_TRUE(without.started());
    EXPECT_EQ(without.wait_for_port(60s), 0) << "served without a tokenizer:\n" << without.log();
    EXPECT_NE(without.log().find("tokenizer"), std::string::npos) << without.log();
  }
  ServerProcess server({"--tokenizer", dir + "/tok512.bin", "-t", "1"}, dir + "/stories260K.bin");
  ASSERT_TRUE(server.started());
  const int port = server.wait_for_port(60s);
  ASSERT_GT(port, 0) << "server did not start:\n" << server.log();
  const std::string response =
      stream_request(port, R"({"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true})", 60s);
  EXPECT_NE(response.find("HTTP/1.1 200"), std::string::npos) << response;
  EXPECT_NE(response.find("\"completion_tokens\":8"), std::string::npos) << response;
  EXPECT_EQ(server.terminate(60s), 0) << server.log();
}

// serve --speculative-tokens: stories260K's greedy completion is the same text as from a server without
// speculation, drafts were proposed and taken (Prometheus counters), and bad n-gram flags are refused.
TEST(ServerE2E, SpeculativeServingKeepsGreedyText) {
  skip_unless_ready(/*need_python=*/false);
  if (IsSkipped()) return;
  const std::string dir = KVSERVE_SHARED_DIR "/models/stories260K";
  if (!std::filesystem::exists(dir + "/stories260K.bin")) GTEST_SKIP() << "no stories260K in " << dir;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 120, "temperature": 0, "ignore_eos": true})";
  const auto completion_text = [&](const std::vector<std::string>& flags, double* drafted, double* taken) {
    std::vector<std::string> args = {"--tokenizer", dir + "/tok512.bin", "-t", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    ServerProcess server(args, dir + "/stories260K.bin");
    EXPECT_TRUE(server.started());
    const int port = server.wait_for_port(60s);
    EXPECT_GT(port, 0) << "server did not start:\n" << server.log();
    const std::string response = stream_request(port, body, 60s);
    EXPECT_NE(response.find("HTTP/1.1 200"), std::string::npos) << response;
    const size_t text_at = response.find("\"text\":\"");
    EXPECT_NE(text_at, std::string::npos) << response;
    const std::string text =
        text_at == std::string::npos ? "" : response.substr(text_at, response.find('"', text_at + 8) - text_at);
    const std::string metrics = http_get(port, "/metrics");
    const auto value = [&](const std::string& name) {
      std::smatch m;
      return std::regex_search(metrics, m, std::regex("\n" + name + " ([0-9.e+]+)")) ? std::stod(m[1]) : -1.0;
    };
    *drafted = value("kvserve_spec_decode_draft_tokens_total");
    *taken = value("kvserve_spec_decode_accepted_tokens_total");
    EXPECT_EQ(server.terminate(60s), 0) << server.log();
    return text;
  };
  double drafted = 0, taken = 0, plain_drafted = 0, plain_taken = 0;
  const std::string spec = completion_text({"--speculative-tokens", "4", "--ngram-min", "1"}, &drafted, &taken);
  const std::string plain = completion_text({}, &plain_drafted, &plain_taken);
  EXPECT_GT(spec.size(), 100u) << spec;
  EXPECT_EQ(spec, plain);
  EXPECT_GT(drafted, 0.0);
  EXPECT_GT(taken, 0.0);
  EXPECT_EQ(plain_drafted, 0.0);
  // Drafts from a draft model (stories260K's Q4_0 copy): the same text, drafts proposed and taken.
  double model_drafted = 0, model_taken = 0;
  const std::string with_draft = completion_text(
      {"--draft-model", KVSERVE_SHARED_DIR "/golden/gguf/models/stories260K-Q4_0.gguf"}, &model_drafted, &model_taken);
  EXPECT_EQ(with_draft, plain);
  EXPECT_GT(model_drafted, 0.0);
  EXPECT_GT(model_taken, model_drafted / 2);
  const kvserve::test::CommandResult bad_draft = kvserve::test::run_command(
      "timeout 120 " + std::string(KVSERVE_BINARY) + " serve -m " + dir + "/stories260K.bin --tokenizer " + dir +
          "/tok512.bin --draft-model " + KVSERVE_SHARED_DIR + "/golden/gguf/models/llama-2-tiny-random.gguf",
      true);
  EXPECT_NE(bad_draft.exit_code, 0);
  EXPECT_NE(bad_draft.err.find("vocabulary"), std::string::npos) << bad_draft.err;
  const kvserve::test::CommandResult bad =
      kvserve::test::run_command(std::string(KVSERVE_BINARY) + " serve -m " + dir +
                                     "/stories260K.bin --speculative-tokens 4 --ngram-min 3 --ngram-max 2",
                                 true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--ngram-min 3 is more than --ngram-max 2"), std::string::npos) << bad.err;
}

}  // namespace

// serve --streaming-window / --attention-sinks: stories260K (a 512-token context) completes 700 tokens,
// which a server without eviction refuses as past its context.
TEST(ServerE2E, StreamingWindowServesPastTheContext) {
  skip_unless_ready(/*need_python=*/false);
  if (IsSkipped()) return;
  const std::string dir = KVSERVE_SHARED_DIR "/models/stories260K";
  if (!std::filesystem::exists(dir + "/stories260K.bin")) GTEST_SKIP() << "no stories260K in " << dir;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 700, "ignore_eos": true})";
  for (bool streaming : {true, false}) {
    std::vector<std::string> args = {"--tokenizer", dir + "/tok512.bin", "-t", "1", "--kv-cache-memory", "1M"};
    if (streaming) args.insert(args.end(), {"--streaming-window", "64", "--attention-sinks", "4"});
    ServerProcess server(args, dir + "/stories260K.bin");
    ASSERT_TRUE(server.started());
    const int port = server.wait_for_port(60s);
    ASSERT_GT(port, 0) << "server did not start:\n" << server.log();
    const std::string response = stream_request(port, body, 120s);
    if (streaming) {
      EXPECT_NE(response.find("HTTP/1.1 200"), std::string::npos) << response;
      EXPECT_NE(response.find("\"completion_tokens\":700"), std::string::npos) << response;
      EXPECT_NE(server.log().find("streaming: the full-attention layers keep 4 sink positions"), std::string::npos)
          << server.log();
    } else {
      EXPECT_NE(response.find("HTTP/1.1 400"), std::string::npos) << response;
      EXPECT_NE(response.find("context"), std::string::npos) << response;
    }
    EXPECT_EQ(server.terminate(60s), 0) << server.log();
  }
}

// H2O eviction: a cache budget of about 80 tokens serves a 400-token completion with 16 heavy hitters and
// 16 recent tokens a sequence; without eviction the same budget refuses it.
TEST(ServerE2E, HeavyHitterEvictionServesPastTheBudget) {
  skip_unless_ready(/*need_python=*/false);
  if (IsSkipped()) return;
  const std::string dir = KVSERVE_SHARED_DIR "/models/stories260K";
  if (!std::filesystem::exists(dir + "/stories260K.bin")) GTEST_SKIP() << "no stories260K in " << dir;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true})";
  for (bool h2o : {true, false}) {
    std::vector<std::string> args = {"--tokenizer", dir + "/tok512.bin", "-t", "1", "--kv-cache-memory", "100K"};
    if (h2o) args.insert(args.end(), {"--h2o-heavy", "16", "--h2o-recent", "16"});
    ServerProcess server(args, dir + "/stories260K.bin");
    ASSERT_TRUE(server.started());
    const int port = server.wait_for_port(60s);
    ASSERT_GT(port, 0) << "server did not start:\n" << server.log();
    const std::string response = stream_request(port, body, 120s);
    if (h2o) {
      EXPECT_NE(response.find("HTTP/1.1 200"), std::string::npos) << response;
      EXPECT_NE(response.find("\"completion_tokens\":400"), std::string::npos) << response;
      EXPECT_NE(server.log().find("H2O: the full-attention layers keep 16 heavy hitters"), std::string::npos)
          << server.log();
    } else {
      EXPECT_NE(response.find("HTTP/1.1 400"), std::string::npos) << response;
    }
    EXPECT_EQ(server.terminate(60s), 0) << server.log();
  }
}
