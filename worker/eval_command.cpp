#include "worker/eval_command.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/log.hpp"
#include "common/model_file.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/data/token_source.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/formats/text_codec.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/model_argument.hpp"

namespace xtrain {
namespace {

constexpr int kExitRuntimeFailure = 1;
constexpr int kExitBadInput = 2;
constexpr int kWindowsPerForward = 4;

const char* const kUsage =
    "usage: xtrain-worker eval MODEL --data GLOB [--max-tokens N] [--tokenizer PATH] [--json]\n"
    "  The loss of MODEL (a run directory: its newest intact checkpoint; a checkpoint, a Hugging Face\n"
    "  GPT-2 directory or an llm.c model file) on GLOB (a text file, one token per byte, or llm.c token\n"
    "  shards): mean cross-entropy per token, perplexity, bits per byte (with the model's tokenizer or\n"
    "  --tokenizer, or for text) and the number of tokens scored. The data is cut into windows of the\n"
    "  model's context (or of N with --max-tokens N below it), each token predicted from the ones\n"
    "  before it in its window; a last piece shorter than a window is left out. On the CPU, fp32.\n"
    "    --max-tokens N   score at most N tokens (the first whole windows)\n"
    "    --json           one JSON object on stdout instead of a line of text\n"
    "exit codes: 0 scored; 1 runtime failure; 2 bad input (command line, MODEL, data, tokenizer)\n";

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct EvalOptions {
  std::string model;
  std::string data;
  std::uint64_t max_tokens = 0;  // 0: all
  std::string tokenizer;
  bool json = false;
};

EvalOptions parse(int argc, char** argv) {
  EvalOptions o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) throw BadInput("command line: " + arg + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--data") {
      o.data = value();
    } else if (arg == "--max-tokens") {
      const std::string text = value();
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0 || n < 1) {
        throw BadInput("--max-tokens: expected an integer >= 1, got \"" + text + "\"");
      }
      o.max_tokens = static_cast<std::uint64_t>(n);
    } else if (arg == "--tokenizer") {
      o.tokenizer = value();
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg.rfind("--", 0) == 0) {
      throw BadInput("command line: unknown option \"" + arg + "\" (see eval --help)");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 1) {
    throw BadInput("command line: expected one MODEL, got " + std::to_string(positional.size()) + " (see eval --help)");
  }
  o.model = positional[0];
  if (o.data.empty()) throw BadInput("--data: missing: give a text file or a glob of llm.c token shards");
  return o;
}

struct Score {
  std::uint64_t tokens = 0;
  std::uint64_t bytes = 0;
  double loss_sum = 0.0;  // nats
};

}  // namespace

int run_eval(int argc, char** argv) {
  init_logging("");
  EvalOptions o;
  ModelFileInfo model;
  std::shared_ptr<TokenSource> data;
  std::optional<TextCodec> codec;
  std::optional<ParamLayout> layout;
  std::vector<float> params;
  ModelSpec shape;
  int T = 0;
  std::uint64_t windows = 0;
  try {
    o = parse(argc, argv);
    model = open_model_argument(o.model);
    data = std::make_shared<TokenSource>(o.data, "--data");
    data->check_vocab(model.vocab_size, "--data");
    JobSpec spec;
    spec.model.vocab_size = model.vocab_size;
    spec.tokenizer = o.tokenizer.empty() && !data->byte_level() ? model.tokenizer : o.tokenizer;
    codec = TextCodec::for_run(spec, data->byte_level());
    if (data->size() < 2) throw BadInput("--data: " + o.data + " has " + std::to_string(data->size()) +
                                         " tokens; scoring needs at least 2");
    const std::uint64_t targets = o.max_tokens ? std::min(o.max_tokens, data->size() - 1) : data->size() - 1;
    T = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(model.n_positions), targets));
    windows = o.max_tokens ? targets / static_cast<std::uint64_t>(T) : (data->size() - 1) / static_cast<std::uint64_t>(T);
    shape.n_layer = model.n_layer;
    shape.n_head = model.n_head;
    shape.n_embd = model.n_embd;
    shape.seq_len = T;
    shape.vocab_size = model.vocab_size;
    layout.emplace(ModelDims::from(shape));
    params.resize(layout->total());
    import_model(model, *layout, params.data());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory for the model %s\n", o.model.c_str());
    return kExitRuntimeFailure;
  } catch (const std::exception& e) {  // everything so far is about the input
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  Score score;
  const auto start = std::chrono::steady_clock::now();
  try {
    CpuBackend backend(Precision::fp32);
    const int B = static_cast<int>(std::min<std::uint64_t>(kWindowsPerForward, windows));
    GPT gpt(shape, backend, B);
    gpt.set_params(params.data());
    std::vector<std::int32_t> window(static_cast<size_t>(T) + 1), tokens(static_cast<size_t>(B) * T),
        targets(tokens.size());
    for (std::uint64_t w = 0; w < windows; w += static_cast<std::uint64_t>(B)) {
      const int b = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(B), windows - w));
      for (int i = 0; i < b; ++i) {
        data->copy((w + static_cast<std::uint64_t>(i)) * static_cast<std::uint64_t>(T), window.size(), window.data());
        std::copy(window.begin(), window.end() - 1, tokens.begin() + static_cast<long>(i) * T);
        std::copy(window.begin() + 1, window.end(), targets.begin() + static_cast<long>(i) * T);
        score.bytes += codec->text_bytes(std::span(window).subspan(1));
      }
      gpt.forward(tokens.data(), targets.data(), b);
      const auto positions = static_cast<std::uint64_t>(b) * static_cast<std::uint64_t>(T);
      score.loss_sum += gpt.take_loss() * static_cast<double>(positions);
      score.tokens += positions;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitRuntimeFailure;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double loss = score.loss_sum / static_cast<double>(score.tokens);
  const bool has_bytes = codec->has_text() && score.bytes > 0;
  const double bpb = has_bytes ? score.loss_sum / std::log(2.0) / static_cast<double>(score.bytes) : 0.0;
  spdlog::info("scored {} tokens of {} in {} windows of {} in {:.1f} s ({:.0f} tokens/s)", score.tokens, o.data,
               windows, T, seconds, seconds > 0 ? static_cast<double>(score.tokens) / seconds : 0.0);
  if (o.json) {
    const nlohmann::json out = {{"model", model.path},
                                {"data", o.data},
                                {"tokens", score.tokens},
                                {"window", T},
                                {"loss", loss},
                                {"perplexity", std::exp(loss)},
                                {"bits_per_byte", has_bytes ? nlohmann::json(bpb) : nlohmann::json(nullptr)},
                                {"bytes", has_bytes ? nlohmann::json(score.bytes) : nlohmann::json(nullptr)}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    char bits[64] = "bits per byte unknown (no tokenizer: give --tokenizer PATH)";
    if (has_bytes) std::snprintf(bits, sizeof bits, "%.4f bits per byte", bpb);
    std::printf("%s on %s: %llu tokens, loss %.4f, perplexity %.2f, %s\n", describe(model).c_str(), o.data.c_str(),
                static_cast<unsigned long long>(score.tokens), loss, std::exp(loss), bits);
  }
  return 0;
}

}  // namespace xtrain
