// model.init_from at the header level (what xlaunch checks before anything starts): recognising
// the three kinds of model file, refusing bad config.json files, and resolving the spec's model
// shape and tokenizer from the file (keys left out take the file's values, keys set must agree,
// resume wins over init_from).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "common/checkpoint_dirs.hpp"
#include "common/model_file.hpp"
#include "common/tokenizer/gpt2_vocabulary.hpp"
#include "common/tokenizer/hf_tokenizer_json.hpp"

using namespace xtrain;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Dir {
  fs::path path;
  Dir() {
    std::string pattern = (fs::temp_directory_path() / "xtrain-model-file-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~Dir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

json gpt2_config() {
  return {{"model_type", "gpt2"},   {"n_layer", 12},     {"n_head", 12},
          {"n_embd", 768},          {"n_positions", 1024}, {"n_ctx", 1024},
          {"vocab_size", 50257},    {"n_inner", nullptr},  {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-05}};
}

// A Hugging Face directory as far as the header level looks: config.json and a model.safetensors.
void write_hf(const std::string& dir, const json& config = gpt2_config()) {
  write(dir + "/config.json", config.dump());
  write(dir + "/model.safetensors", "");
}

// An llm.c header (and a file of the size it claims) for a model of the given shape.
void write_llmc(const std::string& path, int version, int maxT, int V, int L, int NH, int C, int Vp) {
  std::int32_t header[256] = {20240326, version, maxT, V, L, NH, C, Vp};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  const long long elements = 1LL * Vp * C + 1LL * maxT * C + 1LL * L * (12LL * C * C + 13LL * C) + 2LL * C;
  out.write(std::string(static_cast<size_t>(elements) * (version == 3 ? 4 : 2), '\0').data(),
            static_cast<std::streamsize>(elements * (version == 3 ? 4 : 2)));
}

std::string file_error(const std::string& path) {
  try {
    read_model_file_info(path);
  } catch (const FileError& e) {
    return e.what();
  }
  return "(no error)";
}

// The spec `doc` resolved, resuming from checkpoint `resume_from` when given: the resulting
// spec, or the error's text.
struct Resolved {
  JobSpec spec;
  std::string error;
};
Resolved resolve(const json& doc, const std::optional<std::string>& resume_from = std::nullopt) {
  Resolved r;
  r.spec = parse_job_spec(doc);
  try {
    resolve_model_source(r.spec, doc, resume_from);
  } catch (const SpecError& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

TEST_CASE("the three kinds of model file are recognised from their headers", "[model_file]") {
  Dir d;
  SECTION("a Hugging Face GPT-2 directory") {
    write_hf(d / "gpt2");
    const ModelFileInfo info = read_model_file_info(d / "gpt2");
    CHECK(info.format == ModelFormat::kHuggingFace);
    CHECK((info.n_layer == 12 && info.n_head == 12 && info.n_embd == 768));
    CHECK((info.n_positions == 1024 && info.vocab_size == 50257));
    CHECK(info.weights == d / "gpt2/model.safetensors");
    CHECK(info.shape_source == d / "gpt2/config.json");
    CHECK(info.tokenizer.empty());
    write(d / "gpt2/vocab.json", "{}");
    write(d / "gpt2/merges.txt", "#version: 0.2\n");
    CHECK(read_model_file_info(d / "gpt2").tokenizer == d / "gpt2");
  }
  SECTION("a Hugging Face GPT-2 directory with llm.c's tokenizer file: the directory's own, even damaged") {
    write_hf(d / "gpt2");
    write(d / "gpt2/gpt2_tokenizer.bin", "not a table");
    CHECK(read_model_file_info(d / "gpt2").tokenizer == d / "gpt2/gpt2_tokenizer.bin");
  }
  SECTION("one of our checkpoints: the tokenizer it carries, else the path an older one recorded") {
    const std::string ckpt = d / ("run/checkpoints/" + checkpoint_dir_name(7));
    write_hf(ckpt);
    write(ckpt + "/state.json", json{{"format", "xtrain-checkpoint"}, {"tokenizer", "/data/gpt2-vocab"}}.dump());
    const ModelFileInfo info = read_model_file_info(ckpt);
    CHECK(info.format == ModelFormat::kCheckpoint);
    CHECK(info.tokenizer == "/data/gpt2-vocab");
    CHECK(describe(info) == "checkpoint " + ckpt);
    write(ckpt + "/gpt2_tokenizer.bin", "a table");
    CHECK(read_model_file_info(ckpt).tokenizer == ckpt + "/gpt2_tokenizer.bin");
    write(ckpt + "/vocab.json", "{}");
    write(ckpt + "/merges.txt", "#version: 0.2\n");
    CHECK(read_model_file_info(ckpt).tokenizer == ckpt);
  }
  SECTION("an llm.c model file, either version") {
    write_llmc(d / "m3.bin", 3, 16, 70, 2, 2, 8, 128);
    write_llmc(d / "m5.bin", 5, 16, 70, 2, 2, 8, 128);
    const ModelFileInfo v3 = read_model_file_info(d / "m3.bin");
    CHECK(v3.format == ModelFormat::kLlmc);
    CHECK((v3.n_positions == 16 && v3.vocab_size == 70 && v3.n_layer == 2 && v3.n_head == 2 && v3.n_embd == 8));
    CHECK(v3.llmc_padded_vocab == 128);
    CHECK(describe(v3) == "llm.c model file " + d / "m3.bin" + " (version 3, fp32)");
    CHECK(describe(read_model_file_info(d / "m5.bin")) == "llm.c model file " + d / "m5.bin" + " (version 5, bf16)");
  }
}

TEST_CASE("a tokenizer's files are read under a model directory's names", "[model_file]") {
  Dir d;
  SECTION("OpenAI's encoder.json + vocab.bpe become vocab.json + merges.txt, with tokenizer.json") {
    write(d / "openai/encoder.json", "{\"!\": 0}");
    write(d / "openai/vocab.bpe", "#version: 0.2\n");
    for (const std::string& path : {d / "openai", d / "openai/vocab.bpe"}) {
      const std::vector<NamedFile> files = read_tokenizer_files(path, 16);
      REQUIRE(files.size() == 4);
      CHECK((files[0].name == "vocab.json" && files[0].content == "{\"!\": 0}"));
      CHECK((files[1].name == "merges.txt" && files[1].content == "#version: 0.2\n"));
      CHECK(files[2].name == "tokenizer.json");
      CHECK(nlohmann::json::parse(files[2].content)["model"]["vocab"] == nlohmann::json{{"!", 0}});
      CHECK(files[3].name == "tokenizer_config.json");
      CHECK(nlohmann::json::parse(files[3].content)["model_max_length"] == 16);
    }
  }
  SECTION("a directory with Hugging Face's tokenizer.json alone: vocab.json + merges.txt made from it") {
    VocabularyListing listing;  // the 256 bytes, one merge, <|endoftext|>
    for (int b = 0; b < 256; ++b) listing.tokens.push_back(gpt2_byte_character(static_cast<std::uint8_t>(b)));
    listing.tokens.push_back("ab");
    listing.tokens.push_back("<|endoftext|>");
    listing.merges = {"a b"};
    write(d / "hf/tokenizer.json", gpt2_tokenizer_json(listing));
    CHECK(holds_vocabulary(d / "hf"));
    CHECK(directory_tokenizer(d / "hf") == d / "hf");
    const std::vector<NamedFile> files = read_tokenizer_files(d / "hf", 16);
    REQUIRE(files.size() == 4);
    CHECK(files[0].name == "vocab.json");
    CHECK(json::parse(files[0].content).size() == 258);
    CHECK(json::parse(files[0].content)["ab"] == 256);
    CHECK((files[1].name == "merges.txt" && files[1].content == "#version: 0.2\na b\n"));
    CHECK((files[2].name == "tokenizer.json" && files[2].content == gpt2_tokenizer_json(listing)));
    // A byte-level model's tokenizer.json (our export of one) is no vocabulary: the model takes bytes.
    write(d / "bytes/tokenizer.json", byte_level_tokenizer_json());
    CHECK_FALSE(holds_vocabulary(d / "bytes"));
    CHECK(directory_tokenizer(d / "bytes").empty());
    // Nor is one of another kind (a SentencePiece-style pre-tokenizer): passed over, as before.
    json other = json::parse(gpt2_tokenizer_json(listing));
    other["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
    write(d / "other/tokenizer.json", other.dump());
    CHECK_FALSE(holds_vocabulary(d / "other"));
  }
  SECTION("a byte-level model's (no path): tokenizer.json of the 256 bytes") {
    const std::vector<NamedFile> files = read_tokenizer_files("", 64);
    REQUIRE(files.size() == 2);
    CHECK(files[0].name == "tokenizer.json");
    CHECK(nlohmann::json::parse(files[0].content)["model"]["vocab"].size() == 256);
    CHECK(files[1].name == "tokenizer_config.json");
    CHECK(nlohmann::json::parse(files[1].content)["model_max_length"] == 64);
  }
  SECTION("llm.c's tokenizer file, known by its magic under any name, becomes gpt2_tokenizer.bin") {
    const std::string table("\xc8\xd7\x34\x01" "rest", 8);  // 20240328, little-endian
    write(d / "tok.bin", table);
    const std::vector<NamedFile> files = read_tokenizer_files(d / "tok.bin", 16);
    REQUIRE(files.size() == 1);
    CHECK((files[0].name == "gpt2_tokenizer.bin" && files[0].content == table));
  }
  SECTION("a file missing is one line naming it") {
    write(d / "half/vocab.json", "{}");
    try {
      read_tokenizer_files(d / "half", 16);
      FAIL("no error");
    } catch (const FileError& e) {
      CHECK(std::string(e.what()) == d / "half/merges.txt" + ": No such file or directory");
    }
  }
}

TEST_CASE("a model file that cannot be used is one line naming the file", "[model_file][errors]") {
  Dir d;
  json config = gpt2_config();
  std::string path = d / "gpt2", expected;
  SECTION("a path that does not exist") {
    path = d / "nope";
    expected = path + ": No such file or directory";
  }
  SECTION("a directory without config.json") {
    fs::create_directories(path);
    expected = path + ": no config.json: expected a Hugging Face GPT-2 directory (config.json + model.safetensors), "
                      "one of our checkpoints or an llm.c model file";
  }
  SECTION("a run directory: its newest checkpoint is named") {
    fs::create_directories(path + "/checkpoints/step-00000010");
    fs::create_directories(path + "/checkpoints/step-00000020");
    expected = path + ": this is a run directory, whose newest checkpoint is " + path + "/checkpoints/step-00000020: "
                      "expected a Hugging Face GPT-2 directory (config.json + model.safetensors), one of our "
                      "checkpoints or an llm.c model file";
  }
  SECTION("n_embd not a multiple of n_head") {
    config["n_head"] = 5;
    write_hf(path, config);
    expected = path + "/config.json: n_embd 768 is not a multiple of n_head 5";
  }
  SECTION("a missing key") {
    config.erase("n_layer");
    write_hf(path, config);
    expected = path + "/config.json: n_layer is missing";
  }
  SECTION("another activation") {
    config["activation_function"] = "relu";
    write_hf(path, config);
    expected = path + "/config.json: activation_function is \"relu\", expected \"gelu_new\" (GELU with the tanh "
                      "approximation, as GPT-2)";
  }
  SECTION("an output layer of its own (transformers would load lm_head.weight apart from wte)") {
    config["tie_word_embeddings"] = false;
    write_hf(path, config);
    expected = path + "/config.json: tie_word_embeddings is false, expected true (as GPT-2: the output layer is the "
                      "token embedding, wte)";
  }
  SECTION("config.json that is not JSON") {
    write(path + "/config.json", "{\"n_layer\": 12,");
    expected = path + "/config.json: not a JSON object (truncated or corrupt)";
  }
  SECTION("weights only in PyTorch's format") {
    write(path + "/config.json", config.dump());
    write(path + "/pytorch_model.bin", "");
    expected = path + ": no model.safetensors (pytorch_model.bin is not read: only the safetensors format is)";
  }
  SECTION("a file of a Hugging Face directory instead of the directory") {
    write_hf(path, config);
    path += "/model.safetensors";
    expected = path + ": is one file of a Hugging Face GPT-2 directory: give the directory (" + d / "gpt2" + ")";
  }
  SECTION("an llm.c file cut short") {
    path = d / "m.bin";
    write_llmc(path, 3, 16, 70, 2, 2, 8, 128);
    fs::resize_file(path, fs::file_size(path) - 1);
    expected = path + ": truncated: size is " + std::to_string(fs::file_size(path)) +
               " bytes but its header's shape needs " + std::to_string(fs::file_size(path) + 1);
  }
  SECTION("a PyTorch checkpoint: torch.save's zip (nanoGPT's ckpt.pt) and its older pickle") {
    // A zip's first local header as torch.save writes it (checked against PyTorch 1.13's): "PK\3\4", 22
    // bytes of fields, the name's length and the extra field's, then "ckpt/data.pkl".
    std::string zip = std::string("PK\x03\x04") + std::string(22, '\0') + "\x0d" + '\0' + "\x15" + '\0' +
                      "ckpt/data.pkl" + std::string(2000, 'x');
    const std::string message =
        ": a PyTorch checkpoint (torch.save: nanoGPT's ckpt.pt, an older pytorch_model.bin), which is not read "
        "(unpickling runs code, and its layout is its writer's): load it in PyTorch and save the model as a Hugging "
        "Face GPT-2 directory (config.json + model.safetensors, e.g. GPT2LMHeadModel.save_pretrained(DIR)), then give "
        "that directory";
    // The older format: pickle protocol 2, then torch's magic number.
    write(d / "pytorch_model.bin",
          std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19") + std::string(2000, 'x'));
    CHECK(file_error(d / "pytorch_model.bin") == d / "pytorch_model.bin" + message);
    path = d / "ckpt.pt";
    write(path, zip);
    expected = path + message;
  }
  SECTION("a zip that is not PyTorch's is an llm.c file's error") {
    path = d / "other.zip";
    write(path, std::string("PK\x03\x04") + std::string(22, '\0') + "\x05" + '\0' + '\0' + '\0' + "a.txt" +
                    std::string(2000, 'x'));
    expected = path + ": not an llm.c model file: magic is 67324752, expected 20240326 (model.init_from takes a "
                      "Hugging Face GPT-2 directory, a checkpoint directory or an llm.c model file)";
  }
  SECTION("an llm.c header with an impossible size") {
    path = d / "m.bin";
    write_llmc(path, 3, 16, 70, 0, 2, 8, 128);
    expected = path + ": llm.c header: L is 0, expected a positive size";
  }
  CHECK(file_error(path) == expected);
}

TEST_CASE("a Hugging Face hub name is not downloaded: the cache's copy is named, or how to fetch it",
          "[model_file][errors]") {
  Dir d;
  const char* old_cache = std::getenv("HF_HUB_CACHE");
  const std::optional<std::string> saved = old_cache ? std::optional<std::string>(old_cache) : std::nullopt;
  ::setenv("HF_HUB_CACHE", (d / "hub").c_str(), 1);
  CHECK(file_error("gpt2") == "gpt2: No such file or directory; if \"gpt2\" is a Hugging Face hub name: models are not "
                              "downloaded here, so fetch it first (e.g. huggingface-cli download gpt2 --local-dir "
                              "models/gpt2) and give that directory");
  // huggingface_hub's layout: models--ORG--NAME/refs/main names the snapshot the cache holds.
  write(d / "hub/models--openai-community--gpt2/refs/main", "abc123\n");
  write_hf(d / "hub/models--openai-community--gpt2/snapshots/abc123");
  const std::string snapshot = d / "hub/models--openai-community--gpt2/snapshots/abc123";
  for (const std::string name : {"gpt2", "openai-community/gpt2"}) {
    CHECK(file_error(name) == name + ": No such file or directory; Hugging Face's cache holds the hub's "
                                     "\"openai-community/gpt2\" at " + snapshot + ": give that directory");
  }
  // A path that names a file, or that exists, is not taken for a hub name.
  CHECK(file_error("weights.bin") == "weights.bin: No such file or directory");
  CHECK(file_error("https://huggingface.co/gpt2") == "https://huggingface.co/gpt2: No such file or directory; a URL: "
                                                     "models are read from local files only, never downloaded: fetch "
                                                     "it first");
  const std::string home = std::getenv("HOME");
  CHECK(file_error("~/models/gpt2") == "~/models/gpt2: No such file or directory; \"~\" is expanded by shells, not in "
                                       "a spec or a quoted argument: write " + home + "/models/gpt2");
  CHECK(file_error(d / "nope/gpt2") == d / "nope/gpt2" + ": No such file or directory");
  if (saved) ::setenv("HF_HUB_CACHE", saved->c_str(), 1);
  else ::unsetenv("HF_HUB_CACHE");
}

TEST_CASE("init_from fills the model keys the spec leaves out, and keys set must agree", "[model_file][spec]") {
  Dir d;
  write_hf(d / "gpt2");
  json doc = {{"model", {{"init_from", d / "gpt2"}}}, {"data", {{"train", "x.bin"}}}};

  SECTION("unset keys take the file's values") {
    const Resolved r = resolve(doc);
    REQUIRE(r.error.empty());
    CHECK((r.spec.model.n_layer == 12 && r.spec.model.n_head == 12 && r.spec.model.n_embd == 768));
    CHECK((r.spec.model.seq_len == 1024 && r.spec.model.vocab_size == 50257));
    CHECK(r.spec.tokenizer.empty());
  }
  SECTION("a key set to the file's value is fine; another value names both") {
    doc["model"]["n_layer"] = 12;
    CHECK(resolve(doc).error.empty());
    doc["model"]["n_layer"] = 4;
    CHECK(resolve(doc).error == "model.n_layer: 4 in the spec but 12 in " + d / "gpt2/config.json");
    doc["model"]["n_layer"] = 12;
    doc["model"]["vocab_size"] = 50304;
    CHECK(resolve(doc).error == "model.vocab_size: 50304 in the spec but 50257 in " + d / "gpt2/config.json");
  }
  SECTION("seq_len may be shorter than n_positions, not longer") {
    doc["model"]["seq_len"] = 256;
    CHECK(resolve(doc).spec.model.seq_len == 256);
    doc["model"]["seq_len"] = 2048;
    CHECK(resolve(doc).error == "model.seq_len: 2048 in the spec but " + d / "gpt2/config.json" +
                                               " has position embeddings for at most 1024 tokens");
  }
  SECTION("the tokenizer defaults to the directory's vocabulary files; a spec's own wins") {
    write(d / "gpt2/encoder.json", "{}");
    write(d / "gpt2/vocab.bpe", "#version: 0.2\n");
    CHECK(resolve(doc).spec.tokenizer == d / "gpt2");
    doc["tokenizer"] = "/elsewhere";
    CHECK(resolve(doc).spec.tokenizer == "/elsewhere");
  }
  SECTION("a missing init_from names the field") {
    doc["model"]["init_from"] = d / "nope";
    CHECK(resolve(doc).error == "model.init_from: " + d / "nope" + ": No such file or directory");
  }
  SECTION("without init_from nothing is read or changed") {
    doc["model"].erase("init_from");
    const Resolved r = resolve(doc);
    CHECK(r.error.empty());
    CHECK(r.spec.model.n_layer == ModelSpec{}.n_layer);
  }
}

TEST_CASE("resume wins over init_from: the shape comes from the checkpoint it continues", "[model_file][spec]") {
  Dir d;
  write_hf(d / "gpt2");
  json small = gpt2_config();
  small["n_positions"] = 256;
  const std::string ckpt = d / ("run/checkpoints/" + checkpoint_dir_name(40));
  write_hf(ckpt, small);
  write(ckpt + "/state.json", json{{"format", "xtrain-checkpoint"}}.dump());
  write(ckpt + "/vocab.json", "{}");
  write(ckpt + "/merges.txt", "#version: 0.2\n");
  json doc = {{"model", {{"init_from", d / "gpt2"}}}};

  SECTION("the checkpoint it resumes from") {
    const Resolved r = resolve(doc, ckpt);
    REQUIRE(r.error.empty());
    CHECK(r.spec.model.seq_len == 256);
    CHECK(r.spec.tokenizer == ckpt);
    doc["model"]["seq_len"] = 1024;
    CHECK(resolve(doc, ckpt).error == "model.seq_len: 1024 in the spec but " + ckpt +
                                               "/config.json (the checkpoint this run resumes from) has position "
                                               "embeddings for at most 256 tokens");
  }
  SECTION("no checkpoint: init_from") { CHECK(resolve(doc).spec.model.seq_len == 1024); }
  SECTION("a checkpoint, even when init_from does not exist") {
    doc["model"]["init_from"] = d / "gone";
    CHECK(resolve(doc, ckpt).spec.model.seq_len == 256);
  }
}
