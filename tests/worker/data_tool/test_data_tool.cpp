// xtrain-data end to end: corpora through the real tool, read back with the worker's token source
// and decoded; nanoGPT's token files copied unchanged; the same shards whatever the thread count or
// chunk size, and run after run; bad input (JSON Lines lines, fields, vocabularies, output
// directories, token files, what is not text) as one line and exit 2 with nothing left behind; a run
// killed mid-write leaves no shard a training run would pick up.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <span>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/number_format.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/test_files.hpp"
#include "worker/data/token_source.hpp"

using namespace xtrain;
using test::ScratchDir;
using test::write_bytes;
namespace fs = std::filesystem;

namespace {

const std::string kTool = std::string(XTRAIN_BIN_DIR) + "/xtrain-data";

const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer t = Gpt2Tokenizer::load(test::gpt2_openai_dir());
  return t;
}

struct Result {
  int code;
  std::string err;  // stderr
};

// Runs xtrain-data with `args`, and the GPT-2 vocabulary unless told not to.
Result run_tool(const std::string& args, bool with_vocab = true) {
  ScratchDir tmp;
  const std::string vocab = with_vocab ? " --vocab " + test::shell_quote(test::gpt2_openai_dir()) : "";
  const int status =
      std::system((test::shell_quote(kTool) + vocab + " " + args + " 2>" + test::shell_quote(tmp / "err")).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), test::read_bytes(tmp / "err")};
}

std::vector<std::int32_t> read_tokens(const std::string& pattern) {
  const TokenSource source(pattern, "data.train");
  std::vector<std::int32_t> tokens(source.size());
  source.copy(0, source.size(), tokens.data());
  return tokens;
}

// The documents in a split's token stream "EOT doc EOT doc ... EOT doc EOT": every document is
// preceded by an EOT (llm.c's layout) and the last one is closed by one too.
std::vector<std::string> documents_of(const std::vector<std::int32_t>& tokens) {
  std::vector<std::string> docs;
  REQUIRE(tokens.size() >= 2);
  REQUIRE(tokens.front() == gpt2().eot());
  REQUIRE(tokens.back() == gpt2().eot());
  for (const std::int32_t t : std::span(tokens).first(tokens.size() - 1)) {
    if (t == gpt2().eot()) {
      docs.emplace_back();
    } else {
      docs.back() += gpt2().decode_token(t);
    }
  }
  return docs;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// A few megabytes of text with long lines and multi-byte characters.
std::string generated_text(int lines, int seed) {
  std::string text;
  for (int i = 0; i < lines; ++i) {
    text += "Line " + std::to_string(i * seed) + ": it's the caf\u00e9's \u4e2d\u6587 text, don't   worry";
    for (int j = 0; j < i % 7; ++j) text += " more words here";
    text += (i % 5 == 0) ? "\n\n" : "\n";
  }
  return text;
}

// nanoGPT's prepare.py layout: bare little-endian uint16 ids (numpy's), each document closed by EOT.
void write_nanogpt_tokens(const std::string& path, const std::vector<std::int32_t>& tokens) {
  std::string bytes;
  for (const std::int32_t t : tokens) bytes += {static_cast<char>(t & 0xFF), static_cast<char>(t >> 8)};
  write_bytes(path, bytes);
}

std::vector<std::int32_t> nanogpt_tokens(int documents, int seed) {
  std::vector<std::int32_t> tokens;
  for (int d = 0; d < documents; ++d) {
    gpt2().encode(generated_text(40 + d, seed + d), tokens);
    tokens.push_back(gpt2().eot());
  }
  return tokens;
}

}  // namespace

TEST_CASE("text files become shards that decode to the documents, each between EOTs", "[data_tool]") {
  ScratchDir dir;
  fs::create_directories(dir / "in/sub");
  fs::create_directories(dir / "in/.hidden");
  const std::vector<std::pair<std::string, std::string>> docs = {
      {"in/a.txt", "First document.\nIt has two lines.\n"},
      {"in/b.txt", generated_text(200, 3)},  // spans many chunks of --chunk-bytes 256
      {"in/sub/c.txt", "Third, with <|endoftext|> inside: that is text, not a token.\n"},
      {"in/sub/d.txt", "caf\u00e9  \u00a0 \xff\xfe invalid UTF-8 survives"},
  };
  for (const auto& [name, text] : docs) write_bytes(dir / name, text);
  write_bytes(dir / "in/empty.txt", "");              // empty: left out
  write_bytes(dir / "in/.hidden/x.txt", "skipped");   // hidden: skipped
  write_bytes(dir / "in/.dotfile", "skipped");

  const Result r = run_tool("--out " + dir / "out" + " --prefix corpus --val-tokens 10 --shard-tokens 500 --chunk-bytes 256 " +
                            dir / "in");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("wrote " + dir / "out" + ": val 1 shard"));

  const std::vector<std::int32_t> val = read_tokens(dir / "out/corpus_val_*.bin");
  const std::vector<std::int32_t> train = read_tokens(dir / "out/corpus_train_*.bin");
  // The first document, whole, is the validation split (it reaches 10 tokens); the rest is training.
  CHECK(documents_of(val) == std::vector<std::string>{docs[0].second});
  CHECK(documents_of(train) == std::vector<std::string>{docs[1].second, docs[2].second, docs[3].second});

  // Shards: one index across both splits, every training shard but the last exactly full.
  const std::vector<std::string> names = files_in(dir / "out");
  REQUIRE(names.size() >= 3);
  CHECK(names.back() == "corpus_val_000000.bin");
  CHECK(names.front() == "corpus_train_000001.bin");
  for (std::size_t i = 0; i + 2 < names.size(); ++i) {
    CHECK(TokenSource(dir / "out" + "/" + names[i], "data.train").size() == 500);
  }
  // Each header records the shard's largest token (TokenSource checks it against the tokens).
  for (const std::string& name : names) {
    const std::vector<std::int32_t> tokens = read_tokens(dir / "out" + "/" + name);
    CHECK(inspect_token_file(dir / "out" + "/" + name, "data.train").max_token ==
          *std::max_element(tokens.begin(), tokens.end()));
  }
  CHECK(files_in(dir.path()) == std::vector<std::string>{"in", "out"});  // no staging directory left

  // The trainer's loader takes them as the spec would name them.
  DataSpec data;
  data.train = dir / "out/corpus_train_*.bin";
  data.val = dir / "out/corpus_val_*.bin";
  ModelSpec model;
  model.seq_len = 8;
  model.vocab_size = 50257;
  const DataSplit split = load_data(data, model, /*need_val=*/true);
  CHECK(split.train.count == train.size());
  CHECK(split.val.count == val.size());
  CHECK_FALSE(split.byte_level);
}

TEST_CASE("JSON Lines: each line's field is a document, blank lines and empty texts are skipped", "[data_tool]") {
  ScratchDir dir;
  const std::vector<std::string> texts = {"Hello there.", "Line two\nhas a newline and \u00e9\u00e8 \U0001F600",
                                          "<|endoftext|> is just text here", "last"};
  std::string jsonl;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    jsonl += nlohmann::json{{"id", i}, {"content", texts[i]}}.dump() + "\n";
    if (i == 1) jsonl += "\n   \n" + nlohmann::json{{"content", ""}}.dump() + "\r\n";
  }
  write_bytes(dir / "a.jsonl", jsonl);
  const Result r = run_tool("--out " + dir / "out" + " --jsonl-field content --val-tokens 0 " + dir / "a.jsonl");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(files_in(dir / "out") == std::vector<std::string>{"out_train_000000.bin"});
  const std::vector<std::int32_t> tokens = read_tokens(dir / "out/out_train_*.bin");
  CHECK(documents_of(tokens) == texts);
  CHECK(std::count(tokens.begin(), tokens.end(), gpt2().eot()) == static_cast<std::ptrdiff_t>(texts.size() + 1));
}

TEST_CASE("the shards are the same for every thread count and chunk size, and run after run", "[data_tool]") {
  ScratchDir dir;
  fs::create_directories(dir / "in");
  for (int f = 0; f < 6; ++f) write_bytes(dir / ("in/" + std::to_string(f) + ".txt"), generated_text(3000 + 500 * f, f + 1));
  const std::string common = " --prefix p --val-tokens 20000 --shard-tokens 100000 --quiet " + dir / "in";
  REQUIRE(run_tool("--out " + dir / "one" + " --threads 1" + common).code == 0);
  REQUIRE(run_tool("--out " + dir / "three" + " --threads 3 --chunk-bytes 4099" + common).code == 0);
  REQUIRE(run_tool("--out " + dir / "again" + " --threads 2 --chunk-bytes 65536" + common).code == 0);
  const std::vector<std::string> names = files_in(dir / "one");
  REQUIRE(names.size() > 3);
  CHECK(files_in(dir / "three") == names);
  CHECK(files_in(dir / "again") == names);
  for (const std::string& n : names) {
    INFO(n);
    CHECK(test::read_bytes(dir / "three/" + n) == test::read_bytes(dir / "one/" + n));
    CHECK(test::read_bytes(dir / "again/" + n) == test::read_bytes(dir / "one/" + n));
  }
  // Writing into an existing output replaces it as a whole: no shard of the old set survives.
  REQUIRE(run_tool("--out " + dir / "one" + " --prefix p --val-tokens 0 --shard-tokens 100000000 --quiet " + dir / "in/0.txt").code == 0);
  CHECK(files_in(dir / "one") == std::vector<std::string>{"p_train_000000.bin"});
}

TEST_CASE("a broken JSON line, a missing or wrong field: file and line named, exit 2, nothing written", "[data_tool]") {
  ScratchDir dir;
  write_bytes(dir / "ok.jsonl", "{\"text\": \"fine\"}\n");
  REQUIRE(run_tool("--out " + dir / "out" + " --jsonl-field text --val-tokens 0 " + dir / "ok.jsonl").code == 0);
  const std::string before = test::read_bytes(dir / "out/out_train_000000.bin");

  const auto fails = [&](const std::string& jsonl, const std::string& message) {
    write_bytes(dir / "bad.jsonl", jsonl);
    const Result r = run_tool("--out " + dir / "out" + " --jsonl-field text --val-tokens 0 --chunk-bytes 16 " +
                              dir / "ok.jsonl " + dir / "bad.jsonl");
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("xtrain-data: error: " + dir / "bad.jsonl" + ":" + message));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    // The previous output is untouched, and no staging directory is left.
    CHECK(files_in(dir / "out") == std::vector<std::string>{"out_train_000000.bin"});
    CHECK(test::read_bytes(dir / "out/out_train_000000.bin") == before);
    CHECK(files_in(dir.path()) == std::vector<std::string>{"bad.jsonl", "ok.jsonl", "out"});
  };
  fails("{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"truncated\n{\"text\": \"d\"}\n",
        "3: not valid JSON at column 20: syntax error while parsing value - invalid string: missing closing quote");
  fails("{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n", "3: no field \"text\"");
  fails("{\"text\": 5}\n", "1: field \"text\" is number, expected a string");
  fails("[\"text\"]\n", "1: expected a JSON object, got array");
}

TEST_CASE("without --val-tokens a small corpus gives a tenth to validation and says so", "[data_tool]") {
  ScratchDir dir;
  fs::create_directories(dir / "in");
  for (const char* name : {"a.txt", "b.txt", "c.txt"}) write_bytes(dir / ("in/" + std::string(name)), std::string(1000, 'x') + " words");
  const Result r = run_tool("--out " + dir / "out --quiet " + dir / "in");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("xtrain-data: validation split: the first documents up to 75 tokens (default "
                                    "--val-tokens: a tenth of the input's about 754 tokens, at most --shard-tokens)"));
  CHECK_THAT(r.err, Catch::Contains("val 1 shard") && Catch::Contains("1 document; train 1 shard"));
}

TEST_CASE("one text file is one document: validation is its first --val-tokens tokens, training the rest",
          "[data_tool]") {
  ScratchDir dir;
  const std::string text = generated_text(300, 5);
  write_bytes(dir / "book.txt", text);
  write_bytes(dir / "empty.txt", "");  // no document: the input is still one
  const Result r = run_tool("--out " + dir / "out --val-tokens 100 --quiet " + dir / "book.txt " + dir / "empty.txt");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("val 1 shard, 101 tokens, 1 document; train 1 shard, ") &&
                        Catch::Contains(" (the input is one document: validation is its first 100 tokens, training "
                                        "the rest)"));
  const std::vector<std::int32_t> val = read_tokens(dir / "out/out_val_*.bin");
  const std::vector<std::int32_t> train = read_tokens(dir / "out/out_train_*.bin");
  // val: EOT and the document's first 99 tokens, closed by EOT; train: the rest of it, closed by EOT.
  REQUIRE(val.size() == 101);
  CHECK(val.back() == gpt2().eot());
  CHECK(train.back() == gpt2().eot());
  std::vector<std::int32_t> whole(val.begin(), val.end() - 1);
  whole.insert(whole.end(), train.begin(), train.end() - 1);
  std::vector<std::int32_t> expected = {gpt2().eot()};
  gpt2().encode(text, expected);
  CHECK(whole == expected);
  // The cut is where it is whatever the chunks and threads.
  REQUIRE(run_tool("--out " + dir / "again --prefix out --val-tokens 100 --chunk-bytes 64 --threads 3 --quiet " +
                   dir / "book.txt").code == 0);
  CHECK(read_tokens(dir / "again/out_val_*.bin") == val);
  CHECK(read_tokens(dir / "again/out_train_*.bin") == train);
}

TEST_CASE("bad inputs, vocabularies and outputs are one error line and exit 2", "[data_tool]") {
  ScratchDir dir;
  write_bytes(dir / "a.txt", "some text");
  Result r = run_tool("--out " + dir / "out " + dir / "missing.txt");
  CHECK(r.code == 2);
  CHECK(r.err == "xtrain-data: error: " + dir / "missing.txt" + ": no such file or directory\n");

  write_bytes(dir / "one.jsonl", "{\"text\": \"a document of a few words\"}\n");
  // One JSON Lines document: the validation split takes it whole (only one text file is cut).
  r = run_tool("--out " + dir / "out --jsonl-field text --val-tokens 2 " + dir / "one.jsonl");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("tokens went to validation (--val-tokens 2), none are left to train on: give a "
                                    "smaller --val-tokens (or 0: no validation split)"));
  CHECK(files_in(dir.path()) == std::vector<std::string>{"a.txt", "one.jsonl"});

  write_bytes(dir / "x.jsonl", "{}\n");
  r = run_tool("--out " + dir / "out " + dir / "x.jsonl");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("x.jsonl: looks like JSON Lines; give --jsonl-field NAME"));

  // What is not UTF-8 text, found by its first bytes, in a directory too: nothing is written.
  fs::create_directories(dir / "corpus");
  write_bytes(dir / "corpus/a.txt", "text");
  const std::vector<std::pair<std::string, std::string>> not_text = {
      {std::string("\x1f\x8b\x08\x00", 4) + "gz", "gzip-compressed, not text: decompress it first"},
      {"\xff\xfeh\0i\0", "UTF-16 text (its byte order mark), which GPT-2's tokenizer would read as bytes of noise: "
                           "convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)"},
      {std::string(9000, 'a') + std::string("\x89PNG\0", 5), ""},  // a NUL beyond the first 8000 bytes: text
      {std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), "binary data, not text (a NUL byte at offset 8): leave it "
                                                         "out of the input"}};
  for (const auto& [bytes, why] : not_text) {
    INFO(why);
    write_bytes(dir / "corpus/b.dat", bytes);
    r = run_tool("--out " + dir / "out --val-tokens 0 --quiet " + dir / "corpus");
    CHECK(r.code == (why.empty() ? 0 : 2));
    if (!why.empty()) CHECK(r.err == "xtrain-data: error: " + dir / "corpus/b.dat" + ": " + why + "\n");
    CHECK(fs::exists(dir / "out") == why.empty());
    fs::remove_all(dir / "out");
  }
  fs::remove_all(dir / "corpus");

  fs::create_directories(dir / "mine");
  write_bytes(dir / "mine/notes.txt", "mine");
  r = run_tool("--out " + dir / "mine --val-tokens 0 " + dir / "a.txt");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("holds notes.txt, which xtrain-data did not write"));
  CHECK(files_in(dir / "mine") == std::vector<std::string>{"notes.txt"});

  r = run_tool("--out " + dir / "out --shard-tokens 0 " + dir / "a.txt");
  CHECK(r.code == 2);
  CHECK(r.err == "xtrain-data: error: command line: --shard-tokens expects an integer from 1 to 2147483647, got \"0\"\n");
  r = run_tool("--out=" + dir / "out --shard-tokens=1e9 --threads " + dir / "a.txt");
  CHECK(r.code == 2);
  CHECK(r.err == "xtrain-data: error: command line: --threads expects an integer from 1 to 1024, got \"" + dir / "a.txt" + "\"\n");

  // A vocabulary too large for uint16 tokens: 256 bytes, 65280 special tokens and <|endoftext|>.
  nlohmann::json encoder = nlohmann::json::parse(test::read_bytes(test::gpt2_openai_dir() + "/encoder.json"));
  nlohmann::json big = nlohmann::json::object();
  for (const auto& [token, id] : encoder.items()) {
    if (id.get<int>() < 256) big[token] = id;
  }
  for (int id = 256; id < 65536; ++id) big["<|s" + std::to_string(id) + "|>"] = id;
  big["<|endoftext|>"] = 65536;
  fs::create_directories(dir / "big");
  write_bytes(dir / "big/encoder.json", big.dump());
  write_bytes(dir / "big/vocab.bpe", "#version: 0.2\n");
  const int status = std::system((test::shell_quote(kTool) + " --vocab " + dir / "big --out " + dir / "out " + dir / "a.txt 2>" +
                                  dir / "err").c_str());
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(test::read_bytes(dir / "err") ==
        "xtrain-data: error: " + dir / "big/encoder.json + " + dir / "big/vocab.bpe" +
            ": 65537 tokens, but llm.c shards store tokens as uint16 (at most 65536)\n");

  r = run_tool("--out " + dir / "out --vocab " + dir / "nowhere " + dir / "a.txt");
  CHECK(r.code == 2);
  CHECK(r.err == "xtrain-data: error: " + dir / "nowhere" + ": no such file or directory\n");

  // llm.c's tokenizer file (known by its name or its magic) decodes only.
  write_bytes(dir / "big/gpt2_tokenizer.bin", "a table");
  r = run_tool("--out " + dir / "out --vocab " + dir / "big/gpt2_tokenizer.bin " + dir / "a.txt");
  CHECK(r.code == 2);
  CHECK(r.err == "xtrain-data: error: --vocab: " + dir / "big/gpt2_tokenizer.bin" +
                     " is llm.c's tokenizer file, which decodes only: give GPT-2's vocabulary files (encoder.json + "
                     "vocab.bpe, or vocab.json + merges.txt) to encode text\n");

  const std::string text = test::read_bytes(test::gpt2_openai_dir() + "/encoder.json");
  write_bytes(dir / "big/encoder.json", text.substr(0, text.size() / 2));  // truncated
  write_bytes(dir / "big/vocab.bpe", test::read_bytes(test::gpt2_openai_dir() + "/vocab.bpe"));
  r = run_tool("--out " + dir / "out --vocab " + dir / "big " + dir / "a.txt");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("xtrain-data: error: " + dir / "big/encoder.json:1: not valid JSON: "));
  CHECK(files_in(dir.path()) == std::vector<std::string>{"a.txt", "big", "err", "mine", "one.jsonl", "x.jsonl"});
}

TEST_CASE("nanoGPT's val.bin and train.bin become shards of the same tokens, each id checked", "[data_tool]") {
  ScratchDir dir;
  fs::create_directories(dir / "owt");
  const std::vector<std::int32_t> val = nanogpt_tokens(3, 11), train = nanogpt_tokens(20, 5);
  write_nanogpt_tokens(dir / "owt/val.bin", val);
  write_nanogpt_tokens(dir / "owt/train.bin", train);
  Result r = run_tool("--nanogpt " + dir / "owt --out " + dir / "shards --shard-tokens 2000", /*with_vocab=*/false);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto shards = [](std::size_t tokens) { return std::to_string((tokens + 1999) / 2000) + " shards, "; };
  const auto count = [](std::size_t tokens) { return with_thousands(static_cast<long long>(tokens)) + " tokens"; };
  CHECK_THAT(r.err, Catch::Contains("wrote " + dir / "shards from nanoGPT's " + dir / "owt: val " + shards(val.size()) +
                                    count(val.size()) + " (val.bin); train " + shards(train.size()) +
                                    count(train.size()) + " (train.bin)\n"));
  CHECK(read_tokens(dir / "shards/shards_val_*.bin") == val);
  CHECK(read_tokens(dir / "shards/shards_train_*.bin") == train);
  CHECK(files_in(dir / "shards").size() == (val.size() + 1999) / 2000 + (train.size() + 1999) / 2000);
  for (const std::string& name : files_in(dir / "shards")) {
    const std::vector<std::int32_t> tokens = read_tokens(dir / "shards/" + name);
    CHECK(inspect_token_file(dir / "shards/" + name, "data.train").max_token ==
          *std::max_element(tokens.begin(), tokens.end()));
  }

  // Without val.bin, no validation split: the trainer holds out data.val_fraction.
  fs::remove(dir / "owt/val.bin");
  r = run_tool("--nanogpt " + dir / "owt --out " + dir / "shards --quiet");
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains(": val 0 shards, 0 tokens (val.bin: none); train 1 shard"));
  CHECK(files_in(dir / "shards") == std::vector<std::string>{"shards_train_000000.bin"});
  CHECK(read_tokens(dir / "shards/shards_train_*.bin") == train);

  // What cannot be GPT-2's tokens, and options that do not apply, are one line and exit 2; nothing is written.
  const auto refused = [&](const std::string& args, const std::string& message) {
    INFO(args);
    const Result bad = run_tool(args);
    CHECK(bad.code == 2);
    CHECK(bad.err == "xtrain-data: error: " + message + "\n");
    CHECK_FALSE(fs::exists(dir / "out"));
  };
  std::vector<std::int32_t> outside = train;
  outside[1234] = 50257;
  write_nanogpt_tokens(dir / "owt/train.bin", outside);
  refused("--nanogpt " + dir / "owt --out " + dir / "out --quiet",
          dir / "owt/train.bin" + ": token 1234 is 50257, outside the vocabulary's 50257 tokens: not GPT-2 token ids "
                                  "(or not little-endian)");
  write_bytes(dir / "owt/train.bin", "odd");
  refused("--nanogpt " + dir / "owt --out " + dir / "out", dir / "owt/train.bin" + ": 3 bytes, an odd number: not "
                                                                                    "bare uint16 tokens");
  write_nanogpt_tokens(dir / "owt/train.bin", train);
  fs::copy_file(dir / "shards/shards_train_000000.bin", dir / "owt/val.bin");
  refused("--nanogpt " + dir / "owt --out " + dir / "out",
          dir / "owt/val.bin" + ": already an llm.c token shard (its header's magic is 20240520): give it to "
                                "data.train or data.val as it is");
  fs::remove(dir / "owt/val.bin");
  write_bytes(dir / "owt/meta.pkl", "pickle");
  refused("--nanogpt " + dir / "owt --out " + dir / "out",
          dir / "owt/meta.pkl" + ": a character-level vocabulary (nanoGPT's *_char datasets): its token ids are "
                                 "characters, not GPT-2's tokens; make shards of the text itself with xtrain-data "
                                 "--vocab GPT2_DIR");
  refused("--nanogpt " + dir / "shards --out " + dir / "out",
          "--nanogpt: " + dir / "shards: no train.bin (nanoGPT's prepare.py writes train.bin and val.bin)");
  refused("--nanogpt " + dir / "owt --out " + dir / "out --val-tokens 10",
          "command line: --nanogpt's splits are its files (val.bin, train.bin): no --val-tokens with it");
  refused("--nanogpt " + dir / "owt --out " + dir / "out " + dir / "owt/train.bin",
          "command line: --nanogpt DIR is the input: no INPUT with it");
}

TEST_CASE("a run killed mid-write leaves no shard a training run would pick up, and the next run cleans up", "[data_tool]") {
  ScratchDir dir;
  fs::create_directories(dir / "in");
  const std::string text = generated_text(20000, 7);  // ~1 MB
  for (int f = 0; f < 40; ++f) write_bytes(dir / ("in/" + std::to_string(100 + f) + ".txt"), text);
  const std::string staging = dir / ".out.xtrain-data-tmp";

  // SIGTERM first: the tool removes its staging directory itself. Then SIGKILL, which leaves it.
  for (const int sig : {SIGTERM, SIGKILL}) {
    INFO("signal " << sig);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string vocab = test::gpt2_openai_dir(), out = dir / "out", in = dir / "in";
      ::execl(kTool.c_str(), kTool.c_str(), "--vocab", vocab.c_str(), "--out", out.c_str(), "--val-tokens", "0",
              "--shard-tokens", "200000", "--threads", "1", "--quiet", in.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Wait until two shards are complete (the run is mid-way), then kill it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      const auto names = files_in(staging);
      if (std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.ends_with(".bin"); }) >= 2) break;
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, sig);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);

    CHECK_FALSE(fs::exists(dir / "out"));
    CHECK_THROWS_AS(TokenSource(dir / "out/out_train_*.bin", "data.train"), DataError);
    if (sig == SIGKILL) {
      // The staging directory remains, with complete shards only (the one being written is .partial).
      for (const std::string& n : files_in(staging)) {
        INFO(n);
        if (n.ends_with(".bin")) CHECK(TokenSource(staging + "/" + n, "data.train").size() == 200000);
        else CHECK(n.ends_with(".bin.partial"));
      }
    } else {
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
      CHECK_FALSE(fs::exists(staging));
    }
  }
  // The next run removes what the killed one left and completes.
  const Result r = run_tool("--out " + dir / "out --val-tokens 0 --shard-tokens 200000 --quiet " + dir / "in/100.txt");
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("removing " + staging + ", left by an interrupted run"));
  CHECK_FALSE(fs::exists(staging));
  CHECK(documents_of(read_tokens(dir / "out/out_train_*.bin")) == std::vector<std::string>{text});
}
