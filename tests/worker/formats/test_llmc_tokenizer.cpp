// llm.c's tokenizer file (gpt2_tokenizer.bin): written from GPT-2's vocabulary it reads back token
// for token, a bad one is refused naming the file and what is wrong, and as a codec it decodes and
// counts bytes as GPT-2's own tokenizer does, but cannot encode.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "common/file_error.hpp"
#include "common/model_file.hpp"
#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/test_files.hpp"
#include "worker/formats/llmc_tokenizer.hpp"
#include "worker/formats/text_codec.hpp"

using namespace xtrain;
using xtrain::test::error_message;
using xtrain::test::read_bytes;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;

TEST_CASE("llm.c's tokenizer file reads back as it was written, and a bad one is refused naming the file", "[llmc]") {
  ScratchDir dir;
  const TextCodec gpt2 = TextCodec::of(Gpt2Tokenizer::load(test::gpt2_hf_dir()));
  write_bytes(dir / "tok.bin", llmc_tokenizer_bytes(gpt2.decoding_table()));
  CHECK(is_llmc_tokenizer_file(dir / "tok.bin"));
  CHECK_FALSE(is_llmc_tokenizer_file(test::gpt2_hf_dir() + "/vocab.json"));
  write_bytes(dir / "gpt2_tokenizer.bin", "damaged");  // known by its name too, to be reported as what it is
  CHECK(is_llmc_tokenizer_file(dir / "gpt2_tokenizer.bin"));
  CHECK_FALSE(is_llmc_tokenizer_file(dir / "none.bin"));
  const LlmcTokenizer table = read_llmc_tokenizer(dir / "tok.bin");
  CHECK(table.path == dir / "tok.bin");
  CHECK(table.eot == 50256);
  REQUIRE(table.tokens.size() == 50257);
  for (std::int32_t id = 0; id < 50257; ++id) {
    if (table.tokens[static_cast<size_t>(id)] != gpt2.decode(std::span(&id, 1))) FAIL("token " << id);
  }

  const std::string good = read_bytes(dir / "tok.bin");
  const auto with_word = [&](size_t word, std::uint32_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + 4 * word, &value, 4);
    return bytes;
  };
  // Version 1 names no eot: llm.c takes GPT-2's.
  std::string v1 = with_word(1, 1);
  std::memset(v1.data() + 12, 0, 4);
  write_bytes(dir / "v1.bin", v1);
  CHECK(read_llmc_tokenizer(dir / "v1.bin").eot == 50256);

  const auto refusal = [&](const std::string& bytes) {
    write_bytes(dir / "bad.bin", bytes);
    return error_message<FileError>([&] { read_llmc_tokenizer(dir / "bad.bin"); });
  };
  const std::string at = dir / "bad.bin" + ": llm.c tokenizer file: ";
  CHECK(refusal(good.substr(0, 1000)) == at + "shorter than its header of 1024 bytes");
  CHECK(refusal(with_word(0, 20240326)) == at + "magic is 20240326, expected 20240328");
  CHECK(refusal(with_word(1, 3)) == at + "version 3, expected 1 or 2");
  CHECK(refusal(with_word(3, 50257)) == at + "eot id 50257 is outside its 50257 tokens");
  CHECK(refusal(good.substr(0, good.size() - 1)) == at + "token 50256 runs past the end of the file");
  CHECK(refusal(good.substr(0, 1024 + 1 + static_cast<unsigned char>(good[1024]))) ==
        at + "ends after 1 of its 50257 tokens");
  CHECK(refusal(good + "xy") == at + "2 bytes after its last token");
  std::string empty_token = good;
  empty_token[1024] = '\0';
  CHECK(refusal(empty_token) == at + "token 0 has no bytes");
  // Loaded as a tokenizer, the same refusal is a TokenizerError naming the file once.
  CHECK(error_message<TokenizerError>([&] { TextCodec::load(dir / "bad.bin"); }) == at + "token 0 has no bytes");
}

TEST_CASE("llm.c's tokenizer file as a codec decodes and counts bytes as GPT-2's tokenizer does, and cannot encode",
          "[llmc][text]") {
  ScratchDir dir;
  const TextCodec gpt2 = TextCodec::load(test::gpt2_hf_dir());
  write_bytes(dir / "gpt2_tokenizer.bin", llmc_tokenizer_bytes(gpt2.decoding_table()));
  const TextCodec table = TextCodec::load(dir / "gpt2_tokenizer.bin");
  CHECK(table.has_text());
  CHECK_FALSE(table.encodes());
  CHECK(gpt2.encodes());
  CHECK(table.vocab_size() == 50257);
  CHECK(table.source() == dir / "gpt2_tokenizer.bin");
  CHECK(table.name() == dir / "gpt2_tokenizer.bin" + " (llm.c's tokenizer file)");
  CHECK(table.end_of_text() == 50256);
  CHECK(table.document_start() == std::vector<std::int32_t>{50256});

  const std::string text = "Caf\xc3\xa9 \xe2\x80\x94 tabs\there, \xf0\x9f\x99\x82 and <|endoftext|> as text.\n";
  std::vector<std::int32_t> tokens = gpt2.encode(text);
  tokens.push_back(50256);
  const std::vector<std::int32_t> more = gpt2.encode("Second document.");
  tokens.insert(tokens.end(), more.begin(), more.end());
  CHECK(table.decode(tokens) == gpt2.decode(tokens));
  CHECK(table.text_bytes(tokens) == gpt2.text_bytes(tokens));
  CHECK(table.text_bytes(tokens) == text.size() + std::string("Second document.").size());  // eot counts none
  CHECK(error_message<TokenizerError>([&] { table.decode(std::vector<std::int32_t>{50257}); }) ==
        dir / "gpt2_tokenizer.bin" + ": token id 50257 is outside its 50257 tokens");
}

TEST_CASE("a run's tokenizer may be llm.c's file: no prompt but the default, and the vocabulary must be the model's",
          "[llmc][text][errors]") {
  ScratchDir dir;
  write_bytes(dir / "gpt2_tokenizer.bin", llmc_tokenizer_bytes(TextCodec::load(test::gpt2_hf_dir()).decoding_table()));
  JobSpec spec;
  spec.tokenizer = dir / "gpt2_tokenizer.bin";
  spec.model.vocab_size = 50257;
  spec.model.init_from = dir / "gpt2_124M.bin";
  spec.sample.tokens = 16;
  const auto error_of = [](const JobSpec& s) {
    return error_message<SpecError>([&] { TextCodec::for_run(s, /*byte_level=*/false); });
  };
  const TextCodec codec = TextCodec::for_run(spec, /*byte_level=*/false);  // the default prompt: a document's start
  CHECK(codec.has_text());
  CHECK_FALSE(codec.encodes());

  spec.sample.prompt = "Once upon a time";
  CHECK(error_of(spec) == "sample.prompt: " + dir / "gpt2_tokenizer.bin" +
                              " (llm.c's tokenizer file) decodes only, so a sample starts from <|endoftext|>: leave "
                              "sample.prompt out, or name GPT-2's vocabulary files (vocab.json + merges.txt) with "
                              "the tokenizer key to encode it");
  spec.sample.tokens = 0;  // no sample: the prompt is never used
  CHECK_NOTHROW(TextCodec::for_run(spec, false));

  spec.model.vocab_size = 50304;
  CHECK(error_of(spec) == "tokenizer: " + dir / "gpt2_tokenizer.bin" +
                              " has 50257 tokens but model.vocab_size is 50304 (model.init_from's): the model would "
                              "sample ids the tokenizer cannot decode");
}
