// `xtrain-worker generate` and `eval` with --device cuda ([gpu]; in interpret mode on every machine,
// the CUDA backend's code run on the CPU): the GPU's forward against the CPU's on one checkpoint of
// a byte-level model (2 layers, 2 heads of 16, context 16, weights N(0, 0.3)).
//
// - generate, greedy, fp32 (strict, no TF32): the CPU's KV-cached decoder's 40 tokens, through two
//   slides of the window. Both are fp32 forwards with their sums in other orders, so their logits
//   differ by about 1e-6 of the largest (the CPU's two decoders by 3e-7, test_kv_decoder.cpp); a
//   token could differ only at a step whose best two logits are that close.
// - generate in bf16: 40 tokens, and the device line says bf16 on the GPU.
// - generate, sampled, fp32, 4 samples side by side on the GPU (rows of one batch, each its own
//   seed, ended by a stop text at different tokens) against the CPU's (side by side too, each row
//   the bits of one after another): the same stdout. A draw could differ only where a sample's uniform number falls within the logits'
//   1e-6 of a boundary between two tokens' shares.
// - a head size the GPU's attention does not take: exit 2, one line naming the model.
// - eval, fp32: the CPU's loss within 1e-5 relative and the same multiple-choice predictions; bf16:
//   the CPU's bf16 emulation (the same rounding points) within 1e-3 relative: the two differ only
//   where a sum in another order lands on the other side of a bf16 rounding. Measured in
//   interpret mode: 1.1e-9 and 1.2e-8; a GPU's products sum in more orders. A forward that reads
//   a wrong row or position moves the loss by far more than either bound.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/launcher/harness.hpp"
#include "tests/worker/multiple_choice_file.hpp"
#include "tests/worker/worker_cli.hpp"

using namespace xtrain;
using xtrain::test::Finished;
using xtrain::test::Process;

namespace {

// xtrain-worker COMMAND ARGS... to its end (the test fails past two minutes).
Finished run_command(const std::string& command, std::vector<std::string> args) {
  args.insert(args.begin(), {test::bin_path("xtrain-worker"), command});
  Process p(args);
  const std::optional<Finished> done = p.wait(120);
  REQUIRE(done.has_value());
  INFO(done->out << done->err);
  REQUIRE(done->exit_code == 0);
  return *done;
}

}  // namespace

TEST_CASE("generate --device cuda: greedy fp32 is the CPU's text, bf16 runs on the GPU", "[gpu][commands]") {
  test::ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 32, 16, 256), 0.3f);
  const std::vector<std::string> greedy = {ckpt.dir, "--prompt", "Hello", "--temperature", "0", "--max-new-tokens", "40"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = greedy;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_command("generate", args);
  };
  const Finished cpu = with({"--device", "cpu"});
  const Finished gpu = with({"--device", "cuda", "--precision", "fp32"});
  REQUIRE(cpu.out.size() == 40);
  CHECK(gpu.out == cpu.out);
  CHECK(gpu.err.find("device cuda: generating on GPU 0: ") != std::string::npos);
  CHECK(gpu.err.find("; fp32") != std::string::npos);

  const Finished bf16 = with({"--device", "cuda"});  // auto: bf16 on a GPU
  CHECK(bf16.out.size() == 40);
  CHECK(bf16.err.find("; bf16") != std::string::npos);
}

TEST_CASE("generate --device cuda: samples side by side are the CPU's samples", "[gpu][commands]") {
  test::ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 32, 16, 256), 0.3f);
  const auto samples = [&](const std::string& device, const std::string& threads) {
    return run_command("generate", {ckpt.dir, "--prompt", "ab", "--max-new-tokens", "40", "--top-k", "20",
                                    "--temperature", "1.2", "--seed", "3", "--num-samples", "4", "--stop", "$",
                                    "--device", device, "--precision", "fp32", "--threads", threads});
  };
  const Finished cpu = samples("cpu", "1");
  const Finished gpu = samples("cuda", "3");
  const Finished gpu_one_thread = samples("cuda", "1");
  INFO(cpu.out);
  CHECK(gpu.out == cpu.out);
  CHECK(gpu_one_thread.out == cpu.out);  // each row draws from its own generator, on any thread
  CHECK(gpu.err.find("4 sample(s) of up to 40 tokens, 4 side by side, drawn on 3 threads") != std::string::npos);
  CHECK(gpu_one_thread.err.find("4 side by side, drawn on 1 thread\n") != std::string::npos);
  // The CPU's side by side too (each row a one-row decoder's bits: tests/worker/cpu/test_kv_decoder.cpp).
  CHECK(cpu.err.find("4 side by side, drawn on 1 thread\n") != std::string::npos);
  // The stop text ended samples at different tokens, so rows finished while others went on.
  std::vector<size_t> lengths;
  for (size_t at = cpu.out.find("---\n"); at != std::string::npos; at = cpu.out.find("---\n", at + 4)) {
    const size_t next = cpu.out.find("\n--- sample", at);
    lengths.push_back((next == std::string::npos ? cpu.out.size() : next) - (at + 4));
  }
  REQUIRE(lengths.size() == 4);
  CHECK(*std::min_element(lengths.begin(), lengths.end()) < *std::max_element(lengths.begin(), lengths.end()));
}

TEST_CASE("eval --device cuda: the CPU's loss and multiple-choice answers, in fp32 and in bf16", "[gpu][commands]") {
  test::ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 32, 16, 256), 0.3f);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i * 7) + ": the quick brown fox\n";
  test::write_bytes(dir / "text.txt", text);
  test::write_bytes(dir / "mc.bin", test::eval_file(test::random_examples(24, 9, 256)));
  const auto scores = [&](const std::string& device, const std::string& precision) {
    const Finished run = run_command("eval", {ckpt.dir, "--data", dir / "text.txt", "--multiple-choice", dir / "mc.bin",
                                              "--device", device, "--precision", precision, "--json"});
    const nlohmann::json out = nlohmann::json::parse(run.out);
    CHECK(out.at("device") == device);
    CHECK(out.at("precision") == precision);
    return out;
  };
  for (const std::string precision : {"fp32", "bf16"}) {
    const nlohmann::json cpu = scores("cpu", precision);
    const nlohmann::json gpu = scores("cuda", precision);
    const double bound = precision == "fp32" ? 1e-5 : 1e-3;
    INFO(precision << ": loss " << gpu.at("loss") << " on the GPU, " << cpu.at("loss") << " on the CPU");
    CHECK(gpu.at("tokens") == cpu.at("tokens"));
    CHECK(gpu.at("loss").get<double>() == Approx(cpu.at("loss").get<double>()).epsilon(bound));
    if (precision == "fp32") CHECK(gpu.at("multiple_choice").at("predictions") == cpu.at("multiple_choice").at("predictions"));
  }
}

TEST_CASE("generate and eval --device cuda: a head size the GPU's attention does not take is bad input",
          "[gpu][commands]") {
  test::ScratchDir dir;
  const test::TestCheckpoint ckpt(dir / "run", "", test::model_spec(2, 2, 16, 8, 256), 0.3f);  // heads of 8
  test::write_bytes(dir / "text.txt", "some text to score");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"generate", ckpt.dir, "--device", "cuda"},
        std::vector<std::string>{"eval", ckpt.dir, "--data", dir / "text.txt", "--device", "cuda"}}) {
    std::vector<std::string> argv = args;
    argv.insert(argv.begin(), test::bin_path("xtrain-worker"));
    Process p(argv);
    const std::optional<Finished> done = p.wait(60);
    REQUIRE(done.has_value());
    INFO(done->err);
    CHECK(done->exit_code == 2);
    CHECK(test::error_line(done->err) == "error: " + ckpt.dir +
                                             ": model.n_embd / model.n_head: the CUDA attention supports head sizes "
                                             "16, 32, 64 and 128; this model has 16 / 2 = 8");
    CHECK(done->out.empty());
  }
}
