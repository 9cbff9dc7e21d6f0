#include "worker/eval_command.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <new>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/command_line.hpp"
#include "common/exit_codes.hpp"
#include "common/log.hpp"
#include "common/model_file.hpp"
#include "common/number_format.hpp"
#include "worker/data/multiple_choice.hpp"
#include "worker/device/device_choice.hpp"
#include "worker/data/token_source.hpp"
#include "worker/data_tool/documents.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/formats/text_codec.hpp"
#include "worker/loaded_model.hpp"
#include "worker/model/gpt.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/train/choice_scoring.hpp"
#include "worker/train/model_argument.hpp"

namespace xtrain {
namespace {

// Positions per forward: 4 windows of GPT-2's 1,024, more of a shorter context (whose products
// would be too small to keep the cores or the GPU busy: the demo's model, context 64, scores its
// 2.6M tokens in 29-32 s at 64 windows a forward and 33-34 s at 4, on two cores).
constexpr int kPositionsPerForward = 4096;

// Long work shows that it moves: one line every ten seconds, "scored 1,234,567 of 2,576,192 tokens
// (48%) | 26,431 tokens/s | ETA 0:00:50"; none for work done within ten seconds.
class ProgressLine {
  using Clock = std::chrono::steady_clock;

 public:
  ProgressLine(std::string verb, std::string unit) : verb_(std::move(verb)), unit_(std::move(unit)) {}
  void update(std::uint64_t done, std::uint64_t total) {
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(10)) return;
    last_ = now;
    spdlog::info("{} {}", verb_,
                 progress_text(done, total, std::chrono::duration<double>(now - start_).count(), unit_));
  }

 private:
  std::string verb_, unit_;
  Clock::time_point start_ = Clock::now(), last_ = start_;
};

const char* const kUsage =
    "usage: xtrain-worker eval MODEL [--data GLOB [--max-tokens N]] [--multiple-choice FILE] [--tokenizer PATH]\n"
    "         [--device cpu|cuda|auto] [--precision auto|fp32|tf32|bf16] [--json]\n"
    "  The loss of MODEL (a run directory: its newest checkpoint with intact weights; a\n"
    "  checkpoint, a Hugging Face GPT-2 directory or an llm.c model file) on GLOB (llm.c token\n"
    "  shards, or text: encoded with the model's GPT-2 tokenizer or --tokenizer, each file a\n"
    "  document as xtrain-data encodes it, or one token per byte for a byte-level model): mean\n"
    "  cross-entropy per token, perplexity, bits per byte (with a tokenizer: GPT-2's vocabulary\n"
    "  files, or llm.c's gpt2_tokenizer.bin, which an llm.c model file has beside it and which\n"
    "  cannot encode text; or for bytes) and the number of tokens scored. The data is cut into\n"
    "  windows of the model's context (or of N with --max-tokens N below it), each token\n"
    "  predicted from the ones before it in its window; a last piece shorter than a window is\n"
    "  left out.\n"
    "    --max-tokens N   score at most N tokens (the first whole windows; of text only what they\n"
    "                     need is encoded)\n"
    "    --multiple-choice FILE  accuracy on llm.c's multiple-choice eval file (HellaSwag's, as\n"
    "                     dev/data/hellaswag.py writes it): the completion with the lowest mean loss\n"
    "                     over its tokens is the model's answer\n"
    "    --device D       cpu, cuda (GPU 0 of those CUDA sees) or auto (a GPU where there is one,\n"
    "                     else the CPU); default auto. 4,096 positions per forward (4 windows of\n"
    "                     1,024), fewer where the device's memory takes fewer\n"
    "    --precision P    as a job's train.precision: auto (bf16 on a GPU, fp32 on the CPU), fp32,\n"
    "                     tf32 (GPU) or bf16 (on the CPU emulated); default auto\n"
    "    --json           one JSON object on stdout instead of a line of text\n"
    "exit codes: 0 scored; 1 runtime failure; 2 bad input (command line, MODEL, data, tokenizer)\n";

struct EvalOptions {
  std::string model;
  std::string data;
  std::uint64_t max_tokens = 0;  // 0: all
  std::string tokenizer;
  std::string multiple_choice;
  std::string device = "auto";
  std::string precision = "auto";
  bool json = false;
};

EvalOptions parse(int argc, char** argv) {
  EvalOptions o;
  const std::vector<std::string> positional =
      CommandLine(kUsage, "eval --help")
          .option("--data", o.data)
          .option("--max-tokens",
                  [&](const std::string& v) { o.max_tokens = static_cast<std::uint64_t>(parse_integer("--max-tokens", v, 1)); })
          .option("--tokenizer", o.tokenizer)
          .option("--multiple-choice", o.multiple_choice)
          .option("--device", o.device)
          .option("--precision", o.precision)
          .flag("--json", [&] { o.json = true; })
          .parse(argc, argv);
  if (positional.size() != 1) {
    throw BadInput("command line: expected one MODEL, got " + std::to_string(positional.size()) + " (see eval --help)");
  }
  o.model = positional[0];
  if (o.data.empty() && o.multiple_choice.empty()) {
    throw BadInput("--data: missing: give a text file or a glob of llm.c token shards (or --multiple-choice FILE)");
  }
  if (o.data.empty() && o.max_tokens) throw BadInput("--max-tokens: goes with --data");
  check_command_device_flags(o.device, o.precision);
  return o;
}

// The --data scores: whole windows of T tokens from the start of the data.
struct DataPlan {
  std::shared_ptr<TokenSource> data;
  std::vector<std::int32_t> encoded;  // text as the model's tokenizer encodes it; empty: the data's tokens
  std::optional<TextCodec> codec;
  int T = 0;
  std::uint64_t windows = 0;
  int batch = 0;  // windows per forward: up to wanted_batch(), as many as the device's memory takes
  std::uint64_t size() const { return encoded.empty() ? data->size() : encoded.size(); }
  void copy(std::uint64_t start, std::uint64_t count, std::int32_t* out) const {
    if (encoded.empty()) return data->copy(start, count, out);
    std::copy_n(encoded.begin() + static_cast<std::ptrdiff_t>(start), count, out);
  }
  int wanted_batch() const {
    const auto per_forward = static_cast<std::uint64_t>(std::max(1, kPositionsPerForward / T));
    return static_cast<int>(std::min(per_forward, windows));
  }
};

// Text for a model with a GPT-2 tokenizer, through xtrain-data's own reader and chunk encoder
// (worker/data_tool/documents.hpp): each file a document, EOT doc EOT doc ... EOT, empty files
// skipped, so that its scores are those of the shards xtrain-data makes of the same files. It
// stops once `wanted` tokens are in hand (--max-tokens: a chunk of about a megabyte at a time).
std::vector<std::int32_t> encode_documents(const TokenSource& text, const TextCodec& tokenizer, std::uint64_t wanted) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<data_tool::InputFile> files;
  for (const std::string& path : text.files()) files.push_back({path, std::filesystem::file_size(path)});
  const std::uint64_t total = text.size();  // bytes: one token each
  data_tool::ChunkReader reader(files, /*jsonl=*/false, data_tool::kChunkBytes);
  ProgressLine progress("encoded", "bytes");
  std::vector<std::int32_t> tokens;
  std::uint64_t bytes = 0;
  data_tool::Chunk chunk;
  while (tokens.size() < wanted && reader.next(chunk)) {
    if (!chunk.error.empty()) throw BadInput("--data: " + chunk.error);
    const data_tool::EncodedChunk encoded = data_tool::encode_chunk(chunk, tokenizer.gpt2(), "");
    tokens.insert(tokens.end(), encoded.tokens.begin(), encoded.tokens.end());
    bytes += chunk.bytes.size();
    progress.update(bytes, total);
  }
  tokens.push_back(*tokenizer.end_of_text());
  spdlog::info("--data: {} of text{} encoded with {}: {} tokens, {:.1f} s", format_bytes(bytes),
               bytes < total ? " (of " + format_bytes(total) + ": enough for --max-tokens)" : "", tokenizer.name(),
               with_thousands(static_cast<long long>(tokens.size())),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return tokens;
}

DataPlan plan_data(const EvalOptions& o, const ModelFileInfo& model) {
  DataPlan p;
  p.data = std::make_shared<TokenSource>(o.data, "--data");
  std::optional<TextCodec> tokenizer = model_tokenizer(model, o.tokenizer);
  const bool text = p.data->byte_level();
  if (text && tokenizer && !tokenizer->encodes()) {
    throw BadInput("--data: " + o.data + " is text, and " + tokenizer->name() + " decodes only: give --tokenizer " +
                   "PATH (GPT-2 vocabulary files) to encode it, or score llm.c token shards (xtrain-data makes them " +
                   "from text)");
  }
  if (text && tokenizer) {
    p.encoded = encode_documents(*p.data, *tokenizer, o.max_tokens ? o.max_tokens + 1 : UINT64_MAX);
  } else if (text && model.vocab_size > kByteVocabulary) {
    throw BadInput("--data: " + o.data + " is text, and " + model.path + " (" + std::to_string(model.vocab_size) +
                   " tokens, not bytes) has no tokenizer to encode it with: give --tokenizer PATH (GPT-2 vocabulary "
                   "files), or score llm.c token shards (xtrain-data makes them from text)");
  } else {
    p.data->check_vocab(model.vocab_size, "--data");
  }
  // Without a tokenizer, text and a byte-level model's shards are bytes, a token each (as generate reads them).
  const bool bytes = text || model.vocab_size == kByteVocabulary;
  p.codec = tokenizer ? std::move(*tokenizer) : bytes ? TextCodec::bytes() : TextCodec();
  if (p.size() < 2) {
    throw BadInput("--data: " + o.data + " has " + std::to_string(p.size()) + " tokens; scoring needs at least 2");
  }
  const std::uint64_t targets = o.max_tokens ? std::min(o.max_tokens, p.size() - 1) : p.size() - 1;
  p.T = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(model.n_positions), targets));
  p.windows = targets / static_cast<std::uint64_t>(p.T);
  p.batch = p.wanted_batch();
  return p;
}

// The multiple-choice scores' shape: a context of the longest example, rows (completions, of any
// examples) per forward up to kPositionsPerForward positions, and at least every completion of an
// example.
struct ChoicePlan {
  int T = 1;
  int needed = 1;  // the most completions an example has
  int B = 1;       // rows per forward: as many as the device's memory takes, down to `needed`
};

ChoicePlan plan_choices(const std::vector<ChoiceExample>& examples, const ModelFileInfo& model, const std::string& path) {
  ChoicePlan p;
  size_t rows = 0;
  for (size_t e = 0; e < examples.size(); ++e) {
    const int length = choice_positions(examples[e]);
    if (length > model.n_positions) {
      throw BadInput("--multiple-choice: " + path + ": example " + std::to_string(e) + " needs " +
                     std::to_string(length) + " positions, more than the model's context of " +
                     std::to_string(model.n_positions));
    }
    p.T = std::max(p.T, length);
    p.needed = std::max(p.needed, static_cast<int>(examples[e].completions.size()));
    rows += examples[e].completions.size();
  }
  const auto per_forward = static_cast<size_t>(kPositionsPerForward / p.T);
  p.B = std::max(p.needed, static_cast<int>(std::min(rows, per_forward)));
  return p;
}

nlohmann::json score_data(const DataPlan& p, const ModelFileInfo& model, const DeviceChoice& device) {
  const int B = p.batch;
  LoadedModel m(model, p.T, B, device);
  const int T = p.T;
  std::uint64_t tokens_scored = 0, bytes = 0;
  double loss_sum = 0.0;  // nats
  ProgressLine progress("scored", "tokens");
  std::vector<std::int32_t> window(static_cast<size_t>(T) + 1), tokens(static_cast<size_t>(B) * T), targets(tokens.size());
  for (std::uint64_t w = 0; w < p.windows; w += static_cast<std::uint64_t>(B)) {
    const int b = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(B), p.windows - w));
    for (int i = 0; i < b; ++i) {
      p.copy((w + static_cast<std::uint64_t>(i)) * static_cast<std::uint64_t>(T), window.size(), window.data());
      std::copy(window.begin(), window.end() - 1, tokens.begin() + static_cast<long>(i) * T);
      std::copy(window.begin() + 1, window.end(), targets.begin() + static_cast<long>(i) * T);
      bytes += p.codec->text_bytes(std::span(window).subspan(1));
    }
    m.gpt.forward(tokens.data(), targets.data(), b);
    const auto positions = static_cast<std::uint64_t>(b) * static_cast<std::uint64_t>(T);
    loss_sum += m.gpt.take_loss() * static_cast<double>(positions);
    tokens_scored += positions;
    progress.update(tokens_scored, p.windows * static_cast<std::uint64_t>(T));
  }
  const double loss = loss_sum / static_cast<double>(tokens_scored);
  const bool has_bytes = p.codec->has_text() && bytes > 0;
  return {{"tokens", tokens_scored},
          {"window", T},
          {"loss", loss},
          {"perplexity", std::exp(loss)},
          {"bits_per_byte", has_bytes ? nlohmann::json(loss_sum / std::log(2.0) / static_cast<double>(bytes)) : nlohmann::json()},
          {"bytes", has_bytes ? nlohmann::json(bytes) : nlohmann::json()}};
}

// llm.c's multiple-choice accuracy (worker/train/choice_scoring.hpp), at a context of the longest example.
nlohmann::json multiple_choice(const std::vector<ChoiceExample>& examples, const ChoicePlan& p,
                               const ModelFileInfo& model, const DeviceChoice& device) {
  LoadedModel m(model, p.T, p.B, device);
  ProgressLine progress("scored", "completions");
  const ChoiceScore score = score_choices(m.gpt, examples, [&progress](std::uint64_t done, std::uint64_t total) {
    progress.update(done, total);
  });
  return {{"examples", score.examples},
          {"correct", score.correct},
          {"accuracy", static_cast<double>(score.correct) / static_cast<double>(score.examples)},
          {"predictions", score.predictions}};
}

}  // namespace

int run_eval(int argc, char** argv, const std::string& openblas_choice) {
  init_logging("");
  EvalOptions o;
  ModelFileInfo model;
  std::optional<DataPlan> data;
  std::vector<ChoiceExample> examples;
  ChoicePlan choices;
  DeviceChoice device;
  try {
    o = parse(argc, argv);
    model = open_model_argument(o.model);
    if (!o.data.empty()) data = plan_data(o, model);
    if (!o.multiple_choice.empty()) {
      examples = read_multiple_choice(o.multiple_choice, model.vocab_size, "--multiple-choice");
      choices = plan_choices(examples, model, o.multiple_choice);
    }
    device = choose_command_device(o.device, o.precision, "scoring", DeviceProbe::of_this_machine());
    // What fits the device's memory is known before anything is allocated there.
    if (data) data->batch = fit_command_batch(device, spec_of(model, data->T), data->batch);
    if (!examples.empty()) {
      choices.B = fit_command_batch(device, spec_of(model, choices.T), choices.B, choices.needed);
    }
  } catch (const std::exception& e) {  // everything so far is about the input
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kBadInput;
  }
  log_device_line(device, device.summary);
  if (!openblas_choice.empty() && device.cuda == nullptr) spdlog::info("{}", openblas_choice);
  if (data && data->batch < data->wanted_batch()) {
    spdlog::info("{} window{} of {} tokens per forward: as many as {} takes", data->batch,
                 data->batch == 1 ? "" : "s", data->T,
                 device.cuda ? "the free memory of " + device.gpu_memory.name : "the memory this process may use");
  }
  nlohmann::json out = {{"model", model.path}, {"device", device.cuda ? "cuda" : "cpu"},
                        {"precision", precision_name(device.precision)}};
  const auto start = std::chrono::steady_clock::now();
  try {
    if (data) {
      out["data"] = o.data;
      out.update(score_data(*data, model, device));
    }
    if (!examples.empty()) out["multiple_choice"] = multiple_choice(examples, choices, model, device);
  } catch (const BadInput& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kBadInput;
  } catch (const std::invalid_argument& e) {  // a shape the device's backend does not take
    std::fprintf(stderr, "error: %s: %s\n", model.path.c_str(), e.what());
    return exit_code::kBadInput;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of %s memory for the model %s\n", device.cuda ? "GPU" : "host", o.model.c_str());
    return exit_code::kRuntimeFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kRuntimeFailure;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("scored {} in {:.1f} s", describe(model), seconds);
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (data) {
    char bits[64] = "bits per byte unknown (no tokenizer: give --tokenizer PATH)";
    if (!out["bits_per_byte"].is_null()) std::snprintf(bits, sizeof bits, "%.4f bits per byte", out["bits_per_byte"].get<double>());
    std::printf("%s on %s: %s tokens, loss %.4f, perplexity %.2f, %s\n", describe(model).c_str(), o.data.c_str(),
                with_thousands(out["tokens"].get<long long>()).c_str(), out["loss"].get<double>(),
                out["perplexity"].get<double>(), bits);
  }
  if (!examples.empty()) {
    const auto& mc = out["multiple_choice"];
    std::printf("%s on %s: accuracy %.4f (%s of %s)\n", describe(model).c_str(), o.multiple_choice.c_str(),
                mc["accuracy"].get<double>(), with_thousands(mc["correct"].get<long long>()).c_str(),
                with_thousands(static_cast<long long>(examples.size())).c_str());
  }
  return 0;
}

}  // namespace xtrain
