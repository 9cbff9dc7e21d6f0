// Token sources (text, llm.c shards, globs), the validation split, and the batch sampler's
// determinism, sharding across ranks and resumable state.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "tests/worker/test_files.hpp"
#include "worker/data/batch_sampler.hpp"
#include "worker/data/token_source.hpp"

using namespace xtrain;
using xtrain::test::error_message;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;

namespace {

// An llm.c token shard; magic, version and the header's count can be made wrong on purpose, and
// `max_token` >= 0 is recorded as the largest token (as xtrain-data records it).
void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens, std::int32_t magic = kShardMagic,
                 std::int32_t version = kShardVersion, std::int64_t header_count = -1, std::int32_t max_token = -1) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(header_count >= 0 ? header_count : static_cast<std::int64_t>(tokens.size()));
  if (max_token >= 0) {
    header[kShardMaxTokenWord] = kShardMaxTokenTag;
    header[kShardMaxTokenWord + 1] = max_token;
  }
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  write_bytes(path, bytes);
}

std::vector<std::uint16_t> iota_tokens(size_t n, std::uint16_t first) {
  std::vector<std::uint16_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<std::int32_t> all_tokens(const TokenSpan& span) {
  std::vector<std::int32_t> out(span.count);
  span.copy(0, span.count, out.data());
  return out;
}

TokenSpan whole(const std::string& pattern) {
  auto s = std::make_shared<const TokenSource>(pattern, "data.train");
  return {s, 0, s->size()};
}

DataSpec data_spec(const std::string& train, const std::string& val = "", double val_fraction = 0.1) {
  DataSpec d;
  d.train = train;
  d.val = val;
  d.val_fraction = val_fraction;
  return d;
}

ModelSpec model_spec(int seq_len, int vocab_size) {
  ModelSpec m;
  m.seq_len = seq_len;
  m.vocab_size = vocab_size;
  return m;
}

}  // namespace

TEST_CASE("a text file is one token per byte", "[data]") {
  ScratchDir dir;
  const std::string text = "Hello, world!\n\xc3\xa9t\xc3\xa9";  // UTF-8 bytes stay separate tokens
  write_bytes(dir / "corpus.txt", text);
  const TokenSource source(dir / "corpus.txt", "data.train");
  CHECK(source.byte_level());
  REQUIRE(source.size() == text.size());
  std::vector<std::int32_t> expected(text.begin(), text.end());
  for (auto& t : expected) t &= 0xff;
  CHECK(all_tokens({std::make_shared<const TokenSource>(dir / "corpus.txt", "data.train"), 0, text.size()}) ==
        expected);
  CHECK(expected[14] == 0xc3);
}

TEST_CASE("an llm.c shard's tokens follow its 1024-byte header", "[data]") {
  ScratchDir dir;
  const auto tokens = iota_tokens(500, 50000);  // beyond the byte range: really 16-bit
  write_shard(dir / "train.bin", tokens);
  const TokenSpan span = whole(dir / "train.bin");
  CHECK_FALSE(span.source->byte_level());
  const auto got = all_tokens(span);
  CHECK(std::equal(got.begin(), got.end(), tokens.begin(), tokens.end()));
}

TEST_CASE("a glob of shards is expanded, sorted by name and concatenated", "[data]") {
  ScratchDir dir;
  // Written out of order; each shard's tokens say where they belong.
  write_shard(dir / "shard_002.bin", iota_tokens(7, 200));
  write_shard(dir / "shard_000.bin", iota_tokens(5, 0));
  write_shard(dir / "shard_001.bin", iota_tokens(3, 100));
  write_bytes(dir / "notes.txt", "not matched by the glob");
  const TokenSpan span = whole(dir / "shard_*.bin");
  REQUIRE(span.source->files().size() == 3);
  CHECK(span.source->files()[0] == dir / "shard_000.bin");
  const std::vector<std::int32_t> expected = {0, 1, 2, 3, 4, 100, 101, 102, 200, 201, 202, 203, 204, 205, 206};
  CHECK(all_tokens(span) == expected);

  SECTION("a copy may cross file boundaries") {
    std::vector<std::int32_t> window(6);
    span.copy(3, 6, window.data());
    CHECK(window == std::vector<std::int32_t>{3, 4, 100, 101, 102, 200});
  }
}

TEST_CASE("bad data files give one-line errors naming the field and the file", "[data][errors]") {
  ScratchDir dir;
  SECTION("a missing file") {
    const std::string path = dir / "nope.bin";
    CHECK(error_message<DataError>([&] { TokenSource(path, "data.train"); }) ==
          "data.train: " + path + ": No such file or directory");
  }
  SECTION("a directory: of llm.c shards, the glob of the split's; of nanoGPT's data, how to make shards") {
    CHECK(error_message<DataError>([&] { TokenSource(dir.path(), "data.val"); }) ==
          "data.val: " + dir.path() + ": is a directory, expected a file or a glob");
    std::filesystem::create_directories(dir / "books");
    write_bytes(dir / "books/a.txt", "text");
    CHECK(error_message<DataError>([&] { TokenSource(dir / "books", "data.train"); }) ==
          "data.train: " + dir / "books" + ": is a directory, expected a file or a glob: " + dir / "books/*.txt" +
              " reads its text files as one stream of bytes, in name order; for GPT-2's tokens make llm.c token "
              "shards of them with xtrain-data");
    write_shard(dir / "fineweb_val_000000.bin", iota_tokens(10, 0));
    write_shard(dir / "fineweb_train_000001.bin", iota_tokens(10, 0));
    CHECK(error_message<DataError>([&] { TokenSource(dir.path(), "data.val"); }) ==
          "data.val: " + dir.path() + ": is a directory, expected a file or a glob: give the glob of its shards, " +
              dir / "*_val_*.bin");
    CHECK(error_message<DataError>([&] { TokenSource(dir.path(), "data.train"); }) ==
          "data.train: " + dir.path() + ": is a directory, expected a file or a glob: give the glob of its shards, " +
              dir / "*_train_*.bin");
    std::filesystem::create_directories(dir / "nanogpt");
    write_bytes(dir / "nanogpt/train.bin", std::string(20, '\x01'));
    CHECK(error_message<DataError>([&] { TokenSource(dir / "nanogpt", "data.train"); }) ==
          "data.train: " + dir / "nanogpt" + ": is a directory, expected a file or a glob; nanoGPT's train.bin and "
          "val.bin hold bare uint16 tokens without a header: make llm.c token shards of them with xtrain-data "
          "--nanogpt " + dir / "nanogpt" + " --out DIR");
  }
  SECTION("a glob matching nothing") {
    CHECK(error_message<DataError>([&] { TokenSource(dir / "*.bin", "data.train"); }) ==
          "data.train: no file matches " + dir / "*.bin");
  }
  SECTION("a glob in a directory that does not exist") {
    CHECK(error_message<DataError>([&] { TokenSource(dir / "shards/*.bin", "data.train"); }) ==
          "data.train: " + dir / "shards/*.bin" + ": the directory " + dir / "shards" + " does not exist");
  }
  SECTION("a relative path that is not there says where it was looked for") {
    const std::string cwd = std::filesystem::current_path().string();
    CHECK(error_message<DataError>([&] { TokenSource("no-such-dir/*.bin", "data.train"); }) ==
          "data.train: no-such-dir/*.bin: the directory no-such-dir does not exist (a relative path, taken from the "
          "current directory " + cwd + ")");
    CHECK(error_message<DataError>([&] { TokenSource("no-such-file.bin", "data.train"); }) ==
          "data.train: no-such-file.bin: No such file or directory (a relative path, taken from the current directory " +
              cwd + ")");
    CHECK(error_message<DataError>([&] { TokenSource("https://example.com/train.txt", "data.train"); }) ==
          "data.train: https://example.com/train.txt: No such file or directory (a URL: data are read from local "
          "files only, never downloaded: fetch it first)");
    CHECK(error_message<DataError>([&] { TokenSource("~/corpus/*.bin", "data.train"); }) ==
          "data.train: ~/corpus/*.bin: the directory ~/corpus does not exist (\"~\" is expanded by shells, not in a "
          "spec or a quoted argument: write " + std::string(std::getenv("HOME")) + "/corpus)");
    // The plan's check of the headers says the same.
    CHECK(error_message<DataError>([&] { inspect_token_file("no-such-file.bin", "data.train"); }) ==
          "data.train: no-such-file.bin: No such file or directory (a relative path, taken from the current "
          "directory " + cwd + ")");
  }
  SECTION("a .bin file without the shard magic") {
    write_shard(dir / "x.bin", iota_tokens(10, 0), 20240326);
    CHECK(error_message<DataError>([&] { TokenSource(dir / "x.bin", "data.train"); }) ==
          "data.train: " + dir / "x.bin" + ": not an llm.c token shard: magic is 20240326, expected 20240520; "
          "nanoGPT's train.bin and val.bin hold bare uint16 tokens without a header: make llm.c token shards of "
          "them with xtrain-data --nanogpt " + dir.path() + " --out DIR");
  }
  SECTION("a compressed file, which would train on noise") {
    write_bytes(dir / "enwik8.zip", std::string("PK\x03\x04\x14\x00", 6) + std::string(100, 'z'));
    write_bytes(dir / "book.txt.gz", std::string("\x1f\x8b\x08\x00", 4) + std::string(100, 'z'));
    write_bytes(dir / "shard.bin", std::string("\x1f\x8b\x08\x00", 4) + std::string(100, 'z'));  // shard.bin.gz
    CHECK(error_message<DataError>([&] { TokenSource(dir / "shard.bin", "data.train"); }) ==
          "data.train: " + dir / "shard.bin" + ": gzip-compressed: decompress it first");
    CHECK(error_message<DataError>([&] { TokenSource(dir / "enwik8.zip", "data.train"); }) ==
          "data.train: " + dir / "enwik8.zip" + ": zip-compressed: decompress it first");
    CHECK(error_message<DataError>([&] { inspect_token_file(dir / "book.txt.gz", "data.val"); }) ==
          "data.val: " + dir / "book.txt.gz" + ": gzip-compressed: decompress it first");
  }
  SECTION("a JSON Lines file, whose syntax would be read as text") {
    write_bytes(dir / "d.jsonl", "{\"text\": \"a document\"}\n");
    CHECK(error_message<DataError>([&] { TokenSource(dir / "d.jsonl", "data.train"); }) ==
          "data.train: " + dir / "d.jsonl" + ": JSON Lines, whose JSON syntax would be read as text: make llm.c token "
                                             "shards of its text field with xtrain-data --jsonl-field NAME");
  }
  SECTION("a shard of another version") {
    write_shard(dir / "x.bin", iota_tokens(10, 0), kShardMagic, 2);
    CHECK(error_message<DataError>([&] { TokenSource(dir / "x.bin", "data.train"); }) ==
          "data.train: " + dir / "x.bin" + ": llm.c token shard version is 2, expected 1 (uint16 tokens)");
  }
  SECTION("a shard whose size does not match its header") {
    write_shard(dir / "x.bin", iota_tokens(10, 0), kShardMagic, kShardVersion, 12);
    CHECK(error_message<DataError>([&] { TokenSource(dir / "x.bin", "data.train"); }) ==
          "data.train: " + dir / "x.bin" + ": size is 1044 bytes but its header's token count 12 needs 1048");
  }
  SECTION("a shard cut inside its header") {
    write_bytes(dir / "x.bin", std::string("\x88\xd8\x34\x01", 4) + std::string(100, '\0'));
    CHECK(error_message<DataError>([&] { TokenSource(dir / "x.bin", "data.train"); }) ==
          "data.train: " + dir / "x.bin" + ": truncated llm.c token shard: 104 bytes, less than its 1024-byte header");
  }
  SECTION("a glob mixing text and shards") {
    write_shard(dir / "a.bin", iota_tokens(10, 0));
    write_bytes(dir / "b.txt", "text");
    CHECK(error_message<DataError>([&] { TokenSource(dir / "*", "data.train"); }) ==
          "data.train: " + dir / "*" + ": " + dir / "a.bin" + " is an llm.c token shard but " + dir / "b.txt" +
              " is text; the files must all be of one kind");
  }
  SECTION("validation data of another kind than the training data") {
    write_shard(dir / "val.bin", iota_tokens(10, 0));
    write_bytes(dir / "train.txt", std::string(100, 't'));
    CHECK(error_message<DataError>([&] {
            load_data(data_spec(dir / "train.txt", dir / "val.bin"), model_spec(4, 256), true);
          }) == "data.val: " + dir / "val.bin" + " is llm.c token shards but data.train (" + dir / "train.txt" +
                    ") is text; validate on the same kind of tokens");
  }
  SECTION("validation files that data.train takes too, among others, by any name") {
    write_shard(dir / "web_val_000000.bin", iota_tokens(100, 0));
    write_shard(dir / "web_train_000001.bin", iota_tokens(100, 0));
    std::filesystem::create_symlink(dir / "web_val_000000.bin", dir / "held-out.shard");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {dir / "web_val_*.bin", dir / "web_val_000000.bin"}, {dir / "held-out.shard", dir / "held-out.shard"}};
    for (const auto& [val, named] : cases) {
      INFO(val);
      const std::string message = "data.val: " + named + " is in data.train too (" + dir / "*.bin" +
                                  "): validation would score tokens the model trains on; give the splits files of "
                                  "their own (llm.c's shards: *_train_*.bin and *_val_*.bin)";
      const DataSpec spec = data_spec(dir / "*.bin", val);
      CHECK(error_message<DataError>([&] { load_data(spec, model_spec(4, 256), true); }) == message);
      CHECK(error_message<DataError>([&] { check_data_files(spec, model_spec(4, 256), true); }) == message);
    }
    CHECK_NOTHROW(load_data(data_spec(dir / "*_train_*.bin", dir / "*_val_*.bin"), model_spec(4, 256), true));
    // The same files for both splits are meant (a sequence overfitted on purpose), by any name.
    CHECK_NOTHROW(check_data_files(data_spec(dir / "*_val_*.bin", dir / "held-out.shard"), model_spec(4, 256), true));
  }
  SECTION("tokens beyond the model's vocabulary") {
    write_bytes(dir / "a.txt", "plain ascii and one \xc8 byte");  // 0xc8 = 200
    CHECK(error_message<DataError>([&] { load_data(data_spec(dir / "a.txt"), model_spec(4, 128), false); }) ==
          "data.train: " + dir / "a.txt" +
              ": the data needs vocab_size >= 201 (its largest token is 200), but model.vocab_size is 128");
    write_shard(dir / "v.bin", {1, 2, 50256, 3});
    CHECK(error_message<DataError>([&] {
            load_data(data_spec(dir / "a.txt", dir / "v.bin"), model_spec(2, 256), false);
          }) == "data.val: " + dir / "v.bin" +
                    ": the data needs vocab_size >= 50257 (its largest token is 50256), but model.vocab_size is 256");
  }
  SECTION("too few tokens for one window") {
    write_bytes(dir / "a.txt", "short");
    CHECK(error_message<DataError>([&] { load_data(data_spec(dir / "a.txt", "", 0.01), model_spec(8, 256), false); }) ==
          "data.train: " + dir / "a.txt" + ": 5 tokens, but model.seq_len 8 needs at least 9");
    write_bytes(dir / "b.txt", std::string(20, 'x'));
    CHECK(error_message<DataError>([&] { load_data(data_spec(dir / "b.txt", "", 0.5), model_spec(10, 256), false); }) ==
          "data.train: " + dir / "b.txt" +
              ": 20 tokens, 10 of them for training after holding out 10 for validation, but model.seq_len 10 needs "
              "at least 11");
    CHECK(error_message<DataError>([&] {
            load_data(data_spec(dir / "b.txt", dir / "a.txt"), model_spec(8, 256), true);
          }) == "data.val: " + dir / "a.txt" + ": 5 tokens, but model.seq_len 8 needs at least 9");
  }
  SECTION("a held-out split too small to validate on") {
    write_bytes(dir / "a.txt", std::string(100, 'x'));
    CHECK(error_message<DataError>([&] { load_data(data_spec(dir / "a.txt", "", 0.05), model_spec(8, 256), true); }) ==
          "data.val_fraction: 0.05 of " + dir / "a.txt" +
              "'s 100 tokens is 5 validation tokens, but model.seq_len 8 needs at least 9; give data.val, more data "
              "or a larger data.val_fraction");
    // Too little for a training and a validation window: the data is what is wrong, whatever the fraction.
    write_bytes(dir / "c.txt", std::string(17, 'x'));
    CHECK(error_message<DataError>([&] { load_data(data_spec(dir / "c.txt", "", 0.5), model_spec(8, 256), true); }) ==
          "data.train: " + dir / "c.txt" +
              ": 17 tokens, but model.seq_len 8 needs at least 9 for training and as many held out for validation "
              "(eval_every > 0 without data.val); give more data or data.val");
    // Without validation the same split is fine: the tail is still held out, just unused.
    const DataSplit split = load_data(data_spec(dir / "a.txt", "", 0.05), model_spec(8, 256), false);
    CHECK(split.train.count == 95);
  }
  SECTION("errors are SpecErrors carrying the field") {
    try {
      TokenSource(dir / "missing.txt", "data.val");
      FAIL("no error");
    } catch (const SpecError& e) {
      CHECK(e.path() == "data.val");
    }
  }
}


TEST_CASE("glob characters in names that exist as the data path writes them are those names, the rest is a pattern",
          "[data]") {
  ScratchDir dir;
  const std::string run = dir / "run [v2]";  // '[' would start a pattern: "run v/", "run 2/"
  std::filesystem::create_directories(run);
  for (const char* name : {"s_train_000001.bin", "s_train_000002.bin", "f[1].bin", "f1.bin"}) {
    write_shard(run + "/" + name, iota_tokens(10, 0));
  }
  using Files = std::vector<std::string>;
  CHECK(TokenSource(run + "/*_train_*.bin", "data.train").files() ==
        Files{run + "/s_train_000001.bin", run + "/s_train_000002.bin"});
  CHECK(TokenSource(run + "/f[1].bin", "data.train").files() == Files{run + "/f[1].bin"});  // the file, not f1.bin
  CHECK(TokenSource(run + "/f[0-9].bin", "data.train").files() == Files{run + "/f1.bin"});  // no such name: a pattern
  CHECK(TokenSource(run + "/f?1].bin", "data.train").files() == Files{run + "/f[1].bin"});
  CHECK(error_message<DataError>([&] { TokenSource(dir / "run [v3]/*.bin", "data.train"); }) ==
        "data.train: no file matches " + dir / "run [v3]/*.bin");
}
TEST_CASE("without data.val the tail of the training data is held out for validation", "[data]") {
  ScratchDir dir;
  std::string text(1000, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  write_bytes(dir / "corpus.txt", text);

  const DataSplit split = load_data(data_spec(dir / "corpus.txt", "", 0.1), model_spec(16, 256), true);
  CHECK(split.byte_level);
  CHECK(split.train.begin == 0);
  CHECK(split.train.count == 900);
  CHECK(split.val.source == split.train.source);
  CHECK(split.val.begin == 900);
  CHECK(split.val.count == 100);
  const auto val = all_tokens(split.val);
  CHECK(val.front() == text[900]);
  CHECK(val.back() == text[999]);

  SECTION("training never draws a window that reaches into the held-out tail") {
    BatchSampler sampler(split.train, 16, 7);
    for (int step = 0; step < 200; ++step) {
      for (auto start : sampler.draw(8)) CHECK(start + 17 <= 900);
    }
  }
  SECTION("data.val, when given, is the validation split and train is used whole") {
    write_bytes(dir / "val.txt", std::string(40, 'v'));
    const DataSplit both = load_data(data_spec(dir / "corpus.txt", dir / "val.txt", 0.1), model_spec(16, 256), true);
    CHECK(both.train.count == 1000);
    CHECK(both.val.count == 40);
    CHECK(all_tokens(both.val) == std::vector<std::int32_t>(40, 'v'));
  }
}

TEST_CASE("the header-only data check refuses what load_data refuses, with the same message", "[data][errors]") {
  ScratchDir dir;
  write_bytes(dir / "empty.txt", "");
  write_bytes(dir / "short.txt", "short");
  write_bytes(dir / "ok.txt", std::string(100, 'x'));
  write_shard(dir / "magic.bin", iota_tokens(10, 0), 20240326);
  write_shard(dir / "version.bin", iota_tokens(10, 0), kShardMagic, 2);
  write_shard(dir / "cut.bin", iota_tokens(10, 0), kShardMagic, kShardVersion, 12);
  write_bytes(dir / "stub.bin", std::string("\x88\xd8\x34\x01", 4) + std::string(100, '\0'));
  write_shard(dir / "shard.bin", iota_tokens(100, 0));
  write_shard(dir / "wide.bin", iota_tokens(100, 200), kShardMagic, kShardVersion, -1, 299);
  write_bytes(dir / "tiny.txt", std::string(12, 'x'));
  write_bytes(dir / "lines.jsonl", "{\"text\": \"" + std::string(100, 'x') + "\"}\n");
  struct Case {
    const char* name;
    DataSpec data;
    bool need_val;
  };
  const Case cases[] = {
      {"a missing file", data_spec(dir / "nope.txt"), false},
      {"a directory", data_spec(dir.path()), false},
      {"a glob matching nothing", data_spec(dir / "*.none"), false},
      {"an empty file", data_spec(dir / "empty.txt", "", 0.0), false},
      {"a file shorter than one window", data_spec(dir / "short.txt", "", 0.0), false},
      {"a .bin without the magic", data_spec(dir / "magic.bin"), false},
      {"JSON Lines", data_spec(dir / "lines.jsonl"), false},
      {"a shard of another version", data_spec(dir / "version.bin"), false},
      {"a shard shorter than its header says", data_spec(dir / "cut.bin"), false},
      {"a shard cut inside its header", data_spec(dir / "stub.bin"), false},
      {"a glob mixing text and shards", data_spec(dir / "s*"), false},
      {"validation data of another kind", data_spec(dir / "ok.txt", dir / "shard.bin"), true},
      {"validation data too short", data_spec(dir / "ok.txt", dir / "short.txt"), true},
      {"a held-out split too small", data_spec(dir / "ok.txt", "", 0.05), true},
      {"training left too short by the held-out split", data_spec(dir / "ok.txt", "", 0.95), false},
      {"too little data for training and validation", data_spec(dir / "tiny.txt", "", 0.5), true},
      {"a token beyond the vocabulary, recorded in the shard's header", data_spec(dir / "wide.bin"), false},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const ModelSpec model = model_spec(8, 256);
      const std::string expected = error_message<DataError>([&] { load_data(c.data, model, c.need_val); });
      CHECK(expected != "(no error)");
      CHECK(error_message<DataError>([&] { check_data_files(c.data, model, c.need_val); }) == expected);
    }
  }
  SECTION("text with a byte beyond a vocabulary smaller than bytes', in training or validation data") {
    write_bytes(dir / "accent.txt", std::string(50, 'x') + "caf\xc3\xa9" + std::string(50, 'x'));
    for (const DataSpec& data : {data_spec(dir / "accent.txt"), data_spec(dir / "ok.txt", dir / "accent.txt")}) {
      const ModelSpec ascii = model_spec(8, 128);
      const std::string expected = error_message<DataError>([&] { load_data(data, ascii, true); });
      CHECK(expected.find(dir / "accent.txt" + ": the data needs vocab_size >= 196 (its largest token is 195), but "
                                               "model.vocab_size is 128") != std::string::npos);
      CHECK(error_message<DataError>([&] { check_data_files(data, ascii, true); }) == expected);
    }
    CHECK_NOTHROW(check_data_files(data_spec(dir / "ok.txt", dir / "ok.txt"), model_spec(8, 128), true));
  }
  SECTION("good data passes both") {
    CHECK_NOTHROW(check_data_files(data_spec(dir / "ok.txt"), model_spec(8, 256), true));
    CHECK_NOTHROW(load_data(data_spec(dir / "ok.txt"), model_spec(8, 256), true));
    CHECK_NOTHROW(check_data_files(data_spec(dir / "shard.bin", dir / "shard.bin"), model_spec(8, 256), true));
  }
}

TEST_CASE("a shard's recorded largest token: checked from the header, and against the tokens", "[data][errors]") {
  ScratchDir dir;
  write_shard(dir / "recorded.bin", iota_tokens(100, 0), kShardMagic, kShardVersion, -1, 99);
  CHECK(inspect_token_file(dir / "recorded.bin", "data.train").max_token == 99);
  CHECK_NOTHROW(check_data_files(data_spec(dir / "recorded.bin"), model_spec(8, 100), false));
  const auto check = [&](int vocab) { check_data_files(data_spec(dir / "recorded.bin"), model_spec(8, vocab), false); };
  CHECK(error_message<DataError>([&] { check(99); }) ==
        "data.train: " + dir / "recorded.bin" +
            ": the data needs vocab_size >= 100 (its largest token is 99), but model.vocab_size is 99");
  // Another tool's shard records nothing: only the ranks, reading the tokens, can check it.
  write_shard(dir / "foreign.bin", iota_tokens(100, 0));
  CHECK_FALSE(inspect_token_file(dir / "foreign.bin", "data.train").max_token);
  CHECK_NOTHROW(check_data_files(data_spec(dir / "foreign.bin"), model_spec(8, 99), false));
  CHECK(error_message<DataError>([&] { load_data(data_spec(dir / "foreign.bin"), model_spec(8, 99), false); })
            .find("the data needs vocab_size >= 100") != std::string::npos);
  // A header that understates its tokens is damage, found as the rank reads them.
  write_shard(dir / "lying.bin", iota_tokens(100, 0), kShardMagic, kShardVersion, -1, 50);
  CHECK(error_message<DataError>([&] { TokenSource(dir / "lying.bin", "data.train"); }) ==
        "data.train: " + dir / "lying.bin" +
            ": damaged llm.c token shard: its header records a largest token of 50 but it holds 99");
}

TEST_CASE("inspecting a data file reads its header, not its tokens", "[data]") {
  ScratchDir dir;
  write_shard(dir / "shard.bin", iota_tokens(100, 7));
  const TokenFileInfo shard = inspect_token_file(dir / "shard.bin", "data.train");
  CHECK_FALSE(shard.text);
  CHECK(shard.tokens == 100);
  write_bytes(dir / "a.txt", "twelve bytes");
  const TokenFileInfo text = inspect_token_file(dir / "a.txt", "data.train");
  CHECK(text.text);
  CHECK(text.tokens == 12);
  // 2 GB of tokens that are never written (a sparse file): only the header is read.
  const std::uint64_t tokens = 1ull << 30;
  write_shard(dir / "big.bin", {}, kShardMagic, kShardVersion, static_cast<std::int64_t>(tokens));
  std::filesystem::resize_file(dir / "big.bin", kShardHeaderBytes + 2 * tokens);
  CHECK(inspect_token_file(dir / "big.bin", "data.train").tokens == tokens);
}

TEST_CASE("xoshiro256** matches its reference output and bounds without bias", "[sampler]") {
  // The reference implementation's first outputs from state {1, 2, 3, 4}.
  Xoshiro256 rng(0);
  rng.set_state({{1, 2, 3, 4}});
  CHECK(rng.next() == 11520ULL);
  CHECK(rng.next() == 0ULL);
  CHECK(rng.next() == 1509978240ULL);
  CHECK(rng.next() == 1215971899390074240ULL);

  Xoshiro256 uniform(123);
  std::vector<int> counts(10, 0);
  const int draws = 100000;
  for (int i = 0; i < draws; ++i) counts[uniform.below(10)]++;
  for (int c : counts) CHECK(std::abs(c - draws / 10) < 500);  // ~5 standard deviations
}

TEST_CASE("the sampler is deterministic, covers every start and resumes exactly", "[sampler]") {
  ScratchDir dir;
  write_bytes(dir / "corpus.txt", std::string(20, 'x'));
  const TokenSpan tokens = whole(dir / "corpus.txt");
  const int T = 16;  // starts 0 .. 20 - 16 - 1 = 3

  BatchSampler a(tokens, T, 42), b(tokens, T, 42), c(tokens, T, 43);
  std::set<std::uint64_t> seen;
  bool differs = false;
  for (int step = 0; step < 50; ++step) {
    const auto sa = a.draw(8);
    CHECK(sa == b.draw(8));
    differs = differs || sa != c.draw(8);
    for (auto s : sa) {
      CHECK(s <= 3);
      seen.insert(s);
    }
  }
  CHECK(differs);
  CHECK(seen == std::set<std::uint64_t>{0, 1, 2, 3});

  SECTION("a restored state draws the batches the original went on to draw") {
    const SamplerState saved = a.state();
    std::vector<std::vector<std::uint64_t>> next;
    for (int step = 0; step < 5; ++step) next.push_back(a.draw(8));
    BatchSampler resumed(tokens, T, 999);  // the seed no longer matters once the state is set
    resumed.set_state(saved);
    for (int step = 0; step < 5; ++step) CHECK(resumed.draw(8) == next[step]);
    CHECK(resumed.state() == a.state());
  }
}

TEST_CASE("ranks split the global batch by i % world and together cover it exactly", "[sampler]") {
  ScratchDir dir;
  std::vector<std::uint16_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>((i * 7919) % 50257);
  write_shard(dir / "a.bin", {tokens.begin(), tokens.begin() + 2000});
  write_shard(dir / "b.bin", {tokens.begin() + 2000, tokens.end()});
  const TokenSpan span = whole(dir / "*.bin");
  const int T = 32;
  const int global = 24;
  BatchSampler sampler(span, T, 5);
  const auto starts = sampler.draw(global);

  // The reference: sequence i of the global batch, straight from the token array.
  auto window_of = [&](size_t i) {
    return std::vector<std::int32_t>(tokens.begin() + static_cast<long>(starts[i]),
                                     tokens.begin() + static_cast<long>(starts[i]) + T + 1);
  };

  for (int world : {1, 2, 3, 4}) {
    for (int B : {1, 2}) {
      if ((global / world) % B != 0) continue;
      const int micro_steps = global / world / B;
      std::map<size_t, int> covered;  // global index -> times computed
      for (int rank = 0; rank < world; ++rank) {
        for (int m = 0; m < micro_steps; ++m) {
          std::vector<std::int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
          gather_micro_batch(span, T, starts, rank, world, m, B, inputs.data(), targets.data());
          for (int b = 0; b < B; ++b) {
            const size_t i = static_cast<size_t>((m * B + b) * world + rank);
            CHECK(static_cast<int>(i % world) == rank);
            covered[i]++;
            const auto w = window_of(i);
            CHECK(std::equal(inputs.begin() + b * T, inputs.begin() + (b + 1) * T, w.begin()));
            CHECK(std::equal(targets.begin() + b * T, targets.begin() + (b + 1) * T, w.begin() + 1));
          }
        }
      }
      CAPTURE(world, B);
      CHECK(covered.size() == static_cast<size_t>(global));
      CHECK(std::all_of(covered.begin(), covered.end(), [](auto& kv) { return kv.second == 1; }));
    }
  }

  SECTION("gradient accumulation sees the same sequences as one big micro-batch") {
    std::vector<std::int32_t> big(static_cast<size_t>(global) * T), big_t(big.size());
    gather_micro_batch(span, T, starts, 0, 1, 0, global, big.data(), big_t.data());
    std::vector<std::int32_t> parts;
    for (int m = 0; m < 4; ++m) {
      std::vector<std::int32_t> in(6 * T), tg(6 * T);
      gather_micro_batch(span, T, starts, 0, 1, m, 6, in.data(), tg.data());
      parts.insert(parts.end(), in.begin(), in.end());
    }
    CHECK(parts == big);
  }
  SECTION("a batch that does not split is refused") {
    std::vector<std::int32_t> in(64 * T), tg(64 * T);
    CHECK_THROWS_AS(gather_micro_batch(span, T, starts, 0, 5, 0, 1, in.data(), tg.data()), std::invalid_argument);
    CHECK_THROWS_AS(gather_micro_batch(span, T, starts, 1, 2, 6, 2, in.data(), tg.data()), std::invalid_argument);
    CHECK_THROWS_AS(gather_micro_batch(span, T, starts, 2, 2, 0, 1, in.data(), tg.data()), std::invalid_argument);
  }
}

TEST_CASE("validation windows are evenly spaced and the same every time", "[sampler]") {
  ScratchDir dir;
  write_bytes(dir / "val.txt", std::string(1001, 'v'));
  const TokenSpan span = whole(dir / "val.txt");
  const auto starts = validation_starts(span, 100, 10);  // last start 1001 - 101 = 900
  CHECK(starts == std::vector<std::uint64_t>{0, 100, 200, 300, 400, 500, 600, 700, 800, 900});
  CHECK(validation_starts(span, 100, 10) == starts);
  CHECK(validation_starts(span, 100, 1) == std::vector<std::uint64_t>{0});
  const auto many = validation_starts(span, 100, 4000);  // more windows than starts: they overlap
  CHECK(many.front() == 0);
  CHECK(many.back() == 900);
  CHECK(std::is_sorted(many.begin(), many.end()));
}
