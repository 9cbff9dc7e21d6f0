// Checkpoints and resume: round trips, Hugging Face names and layouts, keep, interrupted writers,
// and a one-line error for every kind of damaged or mismatched checkpoint (which checkpoint a
// resume takes: test_checkpoint_resume.cpp; the safetensors format itself:
// tests/worker/formats/test_safetensors.cpp).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/worker/test_files.hpp"
#include "tests/worker/train/checkpoint_model.hpp"
#include "worker/train/checkpoint.hpp"
#include "worker/formats/crc32c.hpp"
#include "worker/formats/llmc_model.hpp"
#include "worker/formats/safetensors.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/piecewise_memory.hpp"

using namespace xtrain;
using namespace xtrain::test;
namespace fs = std::filesystem;

namespace {

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("a checkpoint round-trips parameters, moments and state bit for bit", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 10);
  CHECK(dir == run / "checkpoints/step-00000010");
  CHECK(names_in(dir) ==
        std::set<std::string>{"model.safetensors", "optimizer.safetensors", "config.json", "state.json",
                              "vocab.json", "merges.txt"});

  const float nan = std::nanf("");
  std::vector<float> params(model.layout.total(), nan), m(params), v(params);
  const TrainState got =
      load_checkpoint(dir, model.spec, model.layout, model.state.train_tokens, params.data(), m.data(), v.data());
  CHECK(std::memcmp(params.data(), model.params.data(), params.size() * 4) == 0);  // padding rows included
  CHECK(std::memcmp(m.data(), model.m.data(), m.size() * 4) == 0);
  CHECK(std::memcmp(v.data(), model.v.data(), v.size() * 4) == 0);
  CHECK(got.step == 10);
  CHECK(got.adam_t == 9);
  CHECK(got.sampler == model.state.sampler);
  CHECK(got.train_tokens == 12345);

  const auto state = nlohmann::json::parse(read_bytes(dir + "/state.json"));
  CHECK(state["format_version"] == kCheckpointFormatVersion);
  CHECK(state["model"]["n_embd"] == 8);
  CHECK(state["train"]["batch_size"] == model.spec.train.batch_size);

  SECTION("settings that may change on resume do not block it") {
    JobSpec changed = model.spec;
    changed.train.steps *= 2;
    changed.train.micro_batch_size = 1;
    changed.train.eval_every = 3;
    changed.train.lr *= 0.5;
    changed.train.warmup_steps += 5;
    changed.train.grad_clip = 0.5;
    changed.train.beta2 = 0.99;
    std::fill(m.begin(), m.end(), 0.0f);
    std::fill(v.begin(), v.end(), 0.0f);
    CHECK_NOTHROW(load_checkpoint(dir, changed, model.layout, 12345, params.data(), m.data(), v.data()));
    CHECK(std::memcmp(m.data(), model.m.data(), m.size() * 4) == 0);  // AdamW's moments carry over
    CHECK(std::memcmp(v.data(), model.v.data(), v.size() * 4) == 0);
  }
}

TEST_CASE("checkpoint_tensor_bytes is the size of a checkpoint's tensor files", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;  // its vocabulary padded, so the optimizer file carries the padding rows
  const std::string dir = model.save(run.path(), 3);
  const std::uint64_t tensors = std::filesystem::file_size(dir + "/model.safetensors") +
                                std::filesystem::file_size(dir + "/optimizer.safetensors");
  const std::uint64_t estimate = checkpoint_tensor_bytes(model.layout.dims());
  CHECK(estimate <= tensors);
  CHECK(tensors - estimate < 8192);  // the two safetensors headers
  CHECK(checkpoint_bytes(dir) - tensors < 16384);  // config, state and the tokenizer
}

TEST_CASE("a GPU's buffers are saved and loaded a piece at a time: the same files, the same bits", "[checkpoint]") {
  ScratchDir host_run, device_run;
  CheckpointModel model;
  const std::string host_dir = model.save(host_run.path(), 10);
  constexpr size_t kPiece = 100;
  test::PiecewiseMemory device(kPiece);
  const std::string dir =
      save_checkpoint(device_run.path(), model.spec, model.layout, model.params.data(), model.m.data(),
                      model.v.data(), model.state, model.tokenizer, device.access());
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "state.json"}) {
    INFO(file);
    CHECK(read_bytes(dir + "/" + file) == read_bytes(host_dir + "/" + file));
  }
  // Nothing larger than a piece crosses but the transposed weights, whole.
  std::set<size_t> whole;
  for (const auto& t : model.layout.tensors()) {
    if (t.hf_transposed) whole.insert(t.count);
  }
  const auto piece_or_whole = [&](size_t n) { return n <= kPiece || whole.count(n) == 1; };
  CHECK(std::all_of(device.views.begin(), device.views.end(), piece_or_whole));

  const float nan = std::nanf("");
  std::vector<float> params(model.layout.total(), nan), m(params), v(params);
  load_checkpoint(dir, model.spec, model.layout, model.state.train_tokens, params.data(), m.data(), v.data(),
                  device.access());
  CHECK(std::memcmp(params.data(), model.params.data(), params.size() * 4) == 0);  // padding rows included
  CHECK(std::memcmp(m.data(), model.m.data(), m.size() * 4) == 0);
  CHECK(std::memcmp(v.data(), model.v.data(), v.size() * 4) == 0);
  CHECK(std::all_of(device.stores.begin(), device.stores.end(), piece_or_whole));
  CHECK(*std::max_element(device.views.begin(), device.views.end()) > kPiece);  // the transposes were whole
}

TEST_CASE("model.safetensors has Hugging Face GPT-2's names, shapes and Conv1D layout", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 1);
  const int C = 8, V = 50, T = 6;

  // GPT2Model's state dict, less the attn.bias causal-mask buffers, with its shapes.
  std::map<std::string, std::vector<std::int64_t>> expected = {
      {"wte.weight", {V, C}}, {"wpe.weight", {T, C}}, {"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
  for (int l = 0; l < 2; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    expected[h + "ln_1.weight"] = {C};
    expected[h + "ln_1.bias"] = {C};
    expected[h + "attn.c_attn.weight"] = {C, 3 * C};
    expected[h + "attn.c_attn.bias"] = {3 * C};
    expected[h + "attn.c_proj.weight"] = {C, C};
    expected[h + "attn.c_proj.bias"] = {C};
    expected[h + "ln_2.weight"] = {C};
    expected[h + "ln_2.bias"] = {C};
    expected[h + "mlp.c_fc.weight"] = {C, 4 * C};
    expected[h + "mlp.c_fc.bias"] = {4 * C};
    expected[h + "mlp.c_proj.weight"] = {4 * C, C};
    expected[h + "mlp.c_proj.bias"] = {C};
  }
  SafetensorsFile file(dir + "/model.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  std::map<std::string, std::vector<std::int64_t>> got;
  for (const auto& e : file.tensors()) got[e.name] = e.shape;
  CHECK(got == expected);

  file.load();
  // Conv1D stores (in, out): HF[i][o] is our (out, in) weight at [o][i].
  std::vector<float> c_attn(static_cast<size_t>(C) * 3 * C);
  file.copy("h.1.attn.c_attn.weight", {C, 3 * C}, c_attn.data());
  const float* ours = model.params.data() + model.layout.layer(1).qkv_w;  // (3C, C)
  for (int i = 0; i < C; ++i) {
    for (int o = 0; o < 3 * C; ++o) REQUIRE(c_attn[static_cast<size_t>(i * 3 * C + o)] == ours[o * C + i]);
  }
  std::vector<float> c_proj(static_cast<size_t>(C) * C);  // square: only the values can tell
  file.copy("h.0.attn.c_proj.weight", {C, C}, c_proj.data());
  const float* proj = model.params.data() + model.layout.layer(0).attn_proj_w;
  CHECK(c_proj[1] == proj[C]);
  CHECK(c_proj[static_cast<size_t>(C)] == proj[1]);
  std::vector<float> wte(static_cast<size_t>(V) * C);
  file.copy("wte.weight", {V, C}, wte.data());
  CHECK(std::memcmp(wte.data(), model.params.data() + model.layout.wte(), wte.size() * 4) == 0);

  const auto config = nlohmann::json::parse(read_bytes(dir + "/config.json"));
  CHECK(config["model_type"] == "gpt2");
  CHECK(config["n_embd"] == C);
  CHECK(config["n_positions"] == T);
  CHECK(config["vocab_size"] == V);
  CHECK(config["activation_function"] == "gelu_new");
}

TEST_CASE("keep retains the newest complete checkpoints and saving clears partial ones", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  fs::create_directories(run / "checkpoints/step-00000099.tmp-4242");
  write_bytes(run / "checkpoints/step-00000099.tmp-4242/model.safetensors", "half");
  for (int step = 1; step <= 5; ++step) model.save(run.path(), step);
  CHECK(names_in(run / "checkpoints") == std::set<std::string>{"step-00000004", "step-00000005"});

  SECTION("saving the same step again replaces it whole") {
    model.params[0] = 123.0f;
    model.save(run.path(), 5);
    CHECK(names_in(run / "checkpoints") == std::set<std::string>{"step-00000004", "step-00000005"});
    std::vector<float> p(model.layout.total()), m(p), v(p);
    load_checkpoint(run / "checkpoints/step-00000005", model.spec, model.layout, 12345, p.data(), m.data(), v.data());
    CHECK(p[0] == 123.0f);
  }
}

TEST_CASE("state.json records every file's size and CRC-32C, the tokenizer's too", "[checkpoint]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 1);
  CHECK(read_bytes(dir + "/vocab.json") == model.tokenizer[0].content);
  CHECK(read_bytes(dir + "/merges.txt") == model.tokenizer[1].content);
  const nlohmann::json files = nlohmann::json::parse(read_bytes(dir + "/state.json")).at("files");
  CHECK(files.size() == 5);
  for (const char* name : {"model.safetensors", "optimizer.safetensors", "config.json", "vocab.json", "merges.txt"}) {
    INFO(name);
    const std::string bytes = read_bytes(dir + "/" + name);
    CHECK(files.at(name).at("bytes") == bytes.size());
    // The table-driven CRC, independent of the hardware instruction the writer used.
    CHECK(files.at(name).at("crc32c") == crc32c_hex(crc32c_portable(bytes.data(), bytes.size())));
  }
}

TEST_CASE("state.json checksums its own content: every flipped bit that changes it is refused", "[checkpoint][errors]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 6);
  const std::string path = dir + "/state.json";
  const std::string good = read_bytes(path);
  // The documented rule, computed here with the table-driven CRC: the compact serialisation of
  // the object without its "crc32c" key.
  nlohmann::json content = nlohmann::json::parse(good);
  const std::string recorded = content.at("crc32c");
  content.erase("crc32c");
  CHECK(recorded == crc32c_hex(crc32c_portable(content.dump().data(), content.dump().size())));
  REQUIRE_NOTHROW(check_checkpoint_fits(dir, model.spec, model.state.train_tokens));

  // One bit of every byte, its position turning with the byte, in an eighth of the time of all
  // 8 bits (which, run once, let only the two flips below pass). A flip may pass only where it
  // changes nothing that is read: an exponent's "e" becoming "E".
  size_t refused = 0, harmless = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    const int bit = static_cast<int>(at % 8);
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
    write_bytes(path, bad);
    try {
      check_checkpoint_fits(dir, model.spec, model.state.train_tokens);
      INFO("byte " << at << " bit " << bit << " passed");
      CHECK(nlohmann::json::parse(bad) == nlohmann::json::parse(good));
      ++harmless;
    } catch (const CheckpointError&) {
      ++refused;
    }
  }
  CHECK(refused + harmless == good.size());
  CHECK(harmless <= 2);  // the "e" of eps 1e-08 and of min_lr 3e-05
}

TEST_CASE("every train key is either part of the run or may change on resume", "[checkpoint]") {
  const nlohmann::json train = to_json(JobSpec{})["train"];
  for (const auto& [key, value] : train.items()) {
    INFO("train." << key);
    CHECK(train_key_on_resume(key).has_value());
  }
  CHECK(train_key_on_resume("seed") == ResumeRule::kKept);
  CHECK(train_key_on_resume("batch_size") == ResumeRule::kKept);
  CHECK(train_key_on_resume("lr") == ResumeRule::kSchedule);
  CHECK(train_key_on_resume("steps") == ResumeRule::kSchedule);
  CHECK(train_key_on_resume("grad_clip") == ResumeRule::kOptimizer);
  CHECK(train_key_on_resume("log_every") == ResumeRule::kComputing);
  CHECK_FALSE(train_key_on_resume("no_such_key"));
}

TEST_CASE("the launcher's check of the resume checkpoint compares the spec and the training split",
          "[checkpoint][errors]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 4);
  JobSpec spec = model.spec;
  std::uint64_t tokens = model.state.train_tokens;
  CHECK_NOTHROW(check_checkpoint_fits(dir, spec, tokens));
  std::string expected;
  SECTION("a corrupt state.json") {
    write_bytes(dir + "/state.json", "{\"format\": \"xtrain-chec");
    expected = "checkpoint " + dir + ": state.json: not a JSON object (truncated or corrupt)";
  }
  SECTION("another model shape") {
    spec.model.n_embd = 16;
    expected = "checkpoint " + dir + ": model.n_embd is 8 but the spec says 16";
  }
  SECTION("another training split") {
    tokens = 999;
    expected = "checkpoint " + dir + ": it was trained on 12345 training tokens but data.train now gives 999; a "
               "resumed run must sample from the same data";
  }
  CHECK(error_message<CheckpointError>([&] { check_checkpoint_fits(dir, spec, tokens); }) == expected);
}

TEST_CASE("a mismatched or damaged checkpoint is refused with one line and loads nothing", "[checkpoint][errors]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 10);
  JobSpec spec = model.spec;
  std::uint64_t tokens = model.state.train_tokens;

  const std::vector<float> sentinel(model.layout.total(), -7.0f);
  std::vector<float> params = sentinel, m = sentinel, v = sentinel;
  auto load = [&] {
    const ParamLayout layout(ModelDims::from(spec.model));
    params.resize(layout.total(), -7.0f);
    m.resize(layout.total(), -7.0f);
    v.resize(layout.total(), -7.0f);
    load_checkpoint(dir, spec, layout, tokens, params.data(), m.data(), v.data());
  };
  std::string expected;

  SECTION("another model width") {
    spec.model.n_embd = 16;
    expected = "checkpoint " + dir + ": model.n_embd is 8 but the spec says 16";
  }
  SECTION("another sequence length") {
    spec.model.seq_len = 12;
    expected = "checkpoint " + dir + ": model.seq_len is 6 but the spec says 12";
  }
  SECTION("another batch size") {
    spec.train.batch_size = 3;
    expected = "checkpoint " + dir + ": train.batch_size is " + std::to_string(model.spec.train.batch_size) +
               " but the spec says 3; a resumed run must keep it to read the same batches";
  }
  SECTION("other training data") {
    tokens = 999;
    expected = "checkpoint " + dir +
               ": it was trained on 12345 training tokens but data.train now gives 999; a resumed run must sample "
               "from the same data";
  }
  SECTION("a missing tensor") {
    SafetensorsFile file(dir + "/model.safetensors");
    file.load();
    std::vector<std::vector<float>> data;
    std::vector<SafetensorsTensor> kept;
    for (const auto& e : file.tensors()) {
      if (e.name == "h.1.mlp.c_fc.bias") continue;
      data.emplace_back((e.end - e.begin) / 4);
      file.copy(e.name, e.shape, data.back().data());
    }
    size_t i = 0;
    for (const auto& e : file.tensors()) {
      if (e.name != "h.1.mlp.c_fc.bias") kept.push_back({e.name, e.shape, data[i++].data()});
    }
    write_safetensors(dir + "/model.safetensors", kept, {{"format", "pt"}});
    expected = "checkpoint " + dir + ": model.safetensors: tensor h.1.mlp.c_fc.bias is missing";
  }
  SECTION("a truncated optimizer file") {
    truncate_file(dir + "/optimizer.safetensors", 1);
    expected = "checkpoint " + dir + ": optimizer.safetensors: truncated: tensor ";  // then which one
  }
  SECTION("a corrupt byte in the weights") {
    std::string bytes = read_bytes(dir + "/model.safetensors");
    bytes[bytes.size() - 5] ^= 0x01;
    write_bytes(dir + "/model.safetensors", bytes);
    expected = "checkpoint " + dir + ": model.safetensors: corrupt: the data's CRC-32C is ";
  }
  SECTION("a damaged state.json") {
    write_bytes(dir + "/state.json", "{\"format\": \"xtrain-checkpoint\", \"format_ver");
    expected = "checkpoint " + dir + ": state.json: not a JSON object (truncated or corrupt)";
  }
  SECTION("a future format") {
    auto state = nlohmann::json::parse(read_bytes(dir + "/state.json"));
    state["format_version"] = 99;
    write_bytes(dir + "/state.json", state.dump());
    expected = "checkpoint " + dir + ": state.json: format_version is 99, expected 2 (or 1)";
  }
  const std::string error = error_message<CheckpointError>(load);
  CAPTURE(error);
  CHECK(error.rfind(expected, 0) == 0);
  CHECK(error.find('\n') == std::string::npos);
  CHECK(std::all_of(params.begin(), params.end(), [](float x) { return x == -7.0f; }));
  CHECK(std::all_of(m.begin(), m.end(), [](float x) { return x == -7.0f; }));
  CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == -7.0f; }));
}

// The checkpoint and sampler together, with a stand-in for the model: every step draws a batch,
// derives a "gradient" from its tokens and the parameters, and takes an AdamW-like step. A run
// that saves at step 10, is "killed" (everything dropped) and resumes must end bit for bit where
// the straight run does.
TEST_CASE("a run resumed from a checkpoint continues bit for bit", "[checkpoint][resume]") {
  ScratchDir run;
  const std::string corpus = run / "corpus.txt";
  std::string text;
  for (int i = 0; i < 3000; ++i) text += static_cast<char>((i * i + 7 * i) % 50);  // within the spec's vocabulary of 50
  write_bytes(corpus, text);
  JobSpec spec = small_spec();
  spec.data.train = corpus;
  spec.train.batch_size = 4;
  spec.train.micro_batch_size = 2;
  const ParamLayout layout(ModelDims::from(spec.model));
  const int T = spec.model.seq_len;

  struct Trainer {
    DataSplit data;
    BatchSampler sampler;
    std::vector<float> params, m, v;
    std::int64_t step = 0, adam_t = 0;

    void train_step(int global, int B) {
      const int T = sampler.seq_len();
      const auto starts = sampler.draw(global);
      std::vector<std::int32_t> in(static_cast<size_t>(B * T)), tg(in.size());
      std::vector<float> grad(params.size(), 0.0f);
      for (int micro = 0; micro < global / B; ++micro) {
        gather_micro_batch(data.train, T, starts, 0, 1, micro, B, in.data(), tg.data());
        for (size_t k = 0; k < in.size(); ++k) {
          grad[static_cast<size_t>(in[k] * 7 + tg[k]) % grad.size()] += 0.01f * static_cast<float>(tg[k]);
        }
      }
      ++adam_t;
      for (size_t k = 0; k < params.size(); ++k) {
        const float g = grad[k] + 0.001f * params[k];
        m[k] = 0.9f * m[k] + 0.1f * g;
        v[k] = 0.95f * v[k] + 0.05f * g * g;
        params[k] -= 0.01f * m[k] / (std::sqrt(v[k]) + 1e-8f);
      }
      ++step;
    }
  };
  auto fresh = [&] {
    DataSplit data = load_data(spec.data, spec.model, false);
    BatchSampler sampler(data.train, T, static_cast<std::uint64_t>(spec.train.seed));
    return Trainer{data, sampler, random_floats(layout.total(), 11), std::vector<float>(layout.total(), 0.0f),
                   std::vector<float>(layout.total(), 0.0f)};
  };

  Trainer straight = fresh();
  for (int i = 0; i < 20; ++i) straight.train_step(spec.train.batch_size, spec.train.micro_batch_size);

  {
    Trainer first = fresh();
    for (int i = 0; i < 10; ++i) first.train_step(spec.train.batch_size, spec.train.micro_batch_size);
    TrainState state{first.step, first.adam_t, first.sampler.state(), first.data.train.count};
    save_checkpoint(run.path(), spec, layout, first.params.data(), first.m.data(), first.v.data(), state, {});
  }
  Trainer resumed = fresh();  // a new process: initial weights, seed-fresh sampler
  const auto dir = find_resume_checkpoint(run.path(), spec.checkpoint.resume);
  REQUIRE(dir);
  const TrainState state = load_checkpoint(*dir, spec, layout, resumed.data.train.count, resumed.params.data(),
                                           resumed.m.data(), resumed.v.data());
  resumed.step = state.step;
  resumed.adam_t = state.adam_t;
  resumed.sampler.set_state(state.sampler);
  while (resumed.step < 20) resumed.train_step(spec.train.batch_size, spec.train.micro_batch_size);

  CHECK(std::memcmp(resumed.params.data(), straight.params.data(), straight.params.size() * 4) == 0);
  CHECK(std::memcmp(resumed.m.data(), straight.m.data(), straight.m.size() * 4) == 0);
  CHECK(std::memcmp(resumed.v.data(), straight.v.data(), straight.v.size() * 4) == 0);
  CHECK(resumed.sampler.state() == straight.sampler.state());
}

// An independent reader (Python, numpy and torch) loads model.safetensors into a module with
// Hugging Face GPT-2's parameter names and Conv1D shapes, strictly, and checks each tensor
// against the llm.c export of the same weights, transposes included.
TEST_CASE("Python loads model.safetensors as Hugging Face GPT-2 weights", "[checkpoint][python]") {
  ScratchDir run;
  CheckpointModel model;
  const std::string dir = model.save(run.path(), 3);
  export_llmc_model(run / "model.bin", model.layout, model.params.data());
  const std::string script = std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/check_safetensors.py";
  const std::string command = "/usr/bin/python3 " + script + " " + dir + " " + run / "model.bin";
  INFO(command);
  CHECK(std::system(command.c_str()) == 0);
}
