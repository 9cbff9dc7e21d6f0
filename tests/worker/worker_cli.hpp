// What the tests of xtrain-worker's commands (export, generate) share: running the real binary
// (XTRAIN_BIN_DIR) with its exit code and output, the one error line a failure prints, and a
// checkpoint of a small model with random weights to feed them.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/tokenizer/gpt2_reference.hpp"  // shell_quote
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/test_files.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/train/checkpoint.hpp"

namespace xtrain::test {

struct CliRun {
  int code = -1;
  std::string out;     // stdout
  std::string output;  // stdout, then stderr
};

// xtrain-worker COMMAND ARGS..., its exit code and output; `env`: VAR=VALUE settings to run it with.
inline CliRun run_worker(const ScratchDir& dir, const std::string& command, const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {}) {
  std::string line = env.empty() ? "" : "env ";
  for (const auto& e : env) line += shell_quote(e) + " ";
  line += shell_quote(std::string(XTRAIN_BIN_DIR) + "/xtrain-worker") + " " + command;
  for (const auto& a : args) line += " " + shell_quote(a);
  const std::string out = dir / "cli.out", err = dir / "cli.err";
  const int status = std::system((line + " > " + shell_quote(out) + " 2> " + shell_quote(err)).c_str());
  CliRun run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(out), ""};
  run.output = run.out + read_bytes(err);
  return run;
}

// run_worker for the commands that run a model (generate, eval), on the CPU unless `args` name a
// --device: "auto" would take a GPU where there is one, and these tests hold the CPU to PyTorch
// (a GPU's are tests/cuda/test_cuda_commands.cpp's).
inline CliRun run_model_command(const ScratchDir& dir, const std::string& command, std::vector<std::string> args,
                                const std::vector<std::string>& env = {}) {
  if (std::find(args.begin(), args.end(), "--device") == args.end()) args.insert(args.begin(), {"--device", "cpu"});
  return run_worker(dir, command, args, env);
}

// The one line of `output` starting with "error: " (a note when there are none or several).
inline std::string error_line(const std::string& output) {
  std::istringstream in(output);
  std::string line, found;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("error: ", 0) == 0) found = line, ++count;
  }
  return count == 1 ? found : "(" + std::to_string(count) + " error lines)";
}

// A checkpoint of a small model with random weights, N(0, stddev) (zero wte padding rows, as
// training keeps them), written by the training code's save_checkpoint under run_dir.
struct TestCheckpoint {
  JobSpec spec;
  std::unique_ptr<ParamLayout> layout;
  std::vector<float> params;
  std::string dir;

  // `tokenizer`: the vocabulary the run named. The checkpoint carries what training gives it:
  // the vocabulary's files, or a byte-level model's tokenizer.json.
  explicit TestCheckpoint(const std::string& run_dir, const std::string& tokenizer = "",
                          const ModelSpec& model = model_spec(2, 2, 16, 8, 70), float stddev = 0.3f)
      : TestCheckpoint(run_dir, tokenizer,
                       tokenizer.empty() && model.vocab_size != kByteVocabulary
                           ? std::vector<NamedFile>{}
                           : read_tokenizer_files(tokenizer, model.seq_len),
                       model, stddev) {}

  // A checkpoint that carries `files` as its tokenizer's, whatever they hold.
  TestCheckpoint(const std::string& run_dir, const std::string& tokenizer, const std::vector<NamedFile>& files,
                 const ModelSpec& model, float stddev = 0.3f) {
    spec.tokenizer = tokenizer;
    spec.model = model;
    layout = std::make_unique<ParamLayout>(ModelDims::from(spec.model));
    const ModelDims& d = layout->dims();
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, stddev);
    params.resize(layout->total());
    for (auto& x : params) x = normal(rng);
    std::fill(params.begin() + static_cast<long>(layout->wte()) + static_cast<long>(d.V) * d.C,
              params.begin() + static_cast<long>(layout->wte()) + static_cast<long>(d.Vp) * d.C, 0.0f);
    const std::vector<float> moments(layout->total(), 0.5f);
    TrainState state;
    state.step = 3;
    dir = save_checkpoint(run_dir, spec, *layout, params.data(), moments.data(), moments.data(), state, files);
  }

  std::vector<float> import(const std::string& path) const {
    std::vector<float> out(layout->total(), std::nanf(""));
    import_model(read_model_file_info(path), *layout, out.data());
    return out;
  }
};

}  // namespace xtrain::test
