// `xtrain-worker eval` (the real binary): loss, perplexity and bits per byte of an exported model
// on a text file equal PyTorch's on the same weights and windows (all of it, and --max-tokens);
// bad input is one error line, exit 2, nothing on stdout.
//
// Tolerance: the same fp32 forward in other summation orders (test_gpt_vs_torch.cpp); PyTorch sums
// the losses in double. 1e-5 relative.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/test_files.hpp"
#include "tests/worker/worker_cli.hpp"

using namespace xtrain;
using xtrain::test::CliRun;
using xtrain::test::error_line;
using xtrain::test::read_bytes;
using xtrain::test::ScratchDir;
using xtrain::test::shell_quote;
using xtrain::test::write_bytes;

namespace {

nlohmann::json torch_scores(const ScratchDir& dir, const std::string& hf, const std::string& text, int window,
                            int max_tokens) {
  const std::string command = "/usr/bin/python3 " +
                              shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/torch_reference.py") +
                              " hf-loss " + shell_quote(hf) + " " + shell_quote(text) + " --window " +
                              std::to_string(window) + " --max-tokens " + std::to_string(max_tokens) + " > " +
                              shell_quote(dir / "torch.json");
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  return nlohmann::json::parse(read_bytes(dir / "torch.json"));
}

}  // namespace

TEST_CASE("eval: loss, perplexity and bits per byte of a text file are PyTorch's", "[eval][torch]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 32, 16, 256), 0.3f);
  REQUIRE(test::run_worker(dir, "export", {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i * 7) + ": the quick brown fox\n";
  write_bytes(dir / "text.txt", text);

  for (const int max_tokens : {0, 100, 10}) {
    INFO("--max-tokens " << max_tokens);
    std::vector<std::string> args = {dir / "run", "--data", dir / "text.txt", "--json"};
    if (max_tokens) args.insert(args.end(), {"--max-tokens", std::to_string(max_tokens)});
    const CliRun ours = test::run_worker(dir, "eval", args);
    INFO(ours.output);
    REQUIRE(ours.code == 0);
    const auto got = nlohmann::json::parse(ours.out);
    const int window = max_tokens && max_tokens < 16 ? max_tokens : 16;
    const auto want = torch_scores(dir, dir / "hf", dir / "text.txt", window, max_tokens);
    CHECK(got.at("tokens") == want.at("tokens"));
    CHECK(got.at("window") == window);
    CHECK(got.at("loss").get<double>() == Approx(want.at("loss").get<double>()).epsilon(1e-5));
    CHECK(got.at("perplexity").get<double>() == Approx(std::exp(want.at("loss").get<double>())).epsilon(1e-5));
    CHECK(got.at("bits_per_byte").get<double>() == Approx(want.at("bits_per_byte").get<double>()).epsilon(1e-5));
    CHECK(got.at("bytes") == got.at("tokens"));  // byte-level: a token per byte
  }
  // Text: one line on stdout.
  const CliRun line = test::run_worker(dir, "eval", {dir / "hf", "--data", dir / "text.txt"});
  CHECK(line.code == 0);
  CHECK(line.out.find("tokens, loss ") != std::string::npos);
  CHECK(line.out.find(" bits per byte\n") != std::string::npos);
}

TEST_CASE("eval: bad input is one error line, exit 2, nothing on stdout", "[eval][errors]") {
  ScratchDir dir;
  const test::TestCheckpoint small(dir / "run");  // 70 tokens: text bytes above 69 do not fit
  write_bytes(dir / "text.txt", "zzzz");
  write_bytes(dir / "one.txt", "\x01");
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{small.dir}, "--data: missing"},
      {{small.dir, "--data", dir / "nope.txt"}, "--data: " + dir / "nope.txt"},
      {{small.dir, "--data", dir / "text.txt"}, "--data: "},
      {{small.dir, "--data", dir / "one.txt"}, "--data: " + dir / "one.txt" + " has 1 tokens; scoring needs at least 2"},
      {{small.dir, "--data", dir / "one.txt", "--max-tokens", "0"}, "--max-tokens: expected an integer >= 1"},
      {{dir / "text.txt", "--data", dir / "one.txt"}, dir / "text.txt" + ": not a model"},
  };
  for (const Case& c : cases) {
    const CliRun run = test::run_worker(dir, "eval", c.args);
    INFO(run.output);
    CHECK(run.code == 2);
    CHECK(error_line(run.output).rfind("error: " + c.error, 0) == 0);
    CHECK(run.out.empty());
  }
}
