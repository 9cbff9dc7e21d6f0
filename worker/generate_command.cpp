#include "worker/generate_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/command_line.hpp"
#include "common/exit_codes.hpp"
#include "common/log.hpp"
#include "common/model_file.hpp"
#include "common/number_format.hpp"
#include "common/usable_cpus.hpp"
#include "common/usable_memory.hpp"
#include "common/worker_env.hpp"
#include "worker/cpu/kv_decoder.hpp"
#include "worker/cpu/thread_team.hpp"
#include "worker/device/device_choice.hpp"
#include "worker/formats/text_codec.hpp"
#include "worker/formats/model_io.hpp"
#include "worker/formats/text_stream.hpp"
#include "worker/loaded_model.hpp"
#include "worker/model/gpt_decoder.hpp"
#include "worker/model/memory_plan.hpp"
#include "worker/train/token_sampler.hpp"
#include "worker/train/model_argument.hpp"

namespace xtrain {
namespace {

constexpr int kMaxThreads = 1024;

// The CPUs this process may use, as a count of threads (at most kMaxThreads).
int usable_threads() { return static_cast<int>(std::min<unsigned>(usable_cpus(), kMaxThreads)); }

// Samples side by side on a GPU, at most. A step reads every weight once for all of them, and
// each sample's keys and values besides: GPT-2 124M's 250 MB of bf16 weights, 57 MB of cache a
// sample at a full context. At 16 a step reads 1.15 GB, 3.7 times one sample's step, for 16
// times the tokens; past that each sample adds its cache's reads to the latency that a user
// streaming sample 1 sees, for less and less gain in throughput.
constexpr int kMaxSampleRows = 16;

const char* const kUsage =
    "usage: xtrain-worker generate MODEL [--prompt TEXT | --prompt-file FILE] [--max-new-tokens N]\n"
    "         [--temperature T] [--top-k K] [--top-p P] [--seed S] [--num-samples N] [--stop TEXT]\n"
    "         [--tokenizer PATH] [--device cpu|cuda|auto] [--precision auto|fp32|tf32|bf16] [--threads N]\n"
    "  Writes what MODEL says after the prompt to stdout as it is generated (whole UTF-8 characters),\n"
    "  then tokens/s on stderr. MODEL: a run directory (its newest checkpoint with intact weights), a\n"
    "  checkpoint, a Hugging Face GPT-2 directory or an llm.c model file.\n"
    "    --prompt TEXT, --prompt-file FILE   the text to continue; none or empty: <|endoftext|>\n"
    "                                        (a newline for a byte-level model)\n"
    "    --max-new-tokens N    tokens per sample (default 128); a sample also ends at <|endoftext|>\n"
    "    --temperature T       0: greedy; default 1\n"
    "    --top-k K             keep the K most likely tokens (default 0: all)\n"
    "    --top-p P             keep the most likely tokens up to probability P, in (0, 1] (default 1)\n"
    "    --seed S              the same seed gives the same text (default 0)\n"
    "    --num-samples N       samples from the same prompt (default 1), each from its own seed, up\n"
    "                          to 16 side by side (on the CPU as many as a quarter of the memory it\n"
    "                          may use holds caches for); sample 1 is the same text for any N\n"
    "    --stop TEXT           end a sample where TEXT appears (TEXT is not printed)\n"
    "    --tokenizer PATH      GPT-2 vocabulary files, or llm.c's gpt2_tokenizer.bin (it decodes\n"
    "                          only: no prompt then), for a model that comes without them; the\n"
    "                          default is the model's own (an llm.c model file's is the\n"
    "                          gpt2_tokenizer.bin beside it); a model of 256 tokens without one is\n"
    "                          byte-level\n"
    "    --device D            cpu, cuda (GPU 0 of those CUDA sees) or auto (a GPU where there is one,\n"
    "                          else the CPU); default auto\n"
    "    --precision P         on a GPU: auto (bf16), bf16, tf32 or fp32; on the CPU fp32 (auto)\n"
    "    --threads N           on the CPU, threads sharing each token's work and drawing the samples\n"
    "                          side by side (default: OMP_NUM_THREADS when set, else the CPUs this\n"
    "                          process may use; at most one per 8 MiB of weights); on a GPU, threads\n"
    "                          drawing the samples side by side (default: the CPUs this process may\n"
    "                          use; at most one a sample). The text is the same for any N\n"
    "  Each new token costs one position of work (a KV cache), on either device; past the model's\n"
    "  context the newest half of the window is kept and run again.\n"
    "exit codes: 0 generated; 1 runtime failure; 2 bad input (command line, MODEL, tokenizer, prompt)\n";

struct GenerateOptions {
  std::string model;
  std::optional<std::string> prompt;
  std::string prompt_file;
  int max_new_tokens = 128;
  SamplingOptions sampling;
  std::uint64_t seed = 0;
  int num_samples = 1;
  std::string stop;
  std::string tokenizer;
  std::string device = "auto";
  std::string precision = "auto";
  int threads = 0;  // 0: default_threads()
};

// OMP_NUM_THREADS when it is a count (OpenMP's and PyTorch's convention), else every CPU this
// process may use; at most one thread per kMinBytesPerThread of weights. A token reads every
// weight once, split over the threads, and each of its products (4 a layer and the logits') ends
// in the threads meeting: with less than this much to read each, the meetings cost more than
// another core's bandwidth gives (a token of the 0.8M demo model took 0.10 ms on one thread and
// 0.10-0.22 ms on two, of a 10.8M one 1.3-1.8 ms against 0.6-0.7, of GPT-2 124M 21-25 ms against
// 13-15; docs/PERF.md, "Generation").
constexpr double kMinBytesPerThread = 8.0 * 1024 * 1024;

int default_threads(size_t params, std::string& why) {
  int wanted = usable_threads();
  why = "the CPUs this process may use";
  if (const char* omp = std::getenv(env::kOmpNumThreads); omp != nullptr && *omp != '\0') {
    char* end = nullptr;
    const long n = std::strtol(omp, &end, 10);
    if (*end == '\0' && n >= 1 && n <= kMaxThreads) {
      wanted = static_cast<int>(n);
      why = env::kOmpNumThreads;
    }
  }
  const double bytes = static_cast<double>(params) * sizeof(float);
  const int useful = std::max(1, static_cast<int>(bytes / kMinBytesPerThread));
  if (wanted <= useful) return wanted;
  char text[160];
  std::snprintf(text, sizeof text, "%s gave %d; %.1f MB of weights use at most one per %.0f MiB", why.c_str(), wanted,
                bytes / 1e6, kMinBytesPerThread / (1024 * 1024));
  why = text;
  return useful;
}

GenerateOptions parse(int argc, char** argv) {
  GenerateOptions o;
  const auto count = [](const char* flag, int min, int& out) {
    return [flag, min, &out](const std::string& v) { out = static_cast<int>(parse_integer(flag, v, min, INT_MAX)); };
  };
  const std::vector<std::string> positional =
      CommandLine(kUsage, "generate --help")
          .option("--prompt", [&](const std::string& v) { o.prompt = v; })
          .option("--prompt-file", o.prompt_file)
          .option("--max-new-tokens", count("--max-new-tokens", 1, o.max_new_tokens))
          .option("--temperature", [&](const std::string& v) { o.sampling.temperature = parse_number("--temperature", v); })
          .option("--top-k", count("--top-k", 0, o.sampling.top_k))
          .option("--top-p", [&](const std::string& v) { o.sampling.top_p = parse_number("--top-p", v); })
          .option("--seed", [&](const std::string& v) { o.seed = static_cast<std::uint64_t>(parse_integer("--seed", v, 0)); })
          .option("--num-samples", count("--num-samples", 1, o.num_samples))
          .option("--stop", o.stop)
          .option("--tokenizer", o.tokenizer)
          .option("--device", o.device)
          .option("--precision", o.precision)
          .option("--threads", [&](const std::string& v) {
            o.threads = static_cast<int>(parse_integer("--threads", v, 1, kMaxThreads));
          })
          .parse(argc, argv);
  if (positional.size() != 1) {
    throw BadInput("command line: expected one MODEL, got " + std::to_string(positional.size()) +
                   " (see generate --help)");
  }
  o.model = positional[0];
  if (o.prompt && !o.prompt_file.empty()) throw BadInput("--prompt-file: give --prompt or --prompt-file, not both");
  check_command_device_flags(o.device, o.precision);
  TokenSampler(o.sampling, 0);  // checks the sampling options' ranges, naming the flag
  return o;
}

// The model's text (worker/formats/text_codec.hpp): --tokenizer, else the model's own tokenizer
// (GPT-2's vocabulary files, or for an llm.c model file the gpt2_tokenizer.bin llm.c keeps beside
// it, which decodes only, so samples start from <|endoftext|>), else bytes for a byte-level model.
TextCodec vocabulary_of(const GenerateOptions& o, const ModelFileInfo& model) {
  if (std::optional<TextCodec> tokenizer = model_tokenizer(model, o.tokenizer)) {
    if (!tokenizer->encodes()) spdlog::info("tokenizer: {}: it decodes only, so samples start from <|endoftext|>",
                                            tokenizer->name());
    return std::move(*tokenizer);
  }
  if (model.vocab_size == kByteVocabulary) return TextCodec::bytes();
  throw BadInput(model.path + ": no tokenizer comes with this model (" + std::to_string(model.vocab_size) +
                 " tokens): give --tokenizer PATH (GPT-2 vocabulary files)");
}

std::string prompt_text(const GenerateOptions& o) {
  if (o.prompt) return *o.prompt;
  if (o.prompt_file.empty()) return "";
  std::ifstream in(o.prompt_file, std::ios::binary);
  if (!in) throw BadInput("--prompt-file: cannot read " + o.prompt_file);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The generated text on stdout, each piece flushed as it comes.
class Output {
 public:
  void print(const std::string& text) {
    if (text.empty()) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    mid_line_ = text.back() != '\n';
  }

  // Before the closing log line: where stdout and stderr are both terminals (one screen, as far
  // as a program can tell) and the text stopped mid-line, a newline on stderr, so that the log
  // line starts a line of its own. stdout itself keeps exactly the continuation.
  void end_line_on_terminal() const {
    if (mid_line_ && ::isatty(STDOUT_FILENO) == 1 && ::isatty(STDERR_FILENO) == 1) std::fputc('\n', stderr);
  }

 private:
  bool mid_line_ = false;
};

struct Totals {
  std::uint64_t tokens = 0;
  double seconds = 0.0;
};

// One sample's state while its row of the decoder generates it.
struct SampleRow {
  TokenSampler sampler;
  TextStream stream;
  std::string held;  // text not yet printed: an earlier sample is still being printed
  bool done = false;
};

// Samples [first, first + decoder.rows()) of the prompt, one per row of the decoder: the prompt
// through it, then up to max_new_tokens tokens a sample, all rows one position at a time. The
// text goes to stdout in the samples' order, each under its header when there are several: the
// lowest-numbered unfinished sample's as soon as it makes whole characters, the others' held
// until their turn. So stdout is the same whether the samples ran one after another or side by
// side; rows that finished early carry on with their last token until all have.
// Each row draws from a generator of its own, so the rows draw side by side on `team` where there
// is one, and what each draws does not depend on it: a draw over GPT-2's vocabulary takes 25 to
// 200 us of one core, 16 of them in a row about the GPU's step of 16 or more. On a GPU in bf16
// each member also converts its rows' logits to floats (StepLogits).
void generate_rows(TokenDecoder& decoder, int first, const TextCodec& vocab, const std::vector<std::int32_t>& prompt,
                   const GenerateOptions& o, ThreadTeam* team, Output& out, Totals& totals) {
  const int rows = decoder.rows();
  const std::int32_t eot = vocab.end_of_text().value_or(-1);  // bytes: none ends a sample
  std::vector<SampleRow> samples;
  for (int r = 0; r < rows; ++r) {
    samples.push_back({.sampler = TokenSampler(o.sampling, sample_seed(o.seed, first + r)),
                       .stream = TextStream(o.stop),
                       .held = {},
                       .done = false});
  }
  const auto row = [&](int r) -> SampleRow& { return samples[static_cast<size_t>(r)]; };
  int printing = 0;  // the row whose text goes straight to stdout
  const auto header = [&](int r) {
    if (o.num_samples == 1) return;
    out.print((first + r > 0 ? "\n" : "") + std::string("--- sample ") + std::to_string(first + r + 1) + " of " +
              std::to_string(o.num_samples) + " ---\n");
  };
  const auto emit = [&](int r, const std::string& text) {
    if (r == printing) {
      out.print(text);
    } else {
      row(r).held += text;
    }
  };
  const auto finish = [&](int r) {
    SampleRow& s = row(r);
    emit(r, s.stream.finish());
    s.done = true;
    while (printing < rows && row(printing).done) {
      if (++printing == rows) break;
      header(printing);
      out.print(row(printing).held);
      row(printing).held.clear();
    }
  };

  header(0);
  decoder.reset();
  std::vector<std::int32_t> next;
  for (int r = 0; r < rows; ++r) next.insert(next.end(), prompt.begin(), prompt.end());
  StepLogits logits = decoder.append(next);
  next.assign(static_cast<size_t>(rows), prompt.back());
  std::vector<std::int32_t> drawn(static_cast<size_t>(rows));
  std::vector<std::exception_ptr> failed(static_cast<size_t>(rows));  // a team's member must not throw
  const std::function<void(size_t, size_t)> draw = [&](size_t first_row, size_t last_row) {  // built once, not per token
    for (size_t r = first_row; r < last_row; ++r) {
      if (samples[r].done) continue;
      try {
        drawn[r] = samples[r].sampler.next(logits.row(static_cast<int>(r)));
      } catch (...) {
        failed[r] = std::current_exception();
      }
    }
  };
  const auto start = std::chrono::steady_clock::now();
  for (int n = 0; n < o.max_new_tokens; ++n) {
    if (team != nullptr) {
      team->split(static_cast<size_t>(rows), 1, 1, draw);
    } else {
      draw(0, static_cast<size_t>(rows));
    }
    bool any = false;  // a row still generating after this token
    for (int r = 0; r < rows; ++r) {
      SampleRow& s = row(r);
      if (s.done) continue;
      if (failed[static_cast<size_t>(r)]) std::rethrow_exception(failed[static_cast<size_t>(r)]);
      const std::int32_t token = drawn[static_cast<size_t>(r)];
      ++totals.tokens;
      next[static_cast<size_t>(r)] = token;
      if (token != eot) emit(r, s.stream.push(vocab.decode(std::span(&token, 1))));
      if (token == eot || s.stream.stopped()) {
        finish(r);
      } else {
        any = true;
      }
    }
    if (!any || n + 1 == o.max_new_tokens) break;
    logits = decoder.append(next);
  }
  for (int r = 0; r < rows; ++r) {
    if (!row(r).done) finish(r);
  }
  totals.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Where the tokens are computed: the CPU's KV-cached decoder on the model's weights, or GPT's
// forward and steps (GptDecoder) on the model loaded on a GPU.
struct DecoderPlace {
  DeviceChoice device;
  std::optional<ParamLayout> cpu_layout;  // on the CPU, where the decoder reads the weights straight from the file
  std::unique_ptr<LoadedModel> loaded;  // on a GPU
  int rows = 1;                         // samples side by side
};

int wanted_rows(const GenerateOptions& o) { return std::min(o.num_samples, kMaxSampleRows); }

// On the CPU: one copy of the fp32 weights (the decoder's; the file is read straight into it) and
// the samples side by side whose caches (2 L T C floats a sample: GPT-2 124M's 75 MB, GPT-2 XL's
// 630 MB) fit in a quarter of the memory this process may use (a container's or a job's limit
// where there is one) and beside the weights. BadInput naming --device where not even one
// sample's fits: the kernel's out-of-memory killer would otherwise end the process unexplained.
int cpu_rows(const GenerateOptions& o, const ModelFileInfo& model, const ParamLayout& layout) {
  const ModelDims& dims = layout.dims();
  const double cache = static_cast<double>(KvDecoder::cache_bytes_per_row(dims));
  const double memory = static_cast<double>(usable_memory_bytes());
  if (memory <= 0) return wanted_rows(o);  // not known: nothing to hold it to
  const double weights = static_cast<double>(layout.total() * sizeof(float));
  if (weights + cache > memory) {
    throw BadInput("--device: " + host_memory_words(static_cast<size_t>(memory)) + model.path + " (" +
                   std::to_string(dims.L) + " x " + std::to_string(dims.C) + ", vocabulary " + std::to_string(dims.V) +
                   ") needs " + format_bytes(static_cast<size_t>(weights)) + " of fp32 weights and " +
                   format_bytes(static_cast<size_t>(cache)) + " of KV cache for one sample on the CPU" +
                   kHostMemoryAdvice);
  }
  const double fit = std::min(memory / 4, memory - weights) / cache;
  return std::clamp(static_cast<int>(std::min(fit, static_cast<double>(kMaxSampleRows))), 1, wanted_rows(o));
}

DecoderPlace place_decoder(const GenerateOptions& o, const ModelFileInfo& model) {
  const auto cpu_is_fp32 = [&] {
    return BadInput("--precision: \"" + o.precision + "\" needs a GPU; generation on the CPU is fp32 (its KV cache)");
  };
  // The device first: on the CPU any precision but fp32 gets generate's own line (the job's words
  // for tf32 there point at bf16, which the CPU's decoder cannot do either).
  DecoderPlace place;
  const DeviceProbe probe = DeviceProbe::of_this_machine();
  place.device = choose_command_device(o.device, "auto", "generating", probe);
  if (place.device.cuda == nullptr) {
    if (o.precision != "auto" && o.precision != "fp32") throw cpu_is_fp32();
    place.cpu_layout.emplace(dims_of(model));
    place.rows = cpu_rows(o, model, *place.cpu_layout);
    return place;
  }
  if (o.precision != "auto") place.device = choose_command_device(o.device, o.precision, "generating", probe);
  // Before anything is allocated there: the samples side by side that the GPU's memory takes.
  place.rows = fit_command_batch(place.device, spec_of(model, model.n_positions), wanted_rows(o), 1, ModelUse::kDecoding);
  try {
    place.loaded =
        std::make_unique<LoadedModel>(model, model.n_positions, place.rows, place.device, ModelUse::kDecoding);
  } catch (const std::invalid_argument& e) {  // a shape the GPU's kernels do not take
    throw BadInput(model.path + ": " + e.what());
  }
  return place;
}

}  // namespace

int run_generate(int argc, char** argv) {
  init_logging("");
  GenerateOptions o;
  ModelFileInfo model;
  TextCodec vocab;
  std::vector<std::int32_t> prompt;
  DecoderPlace place;
  try {
    o = parse(argc, argv);
    model = open_model_argument(o.model);
    vocab = vocabulary_of(o, model);
    const std::string text = prompt_text(o);
    if (!text.empty() && !vocab.encodes()) {
      throw BadInput(std::string(o.prompt ? "--prompt" : "--prompt-file") + ": " + vocab.name() +
                     " decodes only: give --tokenizer PATH (GPT-2 vocabulary files) to encode a prompt");
    }
    prompt = vocab.prompt_tokens(text);
    if (static_cast<int>(prompt.size()) >= model.n_positions) {
      throw BadInput(std::string(o.prompt ? "--prompt" : "--prompt-file") + ": " + std::to_string(prompt.size()) +
                     " tokens, but the model's context is " + std::to_string(model.n_positions) +
                     ": at most " + std::to_string(model.n_positions - 1) + " leave room to generate");
    }
    place = place_decoder(o, model);
  } catch (const std::bad_alloc&) {  // on the CPU nothing is allocated yet
    std::fprintf(stderr, "error: out of GPU memory for the model %s\n", o.model.c_str());
    return exit_code::kRuntimeFailure;
  } catch (const std::exception& e) {  // everything so far is about the input
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kBadInput;
  }
  const ParamLayout& layout = place.cpu_layout ? *place.cpu_layout : place.loaded->layout;
  // On the CPU the decoder's threads (not OpenBLAS's), which also draw the rows side by side; on a
  // GPU a team of its own draws them. One thread a row at most.
  std::string threads_from = "--threads";
  const int cpu_threads =
      place.cpu_layout ? (o.threads > 0 ? o.threads : default_threads(layout.total(), threads_from)) : 0;
  const int draw_threads =
      std::min(place.rows, place.cpu_layout ? cpu_threads : (o.threads > 0 ? o.threads : usable_threads()));
  spdlog::info("generating from {} ({:.2f}M parameters, context {}): prompt {} tokens, {} sample(s) of up to {} tokens{}",
               describe(model), static_cast<double>(layout.total()) / 1e6, model.n_positions, prompt.size(),
               o.num_samples, o.max_new_tokens,
               place.rows > 1 ? ", " + std::to_string(place.rows) + " side by side, drawn on " +
                                    std::to_string(draw_threads) + (draw_threads == 1 ? " thread" : " threads")
                              : std::string());
  // The decoder, and the device line.
  std::optional<KvDecoder> kv;
  if (place.cpu_layout) {
    log_device_line(place.device, place.device.where + "; fp32; " + std::to_string(cpu_threads) +
                                      (cpu_threads == 1 ? " thread (" : " threads (") + threads_from + ")");
    try {
      kv.emplace(layout, [&](float* params) { import_model(model, layout, params); }, cpu_threads, place.rows);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr,
                   "error: out of memory for the decoder of %s: %.0f MB of weights and %.0f MB of caches for %d "
                   "sample(s) side by side\n",
                   o.model.c_str(), static_cast<double>(layout.total()) * sizeof(float) / 1e6,
                   static_cast<double>(KvDecoder::cache_bytes_per_row(layout.dims())) * place.rows / 1e6, place.rows);
      return exit_code::kRuntimeFailure;
    } catch (const std::exception& e) {  // the file's data: import_model checks it as it reads
      std::fprintf(stderr, "error: %s\n", e.what());
      return exit_code::kBadInput;
    }
  } else {
    log_device_line(place.device, place.device.summary);
  }
  if (place.rows < wanted_rows(o)) {
    spdlog::info("{} sample{} side by side: as many as {}", place.rows, place.rows == 1 ? "" : "s",
                 kv ? "a quarter of the memory this process may use holds caches for"
                    : "the free memory of " + place.device.gpu_memory.name + " takes");
  }
  Output out;
  try {
    Totals totals;
    std::optional<GptDecoder> on_gpu;
    std::optional<ThreadTeam> gpu_draws;
    if (!kv && draw_threads > 1) gpu_draws.emplace(draw_threads);
    ThreadTeam* draws = kv ? &kv->team() : gpu_draws ? &*gpu_draws : nullptr;
    for (int first = 0; first < o.num_samples; first += place.rows) {
      const int rows = std::min(place.rows, o.num_samples - first);
      if (kv && kv->rows() != rows) kv->set_rows(rows);
      if (!kv && (!on_gpu || on_gpu->rows() != rows)) on_gpu.emplace(place.loaded->gpt, rows);
      TokenDecoder& decoder = kv ? static_cast<TokenDecoder&>(*kv) : *on_gpu;
      generate_rows(decoder, first, vocab, prompt, o, draws, out, totals);
    }
    out.end_line_on_terminal();
    spdlog::info("generated {} tokens in {:.2f} s: {:.1f} tokens/s", totals.tokens, totals.seconds,
                 totals.seconds > 0 ? static_cast<double>(totals.tokens) / totals.seconds : 0.0);
  } catch (const std::exception& e) {
    out.end_line_on_terminal();
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::kRuntimeFailure;
  }
  return 0;
}

}  // namespace xtrain
