// `xtrain-worker eval` and `generate` on a GPU smaller than the model needs, in interpret mode with
// the emulated device's memory cut (XTRAIN_INTERP_DEVICE_MIB): what a GPU's free memory admits is
// decided before anything is allocated there (worker/model/memory_plan.hpp's fit_inference_batch).
//
// The model is byte-level, 2 layers of 32 at a context of 1024, so that each window adds more
// than a MiB to the plan (eval's logits alone are 1 MiB of fp32; generate keeps no logits, but
// its KV cache and one layer's activations are more): the device's memory, set in MiB, can admit
// exactly one window per forward.
//
// - eval scores 4 windows one per forward, says so on stderr, and gets the loss of the full
//   machine's 4 windows per forward within 1e-6 relative (the same sums per window; the products'
//   shapes differ with the batch, so their sums may run in another order);
// - generate's 2 samples go one at a time at a cut of their own (one row), say so, and print the
//   full machine's stdout, where they went side by side;
// - on 64 MiB (less than the headroom the check keeps free) its multiple-choice set, whose 4
//   completions of an example go in one forward, and generate: exit 2, one line naming --device,
//   what the model needs and the way out, nothing on stdout.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/bad_input.hpp"
#include "tests/launcher/harness.hpp"
#include "tests/worker/multiple_choice_file.hpp"
#include "tests/worker/test_files.hpp"
#include "tests/worker/worker_cli.hpp"
#include "worker/model/memory_plan.hpp"

using namespace xtrain;
using xtrain::test::Finished;
using xtrain::test::Process;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

Finished run_command(std::vector<std::string> args, const std::map<std::string, std::string>& env) {
  args.insert(args.begin(), test::bin_path("xtrain-worker"));
  const std::map<std::string, std::string> with = test::environment_with(env);
  Process p(args, &with);
  const std::optional<Finished> done = p.wait(300);
  REQUIRE(done.has_value());
  return *done;
}

// The emulated device's memory, in MiB, that admits `windows` of the model's windows per forward
// in fp32, by the plan the worker consults for `use` (eval's kInference, generate's kDecoding).
long long device_mib_for(const ModelSpec& m, int windows, ModelUse use) {
  for (long long mib = 1;; ++mib) {
    const size_t bytes = static_cast<size_t>(mib) << 20;
    try {
      if (fit_inference_batch(m, 4, 1, Precision::fp32, true, {"GPU", bytes, bytes}, use) >= windows) return mib;
    } catch (const BadInput&) {
    }
  }
}

}  // namespace

TEST_CASE("eval and generate on a GPU too small for the model: fewer windows per forward, or one error line",
          "[interp_training][memory]") {
  test::ScratchDir dir;
  const ModelSpec m = test::model_spec(2, 2, 32, 1024, 256);
  const test::TestCheckpoint ckpt(dir / "run", "", m, 0.3f);
  std::string text;
  for (int i = 0; 4 * 1024 + 1 > static_cast<int>(text.size()); ++i) text += "line " + std::to_string(i) + " of it\n";
  test::write_bytes(dir / "text.txt", text);
  test::write_bytes(dir / "mc.bin", test::eval_file(test::random_examples(2, 9, 256)));

  const long long one_window = device_mib_for(m, 1, ModelUse::kInference);
  REQUIRE(device_mib_for(m, 2, ModelUse::kInference) > one_window);  // the cut admits one window, not two
  const std::map<std::string, std::string> small = {{"XTRAIN_INTERP_DEVICE_MIB", std::to_string(one_window)}};
  const std::map<std::string, std::string> full;
  const std::vector<std::string> eval = {"eval", ckpt.dir, "--data", dir / "text.txt", "--device", "cuda",
                                         "--precision", "fp32", "--json"};

  const Finished narrow = run_command(eval, small);
  const Finished wide = run_command(eval, full);
  INFO(narrow.err << wide.err);
  REQUIRE(narrow.exit_code == 0);
  REQUIRE(wide.exit_code == 0);
  CHECK_THAT(narrow.err, Contains("1 window of 1024 tokens per forward: as many as the free memory of GPU 0 ("));
  CHECK(wide.err.find("per forward") == std::string::npos);
  const nlohmann::json a = nlohmann::json::parse(narrow.out), b = nlohmann::json::parse(wide.out);
  CHECK(a.at("tokens") == 4 * 1024);
  CHECK(a.at("tokens") == b.at("tokens"));
  CHECK(a.at("loss").get<double>() == Approx(b.at("loss").get<double>()).epsilon(1e-6));

  const std::vector<std::string> samples = {"generate", ckpt.dir, "--prompt", "Hi", "--max-new-tokens", "6",
                                            "--num-samples", "2", "--device", "cuda", "--precision", "fp32"};
  // Generate's model keeps no logits of every position: a cut of its own that admits one row.
  const long long one_row = device_mib_for(m, 1, ModelUse::kDecoding);
  REQUIRE(device_mib_for(m, 2, ModelUse::kDecoding) > one_row);
  const Finished one_by_one = run_command(samples, {{"XTRAIN_INTERP_DEVICE_MIB", std::to_string(one_row)}});
  const Finished side_by_side = run_command(samples, full);
  INFO(one_by_one.err << side_by_side.err);
  REQUIRE(one_by_one.exit_code == 0);
  REQUIRE(side_by_side.exit_code == 0);
  CHECK_THAT(one_by_one.err, Contains("1 sample side by side: as many as the free memory of GPU 0 ("));
  CHECK_THAT(side_by_side.err, Contains("2 sample(s) of up to 6 tokens, 2 side by side"));
  CHECK_THAT(one_by_one.out, Contains("--- sample 2 of 2 ---"));
  CHECK(one_by_one.out == side_by_side.out);

  std::vector<std::string> choices = eval;
  choices[2] = "--multiple-choice";
  choices[3] = dir / "mc.bin";
  const std::map<std::string, std::string> tiny = {{"XTRAIN_INTERP_DEVICE_MIB", "64"}};  // below the headroom
  const Finished refused = run_command(choices, tiny);
  INFO(refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(test::error_line(refused.err), StartsWith("error: --device: GPU 0 (") &&
                                                Contains("needs") && Contains("for 4 sequences of") &&
                                                Contains("run it on the CPU (--device cpu)"));
  CHECK(refused.out.empty());

  const Finished none = run_command({"generate", ckpt.dir, "--prompt", "Hi", "--device", "cuda", "--precision", "fp32"},
                                   tiny);
  INFO(none.err);
  CHECK(none.exit_code == 2);
  CHECK_THAT(test::error_line(none.err),
             StartsWith("error: --device: GPU 0 (") && Contains("has 64.0 MiB free of 64.0 MiB") &&
                 Contains("for 1 sequence of 1024 tokens at once (weights ") &&
                 Contains("run it on the CPU (--device cpu) or in bf16 (--precision bf16)"));
  CHECK(none.out.empty());
}
