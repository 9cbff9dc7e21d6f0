// `xtrain-worker export` (the real binary, XTRAIN_BIN_DIR): a checkpoint exported as Hugging
// Face directories and as llm.c model files imports back bit for bit (bf16: to the rounded values),
// the Hugging Face export gives PyTorch's logits and its BF16 form PyTorch's rounding, and bad
// input or an unwritable OUT get one error line, the documented exit code and nothing
// half-written.
//
// PyTorch tolerance: tests/worker/torch_reference.py computes the same float32 forward with other
// summation orders (see test_gpt_vs_torch.cpp): logits agree to 1e-5 relative (measured ~1e-7).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/worker/test_files.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/tokenizer/hf_tokenizer_json.hpp"
#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "worker/train/checkpoint.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/model/gpt.hpp"
#include "worker/formats/model_io.hpp"
#include "tests/worker/gpt_test_util.hpp"
#include "tests/worker/worker_cli.hpp"

using namespace xtrain;
using xtrain::test::gpt2_openai_dir;
using xtrain::test::read_bytes;
using xtrain::test::shell_quote;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;
namespace fs = std::filesystem;

namespace {

using Run = xtrain::test::CliRun;
using Checkpoint = xtrain::test::TestCheckpoint;
using xtrain::test::error_line;

Run export_cli(const ScratchDir& dir, const std::vector<std::string>& args) {
  return xtrain::test::run_worker(dir, "export", args);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("export hf and llmc: each imports back bit for bit", "[export]") {
  ScratchDir dir;
  const Checkpoint ckpt(dir / "run");

  const Run hf = export_cli(dir, {ckpt.dir, "--format", "hf", dir / "hf"});
  INFO(hf.output);
  REQUIRE(hf.code == 0);
  CHECK(fs::exists(dir / "hf/config.json"));
  CHECK_FALSE(fs::exists(dir / "hf/vocab.json"));  // the run named no tokenizer
  CHECK(bitwise_equal(ckpt.import(dir / "hf"), ckpt.params));
  const auto config = nlohmann::json::parse(read_bytes(dir / "hf/config.json"));
  CHECK(config["n_positions"] == 8);
  CHECK(config["vocab_size"] == 70);

  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", dir / "m.bin"}).code == 0);
  CHECK(bitwise_equal(ckpt.import(dir / "m.bin"), ckpt.params));

  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", "--dtype", "bf16", dir / "m16.bin"}).code == 0);
  const std::vector<float> bf16 = ckpt.import(dir / "m16.bin");
  for (size_t i = 0; i < bf16.size(); ++i) REQUIRE(xtrain::test::is_nearest_bf16(bf16[i], ckpt.params[i]));

  // The Hugging Face directory in BF16: half the bytes, each weight its nearest bfloat16, and
  // config.json says so (transformers loads the model in bfloat16).
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", "--dtype", "bf16", dir / "hf16"}).code == 0);
  const std::vector<float> hf16 = ckpt.import(dir / "hf16");
  for (size_t i = 0; i < hf16.size(); ++i) REQUIRE(xtrain::test::is_nearest_bf16(hf16[i], ckpt.params[i]));
  CHECK(nlohmann::json::parse(read_bytes(dir / "hf16/config.json"))["torch_dtype"] == "bfloat16");
  CHECK(fs::file_size(dir / "hf16/model.safetensors") < fs::file_size(dir / "hf/model.safetensors") / 2 + 4096);

  // Exports of exports: the Hugging Face directory and the llm.c file are sources too.
  REQUIRE(export_cli(dir, {dir / "hf", "--format", "llmc", dir / "m2.bin"}).code == 0);
  CHECK(read_bytes(dir / "m2.bin") == read_bytes(dir / "m.bin"));
  REQUIRE(export_cli(dir, {dir / "m.bin", "--format", "hf", dir / "hf2"}).code == 0);
  CHECK(read_bytes(dir / "hf2/model.safetensors") == read_bytes(dir / "hf/model.safetensors"));
}

TEST_CASE("the Hugging Face export gives PyTorch's logits", "[export][torch]") {
  ScratchDir dir;
  const Checkpoint ckpt(dir / "run");
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);

  const int B = 3, T = ckpt.spec.model.seq_len;
  std::vector<std::int32_t> tokens(static_cast<size_t>(B) * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 29 + 5) % 70);
  write_bytes(dir / "hf/tokens.bin", std::string_view(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4));
  const std::string command = "/usr/bin/python3 " + shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/torch_reference.py") +
                              " hf-logits " + shell_quote(dir / "hf");
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);

  CpuBackend backend;
  GPT gpt(ckpt.spec.model, backend, B);
  backend.upload(gpt.params(), ckpt.params.data(), ckpt.params.size());
  gpt.forward(tokens.data(), nullptr, B);
  std::vector<float> ours(tokens.size() * static_cast<size_t>(gpt.dims().Vp));
  backend.download(ours.data(), gpt.logits(), ours.size());
  const std::string theirs_bytes = read_bytes(dir / "hf/logits.bin");
  REQUIRE(theirs_bytes.size() == ours.size() * 4);
  std::vector<float> theirs(ours.size());
  std::memcpy(theirs.data(), theirs_bytes.data(), theirs_bytes.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    num += (static_cast<double>(ours[i]) - theirs[i]) * (static_cast<double>(ours[i]) - theirs[i]);
    den += static_cast<double>(theirs[i]) * theirs[i];
  }
  const double rel = std::sqrt(num / den);
  WARN("logits of the Hugging Face export vs PyTorch: rel error " << rel);
  CHECK(rel < 1e-5);
}

TEST_CASE("the BF16 Hugging Face export is PyTorch's rounding of the F32 one, bit for bit", "[export][torch]") {
  ScratchDir dir;
  const Checkpoint ckpt(dir / "run", "", test::model_spec(2, 2, 16, 8, 256), 3.0f);  // wide values: many roundings
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", "--dtype", "bf16", dir / "hf16"}).code == 0);
  const std::string command = "/usr/bin/python3 " +
                              shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/tests/worker/torch_reference.py") +
                              " hf-bf16 " + shell_quote(dir / "hf") + " " + shell_quote(dir / "hf16");
  INFO(command);
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("export: bad input is exit 2, an unwritable OUT exit 1, one error line, nothing half-written",
          "[export][errors]") {
  ScratchDir dir;
  const Checkpoint ckpt(dir / "run");
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", dir / "m.bin"}).code == 0);
  const std::string before = read_bytes(dir / "m.bin");

  struct Case {
    std::vector<std::string> args;
    int code;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{ckpt.dir, "--format", "llmc", dir / "m.bin"}, 2, "error: " + dir / "m.bin" + ": exists (give --force to replace it)"},
      {{dir / "nope", "--format", "hf", dir / "out"}, 2, "error: " + dir / "nope" + ": No such file or directory"},
      {{ckpt.dir, "--format", "onnx", dir / "out"}, 2, "error: --format: expected \"hf\" or \"llmc\", got \"onnx\""},
      {{ckpt.dir, "--format", "hf"}, 2, "error: command line: expected SOURCE and OUT, got 1 paths (see export --help)"},
      {{ckpt.dir, "--format=llmc", "--dtpye", "bf16", dir / "out"}, 2,
       "error: command line: unknown option \"--dtpye\" (did you mean \"--dtype\"?) (see export --help)"},
      {{ckpt.dir, "--format", "hf", "--tokenizer", dir / "run", dir / "out"}, 2,
       "error: --tokenizer: " + dir / "run" +
           ": holds neither encoder.json + vocab.bpe (OpenAI's GPT-2 vocabulary) nor vocab.json + merges.txt "
           "or tokenizer.json (Hugging Face's)"},
      {{ckpt.dir, "--format", "hf", "--tokenizer", gpt2_openai_dir(), dir / "out"}, 2,
       "error: --tokenizer: " + gpt2_openai_dir() + "/encoder.json + " + gpt2_openai_dir() +
           "/vocab.bpe has 50257 tokens but the model's vocabulary is 70"},
      {{ckpt.dir, "--format", "llmc", dir / "m.bin/m2.bin"}, 1,
       "error: " + dir / "m.bin" + ": cannot create the directory: Not a directory"},
      {{ckpt.dir, "--format", "hf", dir / "run/checkpoints/step-00000003/model.safetensors/hf"}, 1,
       "error: " + dir / "run/checkpoints/step-00000003/model.safetensors" + ": cannot create the directory: "},
  };
  for (const Case& c : cases) {
    const Run run = export_cli(dir, c.args);
    INFO(run.output);
    CHECK(run.code == c.code);
    CHECK(error_line(run.output).rfind(c.error, 0) == 0);
  }
  CHECK(read_bytes(dir / "m.bin") == before);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"cli.err", "cli.out", "m.bin", "run"});  // no OUT, no temporary

  SECTION("a tokenizer the checkpoint carries that cannot be loaded") {
    // The run named dir/vocab, since gone.
    const Checkpoint broken(dir / "run2", dir / "vocab", {{"vocab.json", "[1, 2]"}, {"merges.txt", "#version: 0.2\n"}},
                            test::model_spec(2, 2, 16, 8, 70));
    const Run run = export_cli(dir, {broken.dir, "--format", "hf", dir / "out"});
    CHECK(run.code == 2);
    CHECK(error_line(run.output) == "error: " + broken.dir + ": its tokenizer: " + broken.dir +
                                        "/vocab.json: expected a JSON object mapping each token to its id, got array "
                                        "(name the vocabulary with --tokenizer PATH)");
    // The llm.c export ships the tokenizer too (gpt2_tokenizer.bin), so it needs it as much.
    CHECK(export_cli(dir, {broken.dir, "--format", "llmc", dir / "out.bin"}).code == 2);
    CHECK_FALSE(fs::exists(dir / "out.bin"));
  }
  SECTION("OUT's directories are created") {
    REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", dir / "exports/new/hf"}).code == 0);
    REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", dir / "exports/other/m.bin"}).code == 0);
    CHECK(ckpt.import(dir / "exports/new/hf") == ckpt.params);
  }
  SECTION("--force replaces an existing OUT") {
    REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", "--dtype", "bf16", "--force", dir / "m.bin"}).code == 0);
    CHECK(read_bytes(dir / "m.bin").size() == 1024 + 2 * ckpt.layout->total());
    REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);
    REQUIRE(export_cli(dir, {dir / "m.bin", "--format", "hf", "--force", dir / "hf"}).code == 0);
    CHECK(ckpt.import(dir / "hf") == ckpt.import(dir / "m.bin"));
  }
}

TEST_CASE("every kind of bad model file is exit 2 and one error line naming it", "[export][errors]") {
  ScratchDir dir;
  const Checkpoint ckpt(dir / "run");
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", dir / "hf"}).code == 0);
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", dir / "m.bin"}).code == 0);
  const std::string weights = dir / "hf/model.safetensors", config = dir / "hf/config.json";
  const std::string safetensors = read_bytes(weights), llmc = read_bytes(dir / "m.bin");
  // An edit of the safetensors header (its first occurrence of `from`), with the length prefix
  // rewritten; the data section stays as it was.
  auto edit_header = [&](const std::string& from, const std::string& to) {
    std::uint64_t n = 0;
    std::memcpy(&n, safetensors.data(), 8);
    std::string header = safetensors.substr(8, n);
    const std::string data = safetensors.substr(8 + n);
    const size_t at = header.find(from);
    REQUIRE(at != std::string::npos);
    header.replace(at, from.size(), to);
    n = header.size();
    write_bytes(weights, std::string(reinterpret_cast<const char*>(&n), 8) + header + data);
  };
  auto llmc_int = [&](size_t index, std::int32_t value) {
    std::string bytes = llmc;
    std::memcpy(bytes.data() + 4 * index, &value, 4);
    write_bytes(dir / "m.bin", bytes);
  };
  std::string source = dir / "hf", expected;
  SECTION("safetensors: a wrong shape") {
    edit_header("\"shape\":[16]}", "\"shape\":[2,8]}");
    expected = weights + ": tensor ";
  }
  SECTION("safetensors: an integer dtype") {
    edit_header("\"dtype\":\"F32\"", "\"dtype\":\"I32\"");
    expected = weights + ": tensor ";
  }
  SECTION("safetensors: a missing tensor") {
    edit_header("\"ln_f.bias\"", "\"ln_f.biaz\"");
    expected = weights + ": tensor ln_f.bias is missing";
  }
  SECTION("safetensors: truncated") {
    write_bytes(weights, safetensors.substr(0, safetensors.size() - 4));
    expected = weights + ": truncated: tensor ";
  }
  SECTION("safetensors: a header that lies about the offsets") {
    edit_header("\"data_offsets\":[0,", "\"data_offsets\":[4,");
    expected = weights + ": tensor ";
  }
  SECTION("config.json missing") {
    fs::remove(config);
    expected = dir / "hf" + ": not a model: expected a run directory (with checkpoints/), a checkpoint or a "
                            "Hugging Face GPT-2 directory (config.json + model.safetensors), or an llm.c model file; "
                            "this directory has neither checkpoints/ nor config.json";
  }
  SECTION("config.json with n_embd not a multiple of n_head") {
    auto json = nlohmann::json::parse(read_bytes(config));
    json["n_head"] = 3;
    write_bytes(config, json.dump());
    expected = config + ": n_embd 16 is not a multiple of n_head 3";
  }
  SECTION("llm.c: a wrong magic") {
    source = dir / "m.bin";
    llmc_int(0, 20240520);
    expected = source + ": not a model: expected a run directory (with checkpoints/), a checkpoint or a Hugging "
                        "Face GPT-2 directory (config.json + model.safetensors), or an llm.c model file; this file "
                        "begins with 20240520, not llm.c's magic 20240326";
  }
  SECTION("llm.c: a wrong version") {
    source = dir / "m.bin";
    llmc_int(1, 2);
    expected = source + ": llm.c model file version is 2, expected 3 (fp32) or 5 (bf16)";
  }
  SECTION("llm.c: truncated") {
    source = dir / "m.bin";
    write_bytes(source, llmc.substr(0, llmc.size() / 2));
    expected = source + ": truncated: size is ";
  }
  const Run run = export_cli(dir, {source, "--format", "llmc", dir / "out.bin"});
  INFO(run.output);
  CHECK(run.code == 2);
  CHECK(error_line(run.output).rfind("error: " + expected, 0) == 0);
  CHECK_FALSE(fs::exists(dir / "out.bin"));
}

TEST_CASE("export: a run directory is its newest checkpoint, a Hugging Face export loads with its tokenizer "
          "and generation configs, and says when it has no tokenizer", "[export]") {
  ScratchDir dir;
  const Checkpoint ckpt(dir / "run", gpt2_openai_dir(), test::model_spec(1, 1, 8, 8, 50257));
  const Run run = export_cli(dir, {dir / "run", "--format", "hf", dir / "hf"});
  INFO(run.output);
  REQUIRE(run.code == 0);
  CHECK(run.output.find("warn") == std::string::npos);
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "hf", dir / "hf-ckpt"}).code == 0);
  CHECK(read_bytes(dir / "hf/model.safetensors") == read_bytes(dir / "hf-ckpt/model.safetensors"));

  const auto tokenizer = nlohmann::json::parse(read_bytes(dir / "hf/tokenizer_config.json"));
  CHECK(tokenizer.at("tokenizer_class") == "GPT2Tokenizer");
  CHECK(tokenizer.at("eos_token") == "<|endoftext|>");
  CHECK(tokenizer.at("bos_token") == "<|endoftext|>");
  CHECK(tokenizer.at("model_max_length") == 8);
  CHECK(tokenizer.at("clean_up_tokenization_spaces") == false);  // decoding gives back the text
  // tokenizer.json: the same vocabulary, for Hugging Face's fast tokenizers (test_gpt2_vs_tiktoken
  // loads it in Tokenizers.js).
  CHECK(read_bytes(dir / "hf/tokenizer.json") == gpt2_tokenizer_json(list_gpt2_vocabulary(gpt2_openai_dir())));
  const auto generation = nlohmann::json::parse(read_bytes(dir / "hf/generation_config.json"));
  CHECK(generation.at("bos_token_id") == 50256);
  CHECK(generation.at("eos_token_id") == 50256);
  CHECK(read_bytes(dir / "hf/vocab.json") == read_bytes(gpt2_openai_dir() + "/encoder.json"));

  // The llm.c export writes llm.c's tokenizer file beside it: the header, then each token's bytes.
  REQUIRE(export_cli(dir, {dir / "run", "--format", "llmc", dir / "llmc/m.bin"}).code == 0);
  const std::string table = read_bytes(dir / "llmc/gpt2_tokenizer.bin");
  REQUIRE(table.size() > 1024);
  std::uint32_t header[4];
  std::memcpy(header, table.data(), sizeof header);
  CHECK(header[0] == 20240328);
  CHECK(header[1] == 2);
  CHECK(header[2] == 50257);
  CHECK(header[3] == 50256);
  const Gpt2Tokenizer gpt2 = Gpt2Tokenizer::load(gpt2_openai_dir());
  size_t at = 1024;
  bool same = true;
  for (std::int32_t id = 0; id < 50257 && same; ++id) {
    const auto length = static_cast<unsigned char>(table.at(at));
    same = table.substr(at + 1, length) == gpt2.decode_token(id);
    at += 1 + length;
  }
  CHECK(same);
  CHECK(at == table.size());
  // A second model exported beside it shares the tokenizer file; one holding another tokenizer
  // is replaced only with --force.
  const Run beside = export_cli(dir, {dir / "run", "--format", "llmc", "--dtype", "bf16", dir / "llmc/m-bf16.bin"});
  INFO(beside.output);
  CHECK(beside.code == 0);
  CHECK(read_bytes(dir / "llmc/gpt2_tokenizer.bin") == table);
  std::string other = table;
  other[1024 + 1] ^= 0x01;  // token 0's byte
  write_bytes(dir / "llmc/gpt2_tokenizer.bin", other);
  const Run again = export_cli(dir, {dir / "run", "--format", "llmc", dir / "llmc/m2.bin"});
  CHECK(again.code == 2);
  CHECK(error_line(again.output) == "error: " + dir / "llmc/gpt2_tokenizer.bin" +
                                        ": exists and holds another tokenizer (give --force to replace it)");
  CHECK_FALSE(fs::exists(dir / "llmc/m2.bin"));

  // The lines of a run that are warnings.
  const auto warnings_of = [](const Run& r) {
    std::vector<std::string> found;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("warn") != std::string::npos) found.push_back(line);
    }
    return found;
  };
  // llm.c's tokenizer file beside an llm.c model file decodes only: a Hugging Face export gets no
  // vocabulary files from it, and says so, but carries the file, with which the directory decodes.
  REQUIRE(export_cli(dir, {ckpt.dir, "--format", "llmc", dir / "m.bin"}).code == 0);
  REQUIRE(fs::exists(dir / "gpt2_tokenizer.bin"));
  const Run tabled = export_cli(dir, {dir / "m.bin", "--format", "hf", dir / "tabled"});
  CHECK(tabled.code == 0);
  REQUIRE(warnings_of(tabled).size() == 1);
  CHECK(warnings_of(tabled)[0].find(dir / "tabled" + " gets no vocabulary files, only gpt2_tokenizer.bin: " +
                                    dir / "gpt2_tokenizer.bin" + " (llm.c's tokenizer file) decodes only") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(dir / "tabled/vocab.json"));
  CHECK(read_bytes(dir / "tabled/gpt2_tokenizer.bin") == read_bytes(dir / "gpt2_tokenizer.bin"));
  CHECK(read_model_file_info(dir / "tabled").tokenizer == dir / "tabled/gpt2_tokenizer.bin");
  // The table knows <|endoftext|>, so transformers' generation stops there as on GPT-2's own files.
  const auto tabled_generation = nlohmann::json::parse(read_bytes(dir / "tabled/generation_config.json"));
  CHECK(tabled_generation.at("bos_token_id") == 50256);
  CHECK(tabled_generation.at("eos_token_id") == 50256);
  const auto tabled_config = nlohmann::json::parse(read_bytes(dir / "tabled/config.json"));
  CHECK(tabled_config.at("bos_token_id") == 50256);
  CHECK(tabled_config.at("eos_token_id") == 50256);

  // No tokenizer: one warning line, and no vocabulary or tokenizer files.
  fs::remove(dir / "gpt2_tokenizer.bin");
  const Run bare = export_cli(dir, {dir / "m.bin", "--format", "hf", dir / "bare"});
  CHECK(bare.code == 0);
  INFO(bare.output);
  REQUIRE(warnings_of(bare).size() == 1);
  CHECK(warnings_of(bare)[0].find("comes with no tokenizer") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bare/vocab.json"));
  CHECK_FALSE(fs::exists(dir / "bare/tokenizer_config.json"));
  CHECK_FALSE(fs::exists(dir / "bare/generation_config.json"));

  // A byte-level model (256 tokens, a byte each): a Hugging Face export gets the bytes'
  // tokenizer.json, an llm.c export no tokenizer; one info line each, no warning.
  const Checkpoint bytes(dir / "bytes-run", "", xtrain::test::model_spec(2, 2, 16, 8, 256));
  const Run byte_level = export_cli(dir, {bytes.dir, "--format", "hf", dir / "bytes"});
  CHECK(byte_level.code == 0);
  INFO(byte_level.output);
  CHECK(byte_level.output.find("warn") == std::string::npos);
  CHECK(byte_level.output.find("is byte-level (256 tokens, one per byte): " + dir / "bytes" +
                               " gets a tokenizer.json of the bytes") != std::string::npos);
  CHECK(read_bytes(dir / "bytes/tokenizer.json") == byte_level_tokenizer_json());
  CHECK(read_bytes(dir / "bytes/tokenizer_config.json") == byte_level_tokenizer_config(8));
  CHECK_FALSE(fs::exists(dir / "bytes/vocab.json"));  // our commands take the directory as byte-level still
  CHECK(read_model_file_info(dir / "bytes").tokenizer.empty());
  CHECK_FALSE(fs::exists(dir / "bytes/generation_config.json"));
  const auto byte_config = nlohmann::json::parse(read_bytes(dir / "bytes/config.json"));
  CHECK(byte_config.at("bos_token_id").is_null());  // not GPT2Config's default 50256: no token of the model
  CHECK(byte_config.at("eos_token_id").is_null());
  const Run byte_llmc = export_cli(dir, {bytes.dir, "--format", "llmc", dir / "bytes-llmc/m.bin"});
  CHECK(byte_llmc.code == 0);
  CHECK(byte_llmc.output.find("is byte-level (256 tokens, one per byte): there is no tokenizer to ship") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bytes-llmc/gpt2_tokenizer.bin"));
}

TEST_CASE("xtrain-worker: a typo of a command, or a job spec as xlaunch takes it, says what was meant", "[errors]") {
  ScratchDir dir;
  const Run typo = xtrain::test::run_worker(dir, "genrate", {"run"});
  CHECK(typo.code == 2);
  CHECK(error_line(typo.output) == "error: command line: unknown command \"genrate\" (did you mean \"generate\"?)");
  const Run spec = xtrain::test::run_worker(dir, "job.json", {});
  CHECK(spec.code == 2);
  CHECK(error_line(spec.output) == "error: command line: unexpected argument \"job.json\": to train, run xlaunch "
                                   "job.json (every rank), or xtrain-worker --job job.json (a world of one) "
                                   "(see --help)");
}
