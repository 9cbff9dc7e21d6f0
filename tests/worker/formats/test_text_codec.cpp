// Text in and out of a run: bytes for byte-level data, GPT-2's tokenizer for token shards (with a
// vocabulary that must be the model's), the bytes bits per byte counts, and text made printable.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "worker/formats/text_codec.hpp"
#include "worker/train/text_sampler.hpp"

using namespace xtrain;
using xtrain::test::gpt2_hf_dir;
using xtrain::test::gpt2_openai_dir;

namespace {

JobSpec spec_with(const std::string& tokenizer, int vocab_size) {
  JobSpec spec;
  spec.tokenizer = tokenizer;
  spec.model.vocab_size = vocab_size;
  spec.data.train = "train.bin";
  return spec;
}

std::string error_of(const JobSpec& spec, bool byte_level) {
  try {
    TextCodec::for_run(spec, byte_level);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("byte-level text is one token per byte, every byte", "[text]") {
  const TextCodec bytes = TextCodec::for_run(spec_with("", 256), /*byte_level=*/true);
  CHECK(bytes.has_text());
  const std::string text("a\xff\x00z", 4);
  const std::vector<std::int32_t> tokens = bytes.encode(text);
  CHECK(tokens == std::vector<std::int32_t>{'a', 255, 0, 'z'});
  CHECK(bytes.decode(tokens) == text);
  CHECK(bytes.text_bytes(tokens) == 4);
  CHECK_FALSE(bytes.end_of_text().has_value());  // every byte is text
  CHECK_FALSE(TextCodec::for_run(spec_with("", 50257), /*byte_level=*/false).has_text());  // shards, no tokenizer
  CHECK(bytes.encodes());
  CHECK(bytes.document_start() == std::vector<std::int32_t>{'\n'});
}

TEST_CASE("token shards with the GPT-2 tokenizer: encode, decode, and the bytes of the text", "[text]") {
  for (const std::string& dir : {gpt2_openai_dir(), gpt2_hf_dir()}) {
    const TextCodec gpt2 = TextCodec::for_run(spec_with(dir, 50257), /*byte_level=*/false);
    const std::vector<std::int32_t> tokens = gpt2.encode("Hello world");
    CHECK(tokens == std::vector<std::int32_t>{15496, 995});  // "Hello", " world"
    CHECK(gpt2.decode(tokens) == "Hello world");
    const std::vector<std::int32_t> with_eot = {15496, 995, 50256, 15496};
    CHECK(gpt2.text_bytes(with_eot) == 5 + 6 + 0 + 5);  // <|endoftext|> separates, stands for no text
    CHECK(gpt2.end_of_text() == 50256);
  }
}

TEST_CASE("a tokenizer that does not fit the run is a spec error naming both sides", "[text][errors]") {
  const std::string dir = gpt2_openai_dir();
  const std::string source = dir + "/encoder.json + " + dir + "/vocab.bpe";
  CHECK(error_of(spec_with(dir, 50304), false) ==
        "tokenizer: " + source +
            " has 50257 tokens but model.vocab_size is 50304: the model would sample ids the tokenizer cannot decode");
  JobSpec from_file = spec_with(dir, 50304);
  from_file.model.init_from = "gpt2";
  CHECK(error_of(from_file, false).find("model.vocab_size is 50304 (model.init_from's)") != std::string::npos);
  CHECK(error_of(spec_with(dir, 1000), false) ==
        "tokenizer: " + source +
            " has 50257 tokens but model.vocab_size is 1000: text would encode to ids the model does not have");
  CHECK(error_of(spec_with(dir, 50257), true) ==
        "tokenizer: data.train (train.bin) is byte-level text, one token per byte; a GPT-2 tokenizer goes with llm.c "
        "token shards (xtrain-data makes them from text)");
  JobSpec text_from_file = spec_with(dir, 50257);
  text_from_file.model.init_from = "gpt2";  // whose vocabulary files are the default tokenizer
  CHECK(error_of(text_from_file, true) ==
        "tokenizer: data.train (train.bin) is byte-level text, one token per byte; a GPT-2 tokenizer (this key's, or "
        "model.init_from's own) goes with llm.c token shards (xtrain-data makes them from text)");
  CHECK(error_of(spec_with("/nonexistent/gpt2", 50257), false).rfind("tokenizer: /nonexistent/gpt2", 0) == 0);
}

TEST_CASE("printable keeps text and well-formed UTF-8, and replaces the rest with ?", "[text]") {
  CHECK(printable("line one\n\ttab") == "line one\n\ttab");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable(std::string("nul\0bell\x07", 9)) == "nul?bell?");
  CHECK(printable("cut \xe2\x82") == "cut ??");             // a character cut short
  CHECK(printable("\xc0\xaf overlong") == "?? overlong");   // an overlong '/'
  CHECK(printable("\xed\xa0\x80 surrogate") == "??? surrogate");
  CHECK(printable("\xc2\x85 C1") == "?? C1");               // a C1 control character
}
