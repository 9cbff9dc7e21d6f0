// `xtrain-worker generate` (the real binary): greedy decoding of an exported model matches
// PyTorch's greedy decoding of the same weights token for token (a full forward per token there,
// past the context too), every kind of MODEL gives the same text, the same seed the same text,
// --stop and --num-samples (side by side, the text of one after another), the same text on any
// number of threads, the closing log line on a line
// of its own on a terminal, and bad input is one error line, exit 2 and nothing on stdout.
//
// The model is byte-level (256 tokens: stdout's bytes are the token ids) with a context of 16, so
// 40 new tokens slide the window twice.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/huge_model_file.hpp"
#include "tests/worker/test_files.hpp"
#include "tests/worker/worker_cli.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/tokenizer/gpt2_vocabulary.hpp"
#include "worker/formats/model_io.hpp"

using namespace xtrain;
using xtrain::test::CliRun;
using xtrain::test::error_line;
using xtrain::test::read_bytes;
using xtrain::test::ScratchDir;
using xtrain::test::shell_quote;
using xtrain::test::write_bytes;
namespace fs = std::filesystem;

namespace {

const ModelSpec kByteModel = test::model_spec(2, 2, 32, 16, 256);

CliRun generate(const ScratchDir& dir, std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  return test::run_model_command(dir, "generate", args, env);
}

}  // namespace

TEST_CASE("generate: greedy decoding of an export is PyTorch's, token for token, past the context too",
          "[generate][torch]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", kByteModel, 0.3f);
  REQUIRE(test::run_worker(dir, "export", {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);

  const std::string prompt = "Hello";
  const CliRun ours = generate(dir, {dir / "hf", "--prompt", prompt, "--temperature", "0", "--max-new-tokens", "40"});
  INFO(ours.output);
  REQUIRE(ours.code == 0);
  REQUIRE(ours.out.size() == 40);

  std::string ids;
  for (const unsigned char c : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(c);
  const std::string command = "/usr/bin/python3 " +
                              shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/torch_reference.py") +
                              " hf-greedy " + shell_quote(dir / "hf") + " --prompt " + ids + " --new 40 > " +
                              shell_quote(dir / "torch.json");
  REQUIRE(std::system(command.c_str()) == 0);
  const std::vector<int> theirs = nlohmann::json::parse(read_bytes(dir / "torch.json")).get<std::vector<int>>();
  std::vector<int> ours_ids;
  for (const unsigned char c : ours.out) ours_ids.push_back(c);
  CHECK(ours_ids == theirs);

  // The same text from the llm.c export, the checkpoint and its run directory.
  REQUIRE(test::run_worker(dir, "export", {ckpt.dir, "--format", "llmc", dir / "m.bin"}).code == 0);
  for (const std::string& model : {dir / "m.bin", ckpt.dir, dir / "run"}) {
    INFO(model);
    const CliRun again = generate(dir, {model, "--prompt", prompt, "--temperature", "0", "--max-new-tokens", "40"});
    CHECK(again.code == 0);
    CHECK(again.out == ours.out);
  }
}

TEST_CASE("generate: the same seed gives the same text, --stop and --num-samples", "[generate]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", kByteModel, 0.3f);
  const std::vector<std::string> sampled = {ckpt.dir, "--prompt", "ab", "--max-new-tokens", "30", "--top-k", "20",
                                            "--top-p", "0.95", "--temperature", "1.2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = sampled;
    args.insert(args.end(), extra.begin(), extra.end());
    return generate(dir, args);
  };
  const CliRun a = with({"--seed", "5"}), b = with({"--seed", "5"}), c = with({"--seed", "6"});
  INFO(a.output);
  REQUIRE(a.code == 0);
  REQUIRE(a.out.size() == 30);  // byte-level: one byte per token
  CHECK(a.out == b.out);
  CHECK(a.out != c.out);
  CHECK(a.output.find("tokens/s") != std::string::npos);
  // --prompt-file is the same prompt as --prompt with its text.
  write_bytes(dir / "prompt.txt", "ab");
  std::vector<std::string> from_file = {ckpt.dir, "--prompt-file", dir / "prompt.txt", "--max-new-tokens", "30",
                                        "--top-k", "20", "--top-p", "0.95", "--temperature", "1.2", "--seed", "5"};
  CHECK(generate(dir, from_file).out == a.out);

  // A stop text taken from the middle of the sample ends it where it first appears, unprinted.
  const std::string stop = a.out.substr(12, 2);
  const CliRun stopped = with({"--seed", "5", "--stop", stop});
  CHECK(stopped.code == 0);
  CHECK(stopped.out == a.out.substr(0, a.out.find(stop)));

  // Samples each from a seed of their own: the first is the single sample, the second the same for
  // any count, and not the first sample of the next seed.
  const CliRun two = with({"--seed", "5", "--num-samples", "2"});
  const CliRun three = with({"--seed", "5", "--num-samples", "3"});
  CHECK(two.code == 0);
  const std::string first = "--- sample 1 of 2 ---\n" + a.out + "\n--- sample 2 of 2 ---\n";
  CHECK(two.out.rfind(first, 0) == 0);
  CHECK(two.out.size() == first.size() + 30);
  const std::string second = two.out.substr(first.size());
  CHECK(three.out.find("--- sample 2 of 3 ---\n" + second + "\n--- sample 3 of 3 ---\n") != std::string::npos);
  CHECK(second != a.out);
  CHECK(second != c.out);
  // On the CPU too the samples run side by side (each row's logits are a one-row decoder's bits),
  // drawn on the decoder's threads: the same text on any number of them.
  CHECK(three.output.find("3 side by side, drawn on 1 thread") != std::string::npos);
  const CliRun three_threads = with({"--seed", "5", "--num-samples", "3", "--threads", "2"});
  CHECK(three_threads.output.find("3 side by side, drawn on 2 threads") != std::string::npos);
  CHECK(three_threads.out == three.out);
  // Past the 16 side by side, the rest after them: sample 17 alone, on a decoder of one row.
  const CliRun many = with({"--seed", "5", "--num-samples", "17"});
  CHECK(many.code == 0);
  CHECK(many.output.find("16 side by side") != std::string::npos);
  CHECK(many.out.find("--- sample 2 of 17 ---\n" + second + "\n--- sample 3 of 17 ---\n") != std::string::npos);
  const size_t last = many.out.find("--- sample 17 of 17 ---\n");
  REQUIRE(last != std::string::npos);
  CHECK(many.out.size() == last + std::string("--- sample 17 of 17 ---\n").size() + 30);

  // Any number of threads: the same text, and the log says how many and why.
  const CliRun threads = with({"--seed", "5", "--threads", "3"});
  CHECK(threads.code == 0);
  CHECK(threads.out == a.out);
  CHECK(threads.output.find("3 threads (--threads)") != std::string::npos);
  // The default for a model this small is one thread, whatever OMP_NUM_THREADS or the machine
  // offers; the log says why.
  const char* before = std::getenv("OMP_NUM_THREADS");
  const std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  ::setenv("OMP_NUM_THREADS", "4", 1);
  const CliRun capped = with({"--seed", "5"});
  if (saved) {
    ::setenv("OMP_NUM_THREADS", saved->c_str(), 1);
  } else {
    ::unsetenv("OMP_NUM_THREADS");
  }
  CHECK(capped.out == a.out);
  CHECK(capped.output.find("1 thread (OMP_NUM_THREADS gave 4; 0.1 MB of weights use at most one per 8 MiB)") !=
        std::string::npos);
}

TEST_CASE("generate on a terminal: the closing log line starts a line of its own", "[generate]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", kByteModel, 0.3f);
  // script(1) runs the command with stdout and stderr on one pseudo-terminal and copies the screen.
  const std::string command = shell_quote(std::string(XTRAIN_BIN_DIR) + "/xtrain-worker") + " generate " +
                              shell_quote(ckpt.dir) + " --prompt ab --max-new-tokens 30 --temperature 1.2 --seed 5";
  const std::string line = "script -qec " + shell_quote(command) + " /dev/null > " + shell_quote(dir / "screen.txt");
  REQUIRE(std::system(line.c_str()) == 0);
  const std::string screen = read_bytes(dir / "screen.txt");
  INFO(screen);
  const size_t at = screen.find("info: generated 30 tokens");
  REQUIRE(at != std::string::npos);
  const size_t starts = screen.rfind('\n', at) + 1;
  // Only the log line's timestamp between the line's start and its text, no sample text.
  const std::string before = screen.substr(starts, at - starts);
  CHECK(before.size() == std::string("2026-12-05 09:17:45.017 ").size());
  CHECK(before.find_first_not_of("0123456789-:. ") == std::string::npos);
}

TEST_CASE("generate: bad input is one error line, exit 2, nothing on stdout", "[generate][errors]") {
  ScratchDir dir;
  const test::TestCheckpoint bytes(dir / "run", "", kByteModel, 0.3f);
  const test::TestCheckpoint no_tokenizer(dir / "run70");  // 70 tokens: not byte-level, and no vocabulary
  write_bytes(dir / "notes.txt", "not a model");
  fs::create_directories(dir / "empty");
  fs::create_directories(dir / "fresh-run/checkpoints");
  fs::create_directories(dir / "failed-run");  // a run that failed before its first checkpoint
  write_bytes(dir / "failed-run/summary.json", "{}");
  // A checkpoint's tokenizer with a flipped bit: caught by its checksum before it is loaded.
  fs::create_directories(dir / "vocab");
  write_bytes(dir / "vocab/vocab.json", "{\"a\": 0}");
  write_bytes(dir / "vocab/merges.txt", "#version: 0.2\n");
  const test::TestCheckpoint flipped(dir / "run-flipped", dir / "vocab");
  write_bytes(flipped.dir + "/merges.txt", "#version: 0.3\n");

  struct Case {
    std::vector<std::string> args;
    std::string error;
    std::vector<std::string> env = {};
  };
  // "cuda" that cannot be had, on any machine: the plugin is not where it is looked for.
  const std::vector<std::string> no_plugin = {"XTRAIN_CUDA_PLUGIN=" + dir / "none.so"};
  const std::string kinds = "not a model: expected a run directory (with checkpoints/), a checkpoint or a Hugging "
                            "Face GPT-2 directory (config.json + model.safetensors), or an llm.c model file; ";
  const std::vector<Case> cases = {
      {{dir / "notes.txt"}, dir / "notes.txt" + ": " + kinds + "this file begins with 544501614, not llm.c's magic 20240326"},
      {{dir / "empty"}, dir / "empty" + ": " + kinds + "this directory has neither checkpoints/ nor config.json"},
      {{dir / "fresh-run"}, dir / "fresh-run" + ": a run directory without a complete, intact checkpoint"},
      {{dir / "failed-run"}, dir / "failed-run" + ": a run directory without a complete, intact checkpoint"},
      {{dir / "run/checkpoints"}, dir / "run/checkpoints" + ": " + kinds + "this is a run's checkpoints/ folder, whose "
                                  "newest checkpoint is " + dir / "run/checkpoints/step-"},
      {{dir / "missing"}, dir / "missing" + ": No such file or directory"},
      {{flipped.dir}, "checkpoint " + flipped.dir + ": merges.txt: damaged: its CRC-32C is "},
      {{bytes.dir, "--prompt", std::string(16, 'x')},
       "--prompt: 16 tokens, but the model's context is 16: at most 15 leave room to generate"},
      {{bytes.dir, "--top-p", "0"}, "--top-p: expected a number in (0, 1]"},
      {{bytes.dir, "--top-p", "1.5"}, "--top-p: expected a number in (0, 1], got 1.5"},
      {{bytes.dir, "--temperature", "-1"}, "--temperature: expected a number >= 0 (0: greedy), got -1"},
      {{bytes.dir, "--max-new-tokens", "0"}, "--max-new-tokens: expected an integer >= 1"},
      {{bytes.dir, "--device", "cuda"}, "--device: \"cuda\" asked for, but the CUDA plugin " + dir / "none.so", no_plugin},
      {{bytes.dir, "--device", "tpu"}, "--device: expected \"cpu\", \"cuda\" or \"auto\", got \"tpu\""},
      {{bytes.dir, "--precision", "fp16"}, "--precision: expected \"auto\", \"fp32\", \"tf32\" or \"bf16\", got \"fp16\""},
      {{bytes.dir, "--device", "cpu", "--precision", "bf16"},
       "--precision: \"bf16\" needs a GPU; generation on the CPU is fp32 (its KV cache)"},
      {{bytes.dir, "--device", "auto", "--precision", "bf16"},
       "--precision: \"bf16\" needs a GPU; generation on the CPU is fp32 (its KV cache)", no_plugin},
      {{bytes.dir, "--device", "cpu", "--precision", "tf32"},
       "--precision: \"tf32\" needs a GPU; generation on the CPU is fp32 (its KV cache)"},
      {{bytes.dir, "--device", "auto", "--precision", "tf32"},
       "--precision: \"tf32\" needs a GPU; generation on the CPU is fp32 (its KV cache)", no_plugin},
      {{bytes.dir, "--prompt-file", dir / "nope.txt"}, "--prompt-file: cannot read"},
      {{bytes.dir, "--threads", "0"}, "--threads: expected an integer >= 1 and <= 1024, got \"0\""},
      {{bytes.dir, "--threads", "two"}, "--threads: expected an integer"},
      {{bytes.dir, "--bogus"}, "command line: unknown option \"--bogus\""},
      {{no_tokenizer.dir}, no_tokenizer.dir + ": no tokenizer comes with this model (70 tokens): give --tokenizer"},
      // Refused before anything is allocated, where the allocation would fail or the kernel's
      // out-of-memory killer end the process.
      {{test::write_huge_llmc_model(dir / "huge.bin"), "--device", "cpu"},
       "--device: the memory this process may use (the machine's, or its cgroup's limit) is "},
  };
  for (const Case& c : cases) {
    const CliRun run = generate(dir, c.args, c.env);
    INFO(c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : "") << "\n" << run.output);
    CHECK(run.code == 2);
    CHECK(error_line(run.output).rfind("error: " + c.error, 0) == 0);
    CHECK(run.out.empty());
  }
}

TEST_CASE("generate from an llm.c model file decodes with the gpt2_tokenizer.bin beside it, as llm.c's sampler does",
          "[generate]") {
  ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", test::gpt2_hf_dir(), test::model_spec(1, 2, 16, 32, 50257), 0.3f);
  REQUIRE(test::run_worker(dir, "export", {ckpt.dir, "--format", "llmc", dir / "llmc/model.bin"}).code == 0);
  const std::vector<std::string> sampling = {"--max-new-tokens", "24", "--seed", "5", "--num-samples", "2"};
  const auto run = [&](const std::string& model, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {model};
    args.insert(args.end(), sampling.begin(), sampling.end());
    args.insert(args.end(), more.begin(), more.end());
    return generate(dir, args);
  };
  // The same weights with GPT-2's vocabulary files: the same samples.
  const CliRun table = run(dir / "llmc/model.bin"), files = run(dir / "run");
  INFO(table.output);
  REQUIRE(table.code == 0);
  REQUIRE(files.code == 0);
  CHECK(table.out == files.out);
  CHECK(table.out.find("--- sample 2 of 2 ---") != std::string::npos);
  CHECK(table.output.find("info: tokenizer: " + dir / "llmc/gpt2_tokenizer.bin" +
                          " (llm.c's tokenizer file): it decodes only, so samples start from <|endoftext|>") !=
        std::string::npos);
  // --tokenizer takes the same file for any model.
  CHECK(run(dir / "run", {"--tokenizer", dir / "llmc/gpt2_tokenizer.bin"}).out == files.out);

  // It cannot encode a prompt: one error line; --tokenizer can.
  const CliRun prompted = run(dir / "llmc/model.bin", {"--prompt", "Hi"});
  CHECK(prompted.code == 2);
  CHECK(error_line(prompted.output) == "error: --prompt: " + dir / "llmc/gpt2_tokenizer.bin" +
                                           " (llm.c's tokenizer file) decodes only: give --tokenizer PATH (GPT-2 "
                                           "vocabulary files) to encode a prompt");
  CHECK(run(dir / "llmc/model.bin", {"--prompt", "Hi", "--tokenizer", test::gpt2_hf_dir()}).code == 0);

  // A damaged table is refused naming it. A table of another vocabulary (another model's in the
  // same directory), or none, is not this model's: the files are asked for.
  const std::string good = read_bytes(dir / "llmc/gpt2_tokenizer.bin");
  write_bytes(dir / "llmc/gpt2_tokenizer.bin", good.substr(0, good.size() - 1));
  const CliRun damaged = run(dir / "llmc/model.bin");
  CHECK(damaged.code == 2);
  CHECK(error_line(damaged.output) == "error: " + dir / "llmc/model.bin" + ": its tokenizer: " + dir /
                                          "llmc/gpt2_tokenizer.bin" + ": llm.c tokenizer file: token 50256 runs "
                                          "past the end of the file (name the vocabulary with --tokenizer PATH)");
  const std::string no_tokenizer =
      "error: " + dir / "llmc/model.bin" +
      ": no tokenizer comes with this model (50257 tokens): give --tokenizer PATH (GPT-2 vocabulary files)";
  std::string other = good;
  other[8] = 1;  // the header's vocabulary, 0xC451 (50257), becomes 0xC401 (50177)
  write_bytes(dir / "llmc/gpt2_tokenizer.bin", other);
  CHECK(error_line(run(dir / "llmc/model.bin").output) == no_tokenizer);
  std::filesystem::remove(dir / "llmc/gpt2_tokenizer.bin");
  CHECK(error_line(run(dir / "llmc/model.bin").output) == no_tokenizer);
}

TEST_CASE("generate with the GPT-2 tokenizer: the tokens' text, <|endoftext|> starts and ends a sample",
          "[generate]") {
  ScratchDir dir;
  const ParamLayout layout(ModelDims::from(test::model_spec(1, 1, 8, 8, 50257)));
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(test::gpt2_hf_dir());
  // A model whose final layernorm has weight 0 and bias u: every position's features are u, so
  // greedy decoding always picks the token whose row of wte is 10 u (the others are 0).
  const auto favouring = [&](std::int32_t token, const std::string& out) {
    std::vector<float> p(layout.total(), 0.0f);
    const int C = layout.dims().C;
    for (int c = 0; c < C; ++c) {
      p[layout.lnf_b() + static_cast<size_t>(c)] = c % 2 ? 1.0f : -1.0f;
      p[layout.wte() + static_cast<size_t>(token) * C + c] = 10.0f * (c % 2 ? 1.0f : -1.0f);
    }
    export_hf_directory(out, layout, p.data(), read_tokenizer_files(test::gpt2_hf_dir(), layout.dims().T),
                        tokenizer.eot(), false);
  };
  favouring(1234, dir / "word");
  const CliRun words = generate(dir, {dir / "word", "--temperature", "0", "--max-new-tokens", "5"});
  INFO(words.output);
  CHECK(words.code == 0);
  const std::string word = tokenizer.decode_token(1234);
  CHECK(words.out == word + word + word + word + word);
  CHECK(words.output.find("prompt 1 tokens") != std::string::npos);  // no prompt: <|endoftext|> alone
  // A directory whose only tokenizer is tokenizer.json (as transformers may save one): the same.
  fs::copy(dir / "word", dir / "word-json");
  fs::remove(dir / "word-json/vocab.json");
  fs::remove(dir / "word-json/merges.txt");
  const CliRun from_json = generate(dir, {dir / "word-json", "--prompt", "Hi there", "--temperature", "0",
                                          "--max-new-tokens", "5"});
  INFO(from_json.output);
  CHECK(from_json.code == 0);
  CHECK(from_json.out == word + word + word + word + word);
  CHECK(from_json.output.find("prompt 2 tokens") != std::string::npos);

  favouring(tokenizer.eot(), dir / "eot");
  const CliRun ends = generate(dir, {dir / "eot", "--prompt", "Hi", "--temperature", "0", "--max-new-tokens", "5"});
  CHECK(ends.code == 0);
  CHECK(ends.out.empty());
  CHECK(ends.output.find("generated 1 tokens") != std::string::npos);
}
