// `xtrain-worker eval` (the real binary): loss, perplexity and bits per byte of an exported model
// on a text file equal PyTorch's on the same weights and windows (all of it, and --max-tokens);
// --precision bf16 emulated on the CPU; text for a model with GPT-2's tokenizer scores as the
// shards xtrain-data makes of it; bad input is one error line, exit 2, nothing on stdout.
//
// Tolerance: the same fp32 forward in other summation orders (test_gpt_vs_torch.cpp); PyTorch sums
// the losses in double. 1e-5 relative.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/number_format.hpp"
#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/huge_model_file.hpp"
#include "tests/worker/multiple_choice_file.hpp"
#include "tests/worker/test_files.hpp"
#include "tests/worker/worker_cli.hpp"
#include "worker/model/memory_plan.hpp"

using namespace xtrain;
using xtrain::test::CliRun;
using xtrain::test::eval_file;
using xtrain::test::Example;
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
    const CliRun ours = test::run_model_command(dir, "eval", args);
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
  // The same bytes as an llm.c token shard (a token a byte): a byte-level model's shards count bytes too.
  std::string shard(256 * 4 + 2 * text.size(), '\0');
  const std::int32_t header[3] = {20240520, 1, static_cast<std::int32_t>(text.size())};
  std::memcpy(shard.data(), header, sizeof header);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto token = static_cast<std::uint16_t>(static_cast<unsigned char>(text[i]));
    std::memcpy(shard.data() + 256 * 4 + 2 * i, &token, 2);
  }
  write_bytes(dir / "text_val_000000.bin", shard);
  const CliRun as_text = test::run_model_command(dir, "eval", {dir / "hf", "--data", dir / "text.txt", "--json"});
  const CliRun as_shard =
      test::run_model_command(dir, "eval", {dir / "hf", "--data", dir / "text_val_000000.bin", "--json"});
  INFO(as_shard.output);
  REQUIRE(as_text.code == 0);
  REQUIRE(as_shard.code == 0);
  for (const char* key : {"tokens", "loss", "bits_per_byte", "bytes"}) {
    INFO(key);
    CHECK(nlohmann::json::parse(as_shard.out).at(key) == nlohmann::json::parse(as_text.out).at(key));
  }
  CHECK_FALSE(nlohmann::json::parse(as_shard.out).at("bits_per_byte").is_null());

  // --precision bf16 on the CPU: the GPU's storage emulated (worker/cpu/cpu_backend.hpp), so a loss
  // near fp32's but not fp32's. Each stored activation is rounded to 8 bits of mantissa (2^-9
  // relative); through 2 layers that moves a loss of about 5.5 by 1e-3 relative, 2e-2 is the bound.
  const CliRun fp32 = test::run_model_command(dir, "eval", {dir / "run", "--data", dir / "text.txt", "--json"});
  const CliRun bf16 =
      test::run_model_command(dir, "eval", {dir / "run", "--data", dir / "text.txt", "--precision", "bf16", "--json"});
  INFO(bf16.output);
  REQUIRE(fp32.code == 0);
  REQUIRE(bf16.code == 0);
  const auto exact = nlohmann::json::parse(fp32.out), rounded = nlohmann::json::parse(bf16.out);
  CHECK(exact.at("device") == "cpu");
  CHECK(exact.at("precision") == "fp32");
  CHECK(rounded.at("precision") == "bf16");
  CHECK(bf16.output.find("device cpu: scoring on the CPU; bf16; ") != std::string::npos);
  CHECK(rounded.at("loss").get<double>() != exact.at("loss").get<double>());
  CHECK(rounded.at("loss").get<double>() == Approx(exact.at("loss").get<double>()).epsilon(2e-2));

  // Text: one line on stdout.
  const CliRun line = test::run_model_command(dir, "eval", {dir / "hf", "--data", dir / "text.txt"});
  CHECK(line.code == 0);
  CHECK(line.out.find("tokens, loss ") != std::string::npos);
  CHECK(line.out.find(" bits per byte\n") != std::string::npos);
}

TEST_CASE("eval: text for a model with GPT-2's tokenizer is encoded as xtrain-data encodes it: its shards' scores, and "
          "llm.c's tokenizer file counts bytes",
          "[eval]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", test::gpt2_hf_dir(), test::model_spec(1, 2, 16, 32, 50257), 0.3f);
  std::filesystem::create_directories(dir / "text");
  std::string a, b;
  for (int i = 0; i < 30; ++i) {
    a += "Line " + std::to_string(i * 37) + ": the caf\xc3\xa9's price rose to $" + std::to_string(i) + ".50 \xe2\x80\x94 why?\n";
    b += "  indented\tcode(" + std::to_string(i) + "); // <|endoftext|> is text here \xf0\x9f\x99\x82\n";
  }
  write_bytes(dir / "text/a.txt", a);
  write_bytes(dir / "text/b.txt", b);
  write_bytes(dir / "text/c.txt", "");  // no document, as xtrain-data skips it
  const std::string make_shards = shell_quote(std::string(XTRAIN_BIN_DIR) + "/xtrain-data") + " --vocab " +
                                  shell_quote(test::gpt2_hf_dir()) + " --out " + shell_quote(dir / "shards") +
                                  " --val-tokens 0 --quiet " + shell_quote(dir / "text") + " > /dev/null 2>&1";
  REQUIRE(std::system(make_shards.c_str()) == 0);

  const CliRun text = test::run_model_command(dir, "eval", {dir / "run", "--data", dir / "text/*.txt", "--json"});
  const CliRun shards = test::run_model_command(dir, "eval", {dir / "run", "--data", dir / "shards/*.bin", "--json"});
  INFO(text.output << shards.output);
  REQUIRE(text.code == 0);
  REQUIRE(shards.code == 0);
  CHECK(text.output.find("info: --data: " + format_bytes(a.size() + b.size()) + " of text encoded with ") !=
        std::string::npos);
  const auto got = nlohmann::json::parse(text.out), want = nlohmann::json::parse(shards.out);
  CHECK(got.at("window") == 32);
  CHECK(got.at("tokens").get<int>() > 3 * 32);
  for (const char* key : {"tokens", "loss", "bits_per_byte", "bytes"}) {
    INFO(key);
    CHECK(got.at(key) == want.at(key));  // the same tokens through the same forward: the same bits
  }

  // An llm.c export has no vocabulary files, only llm.c's tokenizer file beside it, which counts the
  // shards' bytes but cannot encode: --tokenizer names vocabulary files, and without them text is refused.
  REQUIRE(test::run_worker(dir, "export", {dir / "run", "--format", "llmc", dir / "model.bin"}).code == 0);
  const CliRun counted = test::run_model_command(dir, "eval", {dir / "model.bin", "--data", dir / "shards/*.bin", "--json"});
  INFO(counted.output);
  REQUIRE(counted.code == 0);
  for (const char* key : {"tokens", "loss", "bits_per_byte", "bytes"}) {
    INFO(key);
    CHECK(nlohmann::json::parse(counted.out).at(key) == want.at(key));
  }
  const CliRun named = test::run_model_command(
      dir, "eval", {dir / "model.bin", "--data", dir / "text/*.txt", "--tokenizer", test::gpt2_hf_dir(), "--json"});
  INFO(named.output);
  REQUIRE(named.code == 0);
  CHECK(nlohmann::json::parse(named.out).at("loss") == want.at("loss"));
  const CliRun refused = test::run_model_command(dir, "eval", {dir / "model.bin", "--data", dir / "text/a.txt"});
  CHECK(refused.code == 2);
  CHECK(error_line(refused.output) ==
        "error: --data: " + dir / "text/a.txt" + " is text, and " + dir / "gpt2_tokenizer.bin" +
            " (llm.c's tokenizer file) decodes only: give --tokenizer PATH (GPT-2 vocabulary files) to encode it, "
            "or score llm.c token shards (xtrain-data makes them from text)");
  std::filesystem::remove(dir / "gpt2_tokenizer.bin");
  const CliRun no_tokenizer = test::run_model_command(dir, "eval", {dir / "model.bin", "--data", dir / "text/a.txt"});
  CHECK(no_tokenizer.code == 2);
  CHECK(error_line(no_tokenizer.output) ==
        "error: --data: " + dir / "text/a.txt" + " is text, and " + dir / "model.bin" +
            " (50257 tokens, not bytes) has no tokenizer to encode it with: give --tokenizer PATH (GPT-2 vocabulary "
            "files), or score llm.c token shards (xtrain-data makes them from text)");
}

TEST_CASE("eval --max-tokens on text encodes only the chunks it needs, to the same tokens as the whole text's",
          "[eval]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", test::gpt2_hf_dir(), test::model_spec(1, 2, 16, 32, 50257), 0.3f);
  std::string big;
  for (int i = 0; big.size() < (5u << 19); ++i) {
    big += "Line " + std::to_string(i) + ": the caf\xc3\xa9's price rose to $" + std::to_string(i % 97) +
           " \xe2\x80\x94 why?\n";
  }
  write_bytes(dir / "big.txt", big);
  // Its beginning, cut before a newline that follows "?": where the tokens cannot change.
  write_bytes(dir / "start.txt", big.substr(0, big.find("?\n", 4000) + 1));
  const auto score = [&](const std::string& file) {
    const CliRun r =
        test::run_model_command(dir, "eval", {dir / "run", "--data", file, "--max-tokens", "64", "--json"});
    INFO(r.output);
    REQUIRE(r.code == 0);
    return std::pair{nlohmann::json::parse(r.out), r.output};
  };
  const auto [whole, log] = score(dir / "big.txt");
  const auto [start, _] = score(dir / "start.txt");
  CHECK(whole.at("tokens") == 64);
  CHECK(log.find(" of text (of " + format_bytes(big.size()) + ": enough for --max-tokens) encoded with ") !=
        std::string::npos);
  for (const char* key : {"tokens", "loss", "bits_per_byte", "bytes"}) {
    INFO(key);
    CHECK(whole.at(key) == start.at(key));
  }
}

TEST_CASE("eval: bad input is one error line, exit 2, nothing on stdout", "[eval][errors]") {
  ScratchDir dir;
  const test::TestCheckpoint small(dir / "run");  // 70 tokens: text bytes above 69 do not fit
  write_bytes(dir / "text.txt", "zzzz");
  write_bytes(dir / "one.txt", "\x01");
  write_bytes(dir / "ok.txt", "\x01\x02\x03\x04\x05");  // scoreable: the device is what is wrong
  struct Case {
    std::vector<std::string> args;
    std::string error;
    std::vector<std::string> env = {};
  };
  // "cuda" that cannot be had, on any machine: the plugin is not where it is looked for.
  const std::vector<std::string> no_plugin = {"XTRAIN_CUDA_PLUGIN=" + dir / "none.so"};
  const std::vector<Case> cases = {
      {{small.dir}, "--data: missing"},
      {{small.dir, "--data", dir / "nope.txt"}, "--data: " + dir / "nope.txt"},
      {{small.dir, "--data", dir / "text.txt"}, "--data: "},
      {{small.dir, "--data", dir / "one.txt"}, "--data: " + dir / "one.txt" + " has 1 tokens; scoring needs at least 2"},
      {{small.dir, "--data", dir / "one.txt", "--max-tokens", "0"}, "--max-tokens: expected an integer >= 1"},
      {{dir / "text.txt", "--data", dir / "one.txt"}, dir / "text.txt" + ": not a model"},
      {{small.dir, "--data"}, "command line: --data needs a value (see eval --help)"},
      {{small.dir, "--data=" + dir / "one.txt", "--json=yes"}, "command line: --json takes no value (see eval --help)"},
      {{small.dir, "--data", dir / "one.txt", "--device", "tpu"}, "--device: expected \"cpu\", \"cuda\" or \"auto\", got \"tpu\""},
      {{small.dir, "--data", dir / "one.txt", "--precision", "fp16"},
       "--precision: expected \"auto\", \"fp32\", \"tf32\" or \"bf16\", got \"fp16\""},
      {{small.dir, "--data", dir / "ok.txt", "--device", "cpu", "--precision", "tf32"},
       "--precision: \"tf32\" is a tensor-core mode of CUDA GPUs"},
      {{small.dir, "--data", dir / "ok.txt", "--device", "cuda"},
       "--device: \"cuda\" asked for, but the CUDA plugin " + dir / "none.so", no_plugin},
      // Refused before anything is allocated, where the allocation would fail or the kernel's
      // out-of-memory killer end the process.
      {{test::write_huge_llmc_model(dir / "huge.bin"), "--data", dir / "ok.txt", "--device", "cpu"},
       "--device: the memory this process may use (the machine's, or its cgroup's limit) is "},
  };
  for (const Case& c : cases) {
    const CliRun run = test::run_model_command(dir, "eval", c.args, c.env);
    INFO(run.output);
    CHECK(run.code == 2);
    CHECK(error_line(run.output).rfind("error: " + c.error, 0) == 0);
    CHECK(run.out.empty());
  }
}

TEST_CASE("eval --multiple-choice: llm.c's accuracy (lowest mean completion loss), as PyTorch scores it",
          "[eval][torch]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 32, 16, 256), 0.3f);
  REQUIRE(test::run_worker(dir, "export", {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);
  write_bytes(dir / "mc.bin", eval_file(test::random_examples(24, 9, 256)));
  const CliRun ours = test::run_model_command(dir, "eval", {dir / "run", "--multiple-choice", dir / "mc.bin", "--json"});
  INFO(ours.output);
  REQUIRE(ours.code == 0);
  const auto got = nlohmann::json::parse(ours.out).at("multiple_choice");
  const std::string command = "/usr/bin/python3 " +
                              shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/torch_reference.py") +
                              " hf-choice " + shell_quote(dir / "hf") + " " + shell_quote(dir / "mc.bin") + " > " +
                              shell_quote(dir / "torch.json");
  REQUIRE(std::system(command.c_str()) == 0);
  const auto want = nlohmann::json::parse(read_bytes(dir / "torch.json"));
  CHECK(got.at("examples") == 24);
  CHECK(got.at("predictions") == want.at("predictions"));
  CHECK(got.at("correct") == want.at("correct"));
  CHECK(got.at("accuracy").get<double>() == Approx(want.at("accuracy").get<double>()));
}

TEST_CASE("eval --multiple-choice: a bad header or a truncated example names the file and the example",
          "[eval][errors]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 32, 16, 256), 0.3f);
  const std::vector<Example> two = {{1, {1, 2, 3}, {{4}, {5, 6}}}, {0, {7, 8}, {{9, 10}, {11}, {12}}}};
  const std::string good = eval_file(two);
  std::string mislabeled = good;
  mislabeled[1024 + 2 * 3] = 7;  // example 0's label, outside its 2 completions
  const struct {
    std::string name, bytes, error;
  } cases[] = {
      {"magic.bin", eval_file(two, 20240520), ": header: magic is 20240520, expected 20240522"},
      {"short.bin", good.substr(0, 100), ": truncated header: 100 bytes"},
      {"cut.bin", good.substr(0, good.size() - 4), ": example 1 (at byte "},
      {"label.bin", mislabeled, ": example 0 (at byte 1024): label 7 is not one of its 2 completions"},
      {"extra.bin", good + std::string(4, '\0'), ": 4 bytes after the last of the header's 2 examples"},
  };
  for (const auto& c : cases) {
    write_bytes(dir / c.name, c.bytes);
    const CliRun run = test::run_model_command(dir, "eval", {ckpt.dir, "--multiple-choice", dir / c.name});
    INFO(run.output);
    CHECK(run.code == 2);
    CHECK(error_line(run.output).rfind("error: --multiple-choice: " + dir / c.name + c.error, 0) == 0);
    CHECK(run.out.empty());
  }
  const CliRun cut = test::run_model_command(dir, "eval", {ckpt.dir, "--multiple-choice", dir / "cut.bin"});
  CHECK(error_line(cut.output).find("is truncated: the file ends inside it") != std::string::npos);
}
