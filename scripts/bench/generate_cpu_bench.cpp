// Per-token time of `xtrain-worker generate`'s decoder (worker/cpu/kv_decoder.hpp) on --threads
// threads (1 unless given) on GPT-2 124M's shape with random weights, fp32, next to the floor that
// reading the weights once per token sets at this machine's memory bandwidth on as many threads,
// measured in the same run (scripts/bench/generate_cpu.py runs it next to PyTorch).
//
// A prompt of --prompt tokens, then --new tokens one at a time (greedy), --runs times; prints one
// JSON line: the median per-token time of the decode (wall, and the calling thread's CPU time),
// the prompt's time, the bandwidth (the best of several passes reading a buffer larger than the
// last-level cache, in huge pages as the decoder's weights, split over the threads as the
// decoder's products are), the bytes each token reads (every weight but wpe, of which one row) and
// the greedy tokens (the peer's check). On one thread the ratio to the floor takes CPU time on
// both sides (waiting for a core on a shared machine is left out, stalls on memory are not); on
// several, wall time on both (one thread's CPU time no longer measures the work). With --out DIR
// it writes the weights (params.bin, our flat layout) and config.json for the PyTorch side.
// --decoder gpt times GPT's own decoder on the CPU backend instead (worker/model/gpt_decoder.hpp:
// the trainer's samples on CPU ranks; its products through OpenBLAS on as many threads), in fp32.
// --rows N (kv only) runs N sequences of the same prompt side by side, as generate's samples: a
// step is a token of each (row 0's greedy, row r's r ids past its greedy one, so that they part),
// and the per-token times, the bytes read and the floor are a step's over N (the weights are read
// once a step; the rows' own KV caches, a few percent of that at these prompts, are left out).
#include <cblas.h>
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "scripts/bench/bench_options.hpp"
#include "worker/cpu/huge_page_buffer.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/cpu/kv_decoder.hpp"
#include "worker/cpu/openblas_core.hpp"
#include "worker/cpu/thread_team.hpp"
#include "worker/model/gpt_decoder.hpp"
#include "worker/model/param_layout.hpp"

using namespace xtrain;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double wall_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// This thread's CPU time, s: on a machine shared with other work it leaves out the time the
// thread waited for a core (a stall on memory still counts: it is the work's).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Read bandwidth, bytes/s, over the team's threads: the best of `passes` sums over `bytes` of
// memory, each member summing its share (8 independent 256-bit accumulators, so the loads, not
// the adds, set the pace). Timed in the calling thread's CPU time on one thread, in wall time on
// several.
double read_bandwidth(size_t bytes, int passes, ThreadTeam& team) {
  HugePageBuffer buffer(bytes / sizeof(float));  // the decoder's kind of memory
  const bool one = team.members() == 1;
  double best = 0.0;
  std::vector<float> sinks(static_cast<size_t>(team.members()));
  for (int p = 0; p < passes; ++p) {
    const double t0 = one ? thread_cpu_s() : wall_s();
    team.run([&](int member, int members) {
      const TeamShare share = team_share(static_cast<int>(buffer.size() / 64), member, members);
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      const float* x = buffer.data();
      for (int block = share.first; block < share.last; ++block) {
        for (int k = 0; k < 8; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(x + 64 * block + 8 * k));
      }
      float lanes[8];
      for (auto& a : acc) {
        _mm256_storeu_ps(lanes, a);
        for (float v : lanes) sinks[static_cast<size_t>(member)] += v;
      }
    });
    const double s = (one ? thread_cpu_s() : wall_s()) - t0;
    best = std::max(best, static_cast<double>(bytes) / s);
  }
  for (float v : sinks) {
    if (v == 42.0f) std::fprintf(stderr, " ");  // keeps the sums alive
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  if (const std::string line = choose_openblas_core(argv); !line.empty()) spdlog::info("{}", line);
  bench::BenchShape shape{12, 12, 768, 1024, 50257, 1, 0, 0};
  int prompt_tokens = 64, new_tokens = 256, runs = 3, threads = 1, rows = 1;
  std::string out, decoder_name = "kv";
  bench::parse_bench_flags("xtrain-bench-generate", argc, argv, shape, [&](int& i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    if (a == "--prompt") prompt_tokens = std::atoi(argv[++i]);
    else if (a == "--new") new_tokens = std::atoi(argv[++i]);
    else if (a == "--runs") runs = std::atoi(argv[++i]);
    else if (a == "--threads") threads = std::atoi(argv[++i]);
    else if (a == "--out") out = argv[++i];
    else if (a == "--decoder") decoder_name = argv[++i];
    else if (a == "--rows") rows = std::atoi(argv[++i]);
    else return false;
    return true;
  }, "[--prompt N (64)] [--new N (256)] [--runs N (3)] [--threads N (1)] [--out DIR] [--decoder kv|gpt (kv)] [--rows N (1)]");
  if (decoder_name != "kv" && decoder_name != "gpt") throw std::invalid_argument("--decoder: expected kv or gpt");
  if (rows < 1 || (rows > 1 && decoder_name != "kv")) throw std::invalid_argument("--rows: at least 1, and above 1 only with --decoder kv");
  const ParamLayout layout(ModelDims::from(shape.model()));
  const ModelDims& d = layout.dims();
  std::vector<float> params(layout.total());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& x : params) x = normal(rng);
  std::fill(params.begin() + static_cast<long>(layout.wte() + static_cast<size_t>(d.V) * d.C),
            params.begin() + static_cast<long>(layout.wte() + static_cast<size_t>(d.Vp) * d.C), 0.0f);
  const std::vector<int32_t> prompt = test::random_tokens(static_cast<size_t>(prompt_tokens), d.V, 3);

  if (!out.empty()) {
    std::ofstream(out + "/params.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
    nlohmann::json layout_json = nlohmann::json::array();
    for (const ParamTensor& t : layout.tensors()) layout_json.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});
    const nlohmann::json config = {{"model", {{"n_layer", d.L}, {"n_head", d.NH}, {"n_embd", d.C}, {"seq_len", d.T}, {"vocab_size", d.V}}},
                                   {"layout", layout_json}, {"prompt", prompt}, {"new_tokens", new_tokens}};
    std::ofstream(out + "/config.json") << config.dump();
  }

  double bandwidth = 0.0;
  {
    ThreadTeam team(threads);  // gone before the decoder starts its own
    bandwidth = read_bandwidth(size_t{512} << 20, 5, team);
  }
  // A step reads the weights once for all its rows: each token's share is 1/rows of them.
  const double read_bytes = static_cast<double>((layout.total() - static_cast<size_t>(d.T - 1) * d.C) * sizeof(float)) /
                            static_cast<double>(rows);
  const double floor_ms = 1000.0 * read_bytes / bandwidth;

  // GPT's decoder: the model built for decoding (as generate's) on the CPU backend, OpenBLAS on `threads`.
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<GPT> gpt;
  std::unique_ptr<TokenDecoder> decoder_owner;
  if (decoder_name == "gpt") {
    openblas_set_num_threads(threads);
    backend = std::make_unique<CpuBackend>(Precision::fp32);
    gpt = std::make_unique<GPT>(shape.model(), *backend, 1, ModelUse::kDecoding);
    gpt->set_params(params.data());
    decoder_owner = std::make_unique<GptDecoder>(*gpt);
  } else {
    decoder_owner = std::make_unique<KvDecoder>(layout, params, threads, rows);
  }
  TokenDecoder& decoder = *decoder_owner;
  std::vector<double> per_token_ms, per_token_cpu_ms, prompt_ms;
  std::vector<int32_t> generated;
  for (int r = 0; r < runs; ++r) {
    decoder.reset();
    generated.clear();
    std::vector<int32_t> next;
    for (int row = 0; row < rows; ++row) next.insert(next.end(), prompt.begin(), prompt.end());
    auto t0 = Clock::now();
    StepLogits logits = decoder.append(next);
    prompt_ms.push_back(1000.0 * seconds_since(t0));
    t0 = Clock::now();
    const double cpu0 = thread_cpu_s();
    for (int n = 0; n < new_tokens; ++n) {
      next.resize(static_cast<size_t>(rows));
      // Row 0 greedy; row r the token r ids past its greedy one, so that the rows part after the
      // prompt as sampled ones do (rows with the same window are computed once).
      for (int row = 0; row < rows; ++row) {
        const std::span<const float> l = logits.row(row);
        const auto best = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        next[static_cast<size_t>(row)] = (best + row) % d.V;
      }
      generated.push_back(next[0]);
      logits = decoder.append(next);
    }
    per_token_ms.push_back(1000.0 * seconds_since(t0) / (new_tokens * rows));
    per_token_cpu_ms.push_back(1000.0 * (thread_cpu_s() - cpu0) / (new_tokens * rows));
  }
  const double cpu_ms = median(per_token_cpu_ms), wall_ms = median(per_token_ms);
  const double timed_ms = threads == 1 ? cpu_ms : wall_ms;  // what the floor is compared with
  const nlohmann::json result = {
      {"impl", decoder_name == "kv" ? "xtrain" : "xtrain (GPT decoder)"}, {"threads", threads}, {"rows", rows}, {"timing", threads == 1 ? "cpu" : "wall"}, {"openblas_core", openblas_get_corename()},
      {"params", layout.total()}, {"prompt_tokens", prompt_tokens}, {"new_tokens", new_tokens}, {"runs", runs},
      {"ms_per_token", wall_ms}, {"cpu_ms_per_token", cpu_ms}, {"timed_ms_per_token", timed_ms}, {"cpu_ms_per_token_runs", per_token_cpu_ms},
      {"prompt_ms", median(prompt_ms)},
      {"bandwidth_gb_s", bandwidth / 1e9}, {"bytes_per_token", read_bytes},
      {"floor_ms_per_token", floor_ms}, {"vs_floor", timed_ms / floor_ms}, {"tokens", generated}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
