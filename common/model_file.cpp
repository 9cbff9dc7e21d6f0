#include "common/model_file.hpp"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/checkpoint_dirs.hpp"
#include "common/foreign_model.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/tokenizer/gpt2_vocabulary.hpp"
#include "common/tokenizer/hf_tokenizer_json.hpp"

namespace xtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, std::strerror(errno));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json_object(const std::string& path) {
  const json doc = json::parse(read_text(path), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) throw FileError(path, "not a JSON object (truncated or corrupt)");
  return doc;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A GPT2Config key that must be a positive integer.
int positive(const json& config, const std::string& path, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) throw FileError(path, std::string(key) + " is missing");
  if (!it->is_number_integer() || it->get<long long>() < 1 || it->get<long long>() > (1 << 24)) {
    throw FileError(path, std::string(key) + " is " + it->dump() + ", expected a positive integer");
  }
  return it->get<int>();
}

void check_heads(const std::string& path, int n_embd, int n_head) {
  if (n_embd % n_head != 0) {
    throw FileError(path, "n_embd " + std::to_string(n_embd) + " is not a multiple of n_head " +
                              std::to_string(n_head));
  }
}

// config.json of a Hugging Face GPT-2 directory: the shape, and the settings our model cannot
// change (GELU with the tanh approximation, layernorm epsilon 1e-5, a 4x MLP, the output layer
// tied to the token embedding), so that a model we would compute differently is refused instead of
// silently fine-tuned.
void read_config(ModelFileInfo& info, const std::string& path) {
  const json config = read_json_object(path);
  if (config.contains("model_type") && config["model_type"] != "gpt2") {
    throw FileError(path, "model_type is " + config["model_type"].dump() + ", expected \"gpt2\"");
  }
  info.n_layer = positive(config, path, "n_layer");
  info.n_head = positive(config, path, "n_head");
  info.n_embd = positive(config, path, "n_embd");
  info.vocab_size = positive(config, path, "vocab_size");
  info.n_positions = positive(config, path, config.contains("n_positions") ? "n_positions" : "n_ctx");
  check_heads(path, info.n_embd, info.n_head);
  if (config.contains("activation_function")) {
    const json& f = config["activation_function"];
    if (f != "gelu_new" && f != "gelu_pytorch_tanh") {
      throw FileError(path, "activation_function is " + f.dump() +
                                ", expected \"gelu_new\" (GELU with the tanh approximation, as GPT-2)");
    }
  }
  if (config.contains("layer_norm_epsilon")) {
    const json& eps = config["layer_norm_epsilon"];
    if (!eps.is_number() || std::fabs(eps.get<double>() - 1e-5) > 1e-12) {
      throw FileError(path, "layer_norm_epsilon is " + eps.dump() + ", expected 1e-05 (as GPT-2)");
    }
  }
  if (config.contains("n_inner") && !config["n_inner"].is_null() && config["n_inner"] != 4 * info.n_embd) {
    throw FileError(path, "n_inner is " + config["n_inner"].dump() + ", expected null or 4 * n_embd (" +
                              std::to_string(4 * info.n_embd) + ")");
  }
  if (config.contains("tie_word_embeddings") && config["tie_word_embeddings"] != true) {
    throw FileError(path, "tie_word_embeddings is " + config["tie_word_embeddings"].dump() +
                              ", expected true (as GPT-2: the output layer is the token embedding, wte)");
  }
}

// The tokenizer a checkpoint written before checkpoints carried their tokenizer's files recorded
// in its state.json, an absolute path ("" when none).
std::string recorded_tokenizer(const std::string& state_path) {
  const json state = read_json_object(state_path);
  if (state.value("format", json()) != kCheckpointFormat) {
    throw FileError(state_path, std::string("format is not \"") + kCheckpointFormat + "\"");
  }
  const json tokenizer = state.value("tokenizer", json());
  return tokenizer.is_string() ? tokenizer.get<std::string>() : "";
}

ModelFileInfo read_directory(const std::string& path) {
  const fs::path dir(path);
  ModelFileInfo info;
  info.path = path;
  info.shape_source = (dir / kModelConfigFile).string();
  info.weights = (dir / kModelWeightsFile).string();
  if (!is_file(info.shape_source)) {
    const std::string expected = "expected a Hugging Face GPT-2 directory (config.json + model.safetensors), one "
                                 "of our checkpoints or an llm.c model file";
    const auto holder = describe_checkpoint_holder(dir);
    throw FileError(path, holder ? "this is " + *holder + ": " + expected : "no config.json: " + expected);
  }
  read_config(info, info.shape_source);
  if (!is_file(info.weights)) {
    const bool torch_only = is_file(dir / "pytorch_model.bin");
    throw FileError(path, std::string("no model.safetensors") +
                              (torch_only ? " (pytorch_model.bin is not read: only the safetensors format is)" : ""));
  }
  const fs::path state = dir / kCheckpointStateFile;
  info.format = is_file(state) ? ModelFormat::kCheckpoint : ModelFormat::kHuggingFace;
  info.tokenizer = directory_tokenizer(path);
  if (info.tokenizer.empty() && info.format == ModelFormat::kCheckpoint) {
    info.tokenizer = recorded_tokenizer(state.string());
  }
  return info;
}

// The first `words.size()` uint32 of `path`; false where it is shorter (or no file).
template <size_t N>
bool read_words(const std::filesystem::path& path, std::array<std::uint32_t, N>& words) {
  std::ifstream in(path, std::ios::binary);
  return static_cast<bool>(in.read(reinterpret_cast<char*>(words.data()), sizeof words));
}

// True when `table` begins as llm.c's tokenizer file of `vocab_size` tokens: its magic, version
// and vocabulary (the rest is read, and checked, where it is used).
bool llmc_tokenizer_header_fits(const fs::path& table, int vocab_size) {
  std::array<std::uint32_t, 3> words{};
  if (!read_words(table, words)) return false;
  return words[0] == kLlmcTokenizerMagic && (words[1] == 1 || words[1] == 2) &&
         words[2] == static_cast<std::uint32_t>(vocab_size);
}

ModelFileInfo read_llmc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, std::strerror(errno));
  const std::uint64_t size = fs::file_size(path);
  if (size < kLlmcHeaderBytes) {
    throw FileError(path, "truncated: " + std::to_string(size) + " bytes, less than the llm.c model header (" +
                              std::to_string(kLlmcHeaderBytes) + ")");
  }
  std::array<std::int32_t, 256> h{};
  in.read(reinterpret_cast<char*>(h.data()), sizeof h);
  if (!in) throw FileError(path, "cannot read the llm.c model header");
  if (h[0] != kLlmcModelMagic) {
    throw FileError(path, "not an llm.c model file: magic is " + std::to_string(h[0]) + ", expected " +
                              std::to_string(kLlmcModelMagic) +
                              " (model.init_from takes a Hugging Face GPT-2 directory, a checkpoint directory "
                              "or an llm.c model file)");
  }
  if (h[1] != kLlmcVersionFp32 && h[1] != kLlmcVersionBf16) {
    throw FileError(path, "llm.c model file version is " + std::to_string(h[1]) + ", expected " +
                              std::to_string(kLlmcVersionFp32) + " (fp32) or " + std::to_string(kLlmcVersionBf16) +
                              " (bf16)");
  }
  ModelFileInfo info;
  info.format = ModelFormat::kLlmc;
  info.path = info.weights = info.shape_source = path;
  info.llmc_version = h[1];
  const char* names[] = {"maxT", "V", "L", "NH", "C", "Vp"};
  for (int i = 2; i < 8; ++i) {
    if (h[i] < 1 || h[i] > (1 << 24)) {
      throw FileError(path, std::string("llm.c header: ") + names[i - 2] + " is " + std::to_string(h[i]) +
                                ", expected a positive size");
    }
  }
  info.n_positions = h[2];
  info.vocab_size = h[3];
  info.n_layer = h[4];
  info.n_head = h[5];
  info.n_embd = h[6];
  info.llmc_padded_vocab = h[7];
  check_heads(path, info.n_embd, info.n_head);
  if (info.llmc_padded_vocab < info.vocab_size) {
    throw FileError(path, "llm.c header: padded vocabulary Vp " + std::to_string(info.llmc_padded_vocab) +
                              " is smaller than the vocabulary V " + std::to_string(info.vocab_size));
  }
  // wte (Vp,C), wpe (maxT,C), per layer 12C^2 + 13C, lnf (2C): llm.c's parameter count.
  const std::uint64_t C = static_cast<std::uint64_t>(info.n_embd);
  const std::uint64_t elements = static_cast<std::uint64_t>(info.llmc_padded_vocab) * C +
                                 static_cast<std::uint64_t>(info.n_positions) * C +
                                 static_cast<std::uint64_t>(info.n_layer) * (12 * C * C + 13 * C) + 2 * C;
  const std::uint64_t expected = kLlmcHeaderBytes + elements * (info.llmc_version == kLlmcVersionFp32 ? 4 : 2);
  if (size != expected) {
    throw FileError(path, std::string(size < expected ? "truncated: " : "") + "size is " + std::to_string(size) +
                              " bytes but its header's shape needs " + std::to_string(expected));
  }
  // llm.c keeps its tokenizer file beside its model files (its downloads, our llm.c export); one
  // whose header is not of this vocabulary belongs to another model in the directory.
  const fs::path table = fs::path(path).parent_path() / kLlmcTokenizerFile;
  if (llmc_tokenizer_header_fits(table, info.vocab_size)) info.tokenizer = table.string();
  return info;
}

}  // namespace

bool is_llmc_tokenizer_file(const std::string& path) {
  std::array<std::uint32_t, 1> magic{};
  return fs::path(path).filename() == kLlmcTokenizerFile ||
         (read_words(path, magic) && magic[0] == kLlmcTokenizerMagic);
}

std::string describe(const ModelFileInfo& file) {
  switch (file.format) {
    case ModelFormat::kHuggingFace:
      return "Hugging Face GPT-2 directory " + file.path;
    case ModelFormat::kCheckpoint:
      return "checkpoint " + file.path;
    case ModelFormat::kLlmc:
      return "llm.c model file " + file.path + " (version " + std::to_string(file.llmc_version) +
             (file.llmc_version == kLlmcVersionFp32 ? ", fp32)" : ", bf16)");
  }
  return file.path;
}

std::vector<NamedFile> read_tokenizer_files(const std::string& path, int context) {
  if (path.empty()) {
    return {{kHfTokenizerFile, byte_level_tokenizer_json()},
            {kHfTokenizerConfigFile, byte_level_tokenizer_config(context)}};
  }
  if (is_llmc_tokenizer_file(path)) return {{kLlmcTokenizerFile, read_text(path)}};
  const VocabularyFiles files = find_vocabulary_files(path);
  if (!files.tokenizer_json.empty()) {  // vocab.json and merges.txt made from it
    const VocabularyListing vocabulary = list_gpt2_vocabulary(path);
    return {{kHfVocabFile, vocab_json(vocabulary)},
            {kHfMergesFile, merges_txt(vocabulary)},
            {kHfTokenizerFile, gpt2_tokenizer_json(vocabulary)},
            {kHfTokenizerConfigFile, gpt2_tokenizer_config(context)}};
  }
  std::string vocab = read_text(files.vocab), merges = read_text(files.merges);  // a missing file named first
  return {{kHfVocabFile, std::move(vocab)},
          {kHfMergesFile, std::move(merges)},
          {kHfTokenizerFile, gpt2_tokenizer_json(list_gpt2_vocabulary(path))},
          {kHfTokenizerConfigFile, gpt2_tokenizer_config(context)}};
}

std::string directory_tokenizer(const std::string& dir) {
  if (holds_vocabulary(dir)) return dir;
  // A table here is the directory's, so a damaged one is taken, and reported where it is loaded,
  // rather than passed over.
  const fs::path table = fs::path(dir) / kLlmcTokenizerFile;
  return is_file(table) ? table.string() : "";
}

bool holds_vocabulary(const std::string& dir) {
  try {
    const VocabularyFiles files = find_vocabulary_files(dir);
    // A tokenizer.json of another kind, or a byte-level model's (our exports of one), is passed over.
    if (!files.tokenizer_json.empty()) return is_gpt2_tokenizer_json(files.tokenizer_json);
    return is_file(files.vocab) && is_file(files.merges);
  } catch (const TokenizerError&) {
    return false;
  }
}

ModelFileInfo read_model_file_info(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) throw FileError(path, "No such file or directory" + hub_name_note(path));
  if (fs::is_directory(status)) return read_directory(path);
  if (!fs::is_regular_file(status)) throw FileError(path, "is not a regular file or a directory");
  const fs::path file(path);
  if (file.extension() == ".safetensors" || file.filename() == kModelConfigFile) {
    throw FileError(path, "is one file of a Hugging Face GPT-2 directory: give the directory (" +
                              file.parent_path().string() + ")");
  }
  if (is_pytorch_checkpoint(path)) throw FileError(path, pytorch_checkpoint_message());
  return read_llmc(path);
}

std::optional<ModelFileInfo> resolve_model_source(JobSpec& spec, const json& doc,
                                                  const std::optional<std::string>& resume_from) {
  if (spec.model.init_from.empty()) return std::nullopt;
  std::string source = spec.model.init_from;
  const char* field = "model.init_from";
  if (resume_from) {
    source = *resume_from;
    field = "checkpoint.resume";
  }
  ModelFileInfo info;
  try {
    info = read_model_file_info(source);
  } catch (const FileError& e) {
    throw SpecError(field, e.what());
  }
  const bool resuming = std::string(field) != "model.init_from";
  const std::string where = info.shape_source + (resuming ? " (the checkpoint this run resumes from)" : "");
  const json* given = doc.is_object() && doc.contains("model") ? &doc["model"] : nullptr;
  const auto is_given = [&](const char* key) { return given && given->is_object() && given->contains(key); };
  const auto take = [&](const char* key, int& value, int from_file) {
    if (is_given(key) && value != from_file) {
      throw SpecError(std::string("model.") + key,
                      std::to_string(value) + " in the spec but " + std::to_string(from_file) + " in " + where);
    }
    value = from_file;
  };
  ModelSpec& m = spec.model;
  take("n_layer", m.n_layer, info.n_layer);
  take("n_head", m.n_head, info.n_head);
  take("n_embd", m.n_embd, info.n_embd);
  take("vocab_size", m.vocab_size, info.vocab_size);
  if (!is_given("seq_len")) {
    m.seq_len = info.n_positions;
  } else if (m.seq_len > info.n_positions) {
    throw SpecError("model.seq_len", std::to_string(m.seq_len) + " in the spec but " + where +
                                         " has position embeddings for at most " +
                                         std::to_string(info.n_positions) + " tokens");
  }
  if (spec.tokenizer.empty()) spec.tokenizer = info.tokenizer;
  return info;
}

}  // namespace xtrain
