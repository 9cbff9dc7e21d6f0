// The whole model against PyTorch (tests/worker/torch_reference.py, run by /usr/bin/python3 with
// Debian's python3-torch) on the same weights and batches: logits, loss, every parameter's
// gradient, then 10 AdamW steps (warmup + cosine schedule, global-norm clipping) of losses.
// Data goes through files in a temporary directory: our flat float32 parameters, int32 tokens and
// a JSON config with the parameter layout; the script writes its results back.
//
// Tolerances (both sides float32, differing only in summation order and BLAS kernels; measured
// values on this machine in brackets, the bounds leave 50-100x for other BLAS builds):
//   logits       ||ours - torch|| / ||torch|| < 1e-5             [1.5e-7]
//   loss         |ours - torch| / torch < 1e-5                     [1.1e-7]
//   gradients    per tensor ||ours - torch|| / ||torch|| < 2e-5  [worst 3.9e-7]
//   10 steps     per step, loss and grad norm < 1e-5 relative     [1.2e-7, 1.3e-6]
// Adam's m/sqrt(v) amplifies rounding in near-zero gradient entries, which is why the trajectory
// gets the same bound as the single gradient rather than a tighter one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/train/adamw.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/lr_schedule.hpp"
#include "tests/worker/gpt_test_util.hpp"

namespace fs = std::filesystem;
using namespace xtrain;
using xtrain::test::model_spec;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "xtrain-torch-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

template <typename T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  REQUIRE(f.good());
}

std::vector<float> read_floats(const fs::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  REQUIRE(f.gcount() == static_cast<std::streamsize>(n * sizeof(float)));
  return v;
}

double rel_error(const float* a, const float* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

}  // namespace

TEST_CASE("GPT matches the PyTorch reference: logits, loss, gradients and 10 AdamW steps", "[model][torch]") {
  ModelSpec m = model_spec(2, 2, 32, 16, 65);  // padded to 128
  TrainSpec t;
  t.steps = 10;
  t.lr = 1e-2;
  t.min_lr = 1e-3;
  t.warmup_steps = 3;
  t.weight_decay = 0.1;
  t.grad_clip = 0.5;
  const int B = 3, S = t.steps;

  CpuBackend backend;
  GPT gpt(m, backend, B);
  const ParamLayout& layout = gpt.layout();
  const size_t P = layout.total();
  const ModelDims& d = gpt.dims();
  gpt.init_weights(1234);
  // Move biases and layernorm parameters off their 0/1 initial values so that every term of the
  // forward matters to the comparison.
  std::vector<float> params(P);
  backend.download(params.data(), gpt.params(), P);
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> jitter(-0.05f, 0.05f);
  for (const ParamTensor& p : layout.tensors()) {
    if (p.shape.size() == 1) {
      for (size_t i = 0; i < p.count; ++i) params[p.offset + i] += jitter(rng);
    }
  }
  gpt.set_params(params.data());

  const size_t BT = static_cast<size_t>(B) * d.T;
  std::vector<int32_t> tokens(S * BT), targets(S * BT);
  for (auto& x : tokens) x = static_cast<int32_t>(rng() % d.V);
  // A learnable rule (each target a function of its token), so the 10 steps must lower the loss.
  for (size_t i = 0; i < tokens.size(); ++i) targets[i] = (7 * tokens[i] + 3) % d.V;

  TempDir dir;
  nlohmann::json cfg;
  cfg["model"] = {{"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_embd", m.n_embd},
                  {"seq_len", m.seq_len}, {"vocab_size", m.vocab_size}};
  cfg["train"] = {{"steps", t.steps}, {"lr", t.lr}, {"min_lr", t.min_lr}, {"warmup_steps", t.warmup_steps},
                  {"weight_decay", t.weight_decay}, {"beta1", t.beta1}, {"beta2", t.beta2}, {"eps", t.eps},
                  {"grad_clip", t.grad_clip}};
  cfg["steps"] = S;
  cfg["batch"] = B;
  for (const ParamTensor& p : layout.tensors()) {
    cfg["layout"].push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
  }
  std::ofstream(dir.path() / "config.json") << cfg.dump(1);
  write_raw(dir.path() / "params.bin", params);
  write_raw(dir.path() / "tokens.bin", tokens);
  write_raw(dir.path() / "targets.bin", targets);

  const std::string script = std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/torch_reference.py";
  const std::string cmd = std::string(kPython) + " " + shell_quote(script) + " check " +
                          shell_quote(dir.path().string()) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    if (std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
      FAIL("PyTorch is missing: " << kPython << " cannot import torch. The test setup installs it: "
                                  << "scripts/install-deps.sh --test (Debian's python3-torch).");
    }
    FAIL("the PyTorch reference failed (its output is above): " << cmd);
  }
  nlohmann::json result;
  std::ifstream(dir.path() / "result.json") >> result;

  // Logits of the first batch (a forward without targets keeps them), padded columns included.
  gpt.forward(tokens.data(), nullptr, B);
  std::vector<float> logits(BT * d.Vp);
  backend.download(logits.data(), gpt.logits(), logits.size());
  const std::vector<float> torch_logits = read_floats(dir.path() / "logits.bin", logits.size());
  const double logit_err = rel_error(logits.data(), torch_logits.data(), logits.size());
  INFO("logits rel error " << logit_err);
  CHECK(logit_err < 1e-5);
  for (size_t r = 0; r < BT; ++r)
    for (int j = d.V; j < d.Vp; ++j) REQUIRE(logits[r * d.Vp + j] == 0.0f);

  // Loss and every parameter's gradient.
  gpt.zero_grads();
  gpt.forward(tokens.data(), targets.data(), B);
  const double loss = gpt.take_loss();
  gpt.backward(1.0f);
  const double torch_loss = result["loss"];
  INFO("loss " << loss << " torch " << torch_loss);
  CHECK(std::abs(loss - torch_loss) < 1e-5 * torch_loss);
  std::vector<float> grads(P);
  backend.download(grads.data(), gpt.grads(), P);
  const std::vector<float> torch_grads = read_floats(dir.path() / "grads.bin", P);
  double worst = 0.0;
  for (const ParamTensor& p : layout.tensors()) {
    const double err = rel_error(grads.data() + p.offset, torch_grads.data() + p.offset, p.count);
    worst = std::max(worst, err);
    INFO(p.name << " gradient rel error " << err);
    CHECK(err < 2e-5);
  }
  WARN("worst gradient rel error " << worst << ", logits " << logit_err << ", loss "
                                   << std::abs(loss - torch_loss) / torch_loss);

  // Ten AdamW steps from the same start, exactly as the trainer runs them.
  gpt.set_params(params.data());
  AdamW adamw(backend, layout, AdamWConfig::from(t));
  double worst_loss = 0.0, worst_norm = 0.0;
  for (int s = 0; s < S; ++s) {
    gpt.zero_grads();
    gpt.forward(tokens.data() + s * BT, targets.data() + s * BT, B);
    const double l = gpt.take_loss();
    gpt.backward(1.0f);
    const double norm = grad_norm(backend, gpt.grads(), P);
    adamw.step(gpt, static_cast<float>(learning_rate(t, s)), clip_scale(norm, t.grad_clip));
    const double tl = result["losses"][s], tn = result["norms"][s];
    worst_loss = std::max(worst_loss, std::abs(l - tl) / tl);
    worst_norm = std::max(worst_norm, std::abs(norm - tn) / tn);
    INFO("step " << s << " loss " << l << " torch " << tl << ", grad norm " << norm << " torch " << tn);
    CHECK(std::abs(l - tl) < 1e-5 * tl);
    CHECK(std::abs(norm - tn) < 1e-5 * tn);
  }
  WARN("10 steps: worst loss rel error " << worst_loss << ", worst grad-norm rel error " << worst_norm
                                         << "; losses " << result["losses"].front() << " -> "
                                         << result["losses"].back());
  // The schedule and clipping were exercised: some step was clipped, and the loss moved.
  CHECK(static_cast<double>(result["norms"][0]) > t.grad_clip);
  CHECK(static_cast<double>(result["losses"].back()) < static_cast<double>(result["losses"].front()));
}
