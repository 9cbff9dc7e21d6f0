// The GPT-2 tokenizer's parts on their own: the pre-tokeniser's pieces, the UTF-8 decoder,
// tiktoken's merge rule on toy vocabularies, loading every published form (Hugging Face's
// tokenizer.json included), and every kind of bad vocabulary. The comparison with js-tiktoken on
// megabytes of text is test_gpt2_vs_tiktoken.cpp.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tokenizer/gpt2_pretokenizer.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/tokenizer/hf_tokenizer_json.hpp"
#include "common/tokenizer/unicode_classes.hpp"
#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/test_files.hpp"

using namespace xtrain;
using test::ScratchDir;
using Pieces = std::vector<std::string_view>;

namespace {

// GPT-2's byte alphabet as its paper's code defines it: printable bytes are themselves, the other
// 68 are U+0100 onwards in byte order. As UTF-8.
std::string alphabet_char(int byte) {
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int c = printable ? b : next++;
    if (b == byte) {
      if (c < 0x80) return std::string(1, static_cast<char>(c));
      return {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
  }
  return "";
}

// A toy vocabulary in OpenAI's form: the 256 byte tokens (ids 0..255), one token per merge (256..),
// then <|endoftext|>. Merges are written with ASCII letters, which are their own alphabet characters.
struct ToyVocab {
  nlohmann::json encoder = nlohmann::json::object();
  std::string merges = "#version: 0.2\n";
};

ToyVocab toy_vocab(const std::vector<std::string>& merges) {
  ToyVocab v;
  for (int b = 0; b < 256; ++b) v.encoder[alphabet_char(b)] = b;
  int id = 256;
  for (const std::string& m : merges) {
    const auto space = m.find(' ');
    v.encoder[m.substr(0, space) + m.substr(space + 1)] = id++;
    v.merges += m + "\n";
  }
  v.encoder["<|endoftext|>"] = id;
  return v;
}

std::string write_vocab(const ScratchDir& dir, const ToyVocab& v) {
  test::write_bytes(dir / "encoder.json", v.encoder.dump());
  test::write_bytes(dir / "vocab.bpe", v.merges);
  return dir.path();
}

// The tokens of `text` under a toy vocabulary, as the tokens' bytes.
std::vector<std::string> toy_encode(const std::vector<std::string>& merges, std::string_view text) {
  ScratchDir dir;
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(write_vocab(dir, toy_vocab(merges)));
  std::vector<std::string> out;
  for (const std::int32_t token : t.encode(text)) out.push_back(t.decode_token(token));
  return out;
}

std::string load_error(const std::string& path) {
  return test::error_message<TokenizerError>([&] { Gpt2Tokenizer::load(path); });
}

}  // namespace

TEST_CASE("pieces follow the gpt2 regex: contractions, letters, numbers, other, spaces", "[tokenizer]") {
  CHECK(gpt2_pieces("Hello world") == Pieces{"Hello", " world"});
  CHECK(gpt2_pieces("it's they're I've I'm we'll he'd don't") ==
        Pieces{"it", "'s", " they", "'re", " I", "'ve", " I", "'m", " we", "'ll", " he", "'d", " don", "'t"});
  // Contractions are lowercase ASCII only, and the first alternative wins ('steve = 's + teve).
  CHECK(gpt2_pieces("IT'S 'steve x\u2019s") == Pieces{"IT", "'", "S", " '", "steve", " x", "\u2019", "s"});
  CHECK(gpt2_pieces("!'s") == Pieces{"!'", "s"});
  CHECK(gpt2_pieces("$100.50 a1 x2y") == Pieces{"$", "100", ".", "50", " a", "1", " x", "2", "y"});
  CHECK(gpt2_pieces(" !! ??x") == Pieces{" !!", " ??", "x"});
  CHECK(gpt2_pieces("h\u00e9llo e\u0301 \u0661\u0662 \u4e2d\u6587") ==
        Pieces{"h\u00e9llo", " e", "\u0301", " \u0661\u0662", " \u4e2d\u6587"});
}

TEST_CASE("runs of white space give up their last character to what follows", "[tokenizer]") {
  CHECK(gpt2_pieces("a  b") == Pieces{"a", " ", " b"});
  CHECK(gpt2_pieces("a\n\nb") == Pieces{"a", "\n", "\n", "b"});
  CHECK(gpt2_pieces("a\t\tb") == Pieces{"a", "\t", "\t", "b"});
  CHECK(gpt2_pieces("a \tb") == Pieces{"a", " ", "\t", "b"});
  CHECK(gpt2_pieces("x   ") == Pieces{"x", "   "});           // at the end: the whole run
  CHECK(gpt2_pieces("   ") == Pieces{"   "});
  CHECK(gpt2_pieces("\r\n\r\nx") == Pieces{"\r\n\r", "\n", "x"});
  CHECK(gpt2_pieces("\u00a0x \u3000y") == Pieces{"\u00a0", "x", " ", "\u3000", "y"});
  CHECK(gpt2_pieces("a \u0085b") == Pieces{"a", " ", "\u0085", "b"});  // NEL is White_Space
  CHECK(gpt2_pieces("a \ufeffb") == Pieces{"a", " \ufeff", "b"});      // BOM is not
}

TEST_CASE("bytes that are not UTF-8 are 'other', as the U+FFFD replacing them would be", "[tokenizer]") {
  CHECK(gpt2_pieces("a\xff" "b") == Pieces{"a", "\xff", "b"});
  CHECK(gpt2_pieces(" \xff\xfe!x") == Pieces{" \xff\xfe!", "x"});
  CHECK(gpt2_pieces("\xe4\xb8" "a") == Pieces{"\xe4\xb8", "a"});  // a truncated 3-byte sequence
  CHECK(gpt2_pieces("  \x80") == Pieces{" ", " \x80"});
  CHECK(gpt2_pieces("\xed\xa0\x80") == Pieces{"\xed\xa0\x80"});  // an encoded surrogate
}

TEST_CASE("the UTF-8 decoder delimits ill-formed sequences by maximal subparts", "[tokenizer]") {
  const auto units = [](std::string_view s) {
    std::vector<int> lengths;
    for (std::size_t pos = 0; pos < s.size();) {
      const Utf8Unit u = decode_utf8(s, pos);
      lengths.push_back(u.valid ? u.length : -u.length);  // negative: ill-formed
      pos += u.length;
    }
    return lengths;
  };
  CHECK(units("a\u00e9\u4e2d\U0001F600") == std::vector<int>{1, 2, 3, 4});
  CHECK(units("\xe4\xb8" "a") == std::vector<int>{-2, 1});
  CHECK(units("\xc0\xaf") == std::vector<int>{-1, -1});          // overlong: C0 never leads
  CHECK(units("\xe0\x80\x80") == std::vector<int>{-1, -1, -1});  // overlong 3-byte form
  CHECK(units("\xed\xa0\x80") == std::vector<int>{-1, -1, -1});  // surrogate
  CHECK(units("\xf4\x90\x80\x80") == std::vector<int>{-1, -1, -1, -1});  // above U+10FFFF
  CHECK(units("\xf0\x9f\x98") == std::vector<int>{-3});
  CHECK(decode_utf8("\U0010FFFF", 0).code_point == 0x10FFFF);
}

TEST_CASE("the character classes agree with the regex classes on ASCII and on landmarks", "[tokenizer]") {
  CHECK(unicode_version() == "15.0.0");
  for (char32_t c = 0; c < 0x80; ++c) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool number = c >= '0' && c <= '9';
    const bool space = c == ' ' || (c >= '\t' && c <= '\r');
    const UnicodeClass expected = letter   ? UnicodeClass::kLetter
                                  : number ? UnicodeClass::kNumber
                                  : space  ? UnicodeClass::kSpace
                                           : UnicodeClass::kOther;
    CHECK(unicode_class(c) == expected);
  }
  CHECK(unicode_class(0x85) == UnicodeClass::kSpace);
  CHECK(unicode_class(0xFEFF) == UnicodeClass::kOther);
  CHECK(unicode_class(0x2163) == UnicodeClass::kNumber);  // ROMAN NUMERAL FOUR (Nl)
  CHECK(unicode_class(0x00B2) == UnicodeClass::kNumber);  // SUPERSCRIPT TWO (No)
  CHECK(unicode_class(0x02B0) == UnicodeClass::kLetter);  // MODIFIER LETTER SMALL H (Lm)
  CHECK(unicode_class(0x0301) == UnicodeClass::kOther);   // COMBINING ACUTE ACCENT (Mn)
  CHECK(unicode_class(0x1F600) == UnicodeClass::kOther);
  CHECK(unicode_class(0x3134A) == UnicodeClass::kLetter);  // last CJK Extension G ideograph
  CHECK(unicode_class(0x3134B) == UnicodeClass::kUnassigned);
  CHECK(unicode_class(0x10FFFF) == UnicodeClass::kUnassigned);
  CHECK(unicode_class(0x110000) == UnicodeClass::kUnassigned);
}

TEST_CASE("merging follows tiktoken: lowest rank first, any split of a mergeable token", "[tokenizer]") {
  CHECK(toy_encode({"a b", "ab c"}, "abc") == std::vector<std::string>{"abc"});
  CHECK(toy_encode({"a b", "ab c"}, "abd") == std::vector<std::string>{"ab", "d"});
  CHECK(toy_encode({"b c", "a b"}, "abc") == std::vector<std::string>{"a", "bc"});  // rank decides
  CHECK(toy_encode({"a a"}, "aaaaa") == std::vector<std::string>{"aa", "aa", "a"});  // leftmost on a tie
  // "abc" is listed as ab+c, but tiktoken also merges a+bc into it: any split into tokens counts.
  CHECK(toy_encode({"b c", "a b", "ab c"}, "abc") == std::vector<std::string>{"abc"});
  // Merging reaches a+bc+d, but a piece that is a token is that token.
  CHECK(toy_encode({"b c", "a b", "c d", "ab cd"}, "abcd") == std::vector<std::string>{"abcd"});
  CHECK(toy_encode({"b c", "a b", "c d", "ab cd"}, "abcde") == std::vector<std::string>{"a", "bc", "d", "e"});
}

TEST_CASE("long pieces merge in n log n and agree with short ones", "[tokenizer]") {
  const std::string run(100000, '-');
  const auto tokens = toy_encode({"- -", "-- --", "---- ----"}, run);
  REQUIRE(tokens.size() == 100000 / 8);
  CHECK(tokens.front() == "--------");
}

TEST_CASE("both published forms load the same GPT-2 vocabulary", "[tokenizer]") {
  const Gpt2Tokenizer openai = Gpt2Tokenizer::load(test::gpt2_openai_dir());
  const Gpt2Tokenizer hf = Gpt2Tokenizer::load(test::gpt2_hf_dir() + "/merges.txt");
  CHECK(openai.vocab_size() == 50257);
  CHECK(openai.eot() == 50256);
  CHECK(openai.source() == test::gpt2_openai_dir() + "/encoder.json + " + test::gpt2_openai_dir() + "/vocab.bpe");
  CHECK(hf.source() == test::gpt2_hf_dir() + "/vocab.json + " + test::gpt2_hf_dir() + "/merges.txt");
  CHECK(Gpt2Tokenizer::load(test::gpt2_openai_dir() + "/encoder.json").source() == openai.source());
  for (std::int32_t id = 0; id < openai.vocab_size(); ++id) REQUIRE(openai.decode_token(id) == hf.decode_token(id));

  CHECK(openai.encode("Hello world") == std::vector<std::int32_t>{15496, 995});
  CHECK(openai.decode_token(50256) == "<|endoftext|>");
  CHECK(openai.decode_token(220) == " ");
  // <|endoftext|> in text is text.
  CHECK(openai.encode("<|endoftext|>") == std::vector<std::int32_t>{27, 91, 437, 1659, 5239, 91, 29});
}

TEST_CASE("decoding is exact for every byte and rejects ids outside the vocabulary", "[tokenizer]") {
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(test::gpt2_openai_dir());
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  for (int b = 0; b < 256; ++b) CHECK(t.decode(t.encode(all_bytes.substr(b))) == all_bytes.substr(b));
  const std::vector<std::int32_t> bad = {15496, 50257};
  CHECK_THROWS_WITH(t.decode(bad), Catch::Contains("token 50257 is not in the vocabulary (ids 0 to 50256)"));
  CHECK_THROWS_AS(t.decode_token(-1), TokenizerError);
}

TEST_CASE("bad vocabularies are refused with the file, the line and what is wrong", "[tokenizer]") {
  ScratchDir dir;
  CHECK(load_error(dir / "nothing") == dir / "nothing" + ": no such file or directory");
  CHECK(load_error(dir.path()) == dir.path() +
                                      ": holds neither encoder.json + vocab.bpe (OpenAI's GPT-2 vocabulary) nor "
                                      "vocab.json + merges.txt or tokenizer.json (Hugging Face's)");
  test::write_bytes(dir / "tokens.json", "{}");
  CHECK_THAT(load_error(dir / "tokens.json"), Catch::Contains("not a GPT-2 vocabulary file"));

  ToyVocab good = toy_vocab({"a b", "ab c"});
  write_vocab(dir, good);
  REQUIRE(load_error(dir.path()) == "(no error)");

  SECTION("a missing partner file") {
    std::filesystem::remove(dir / "vocab.bpe");
    CHECK_THAT(load_error(dir / "encoder.json"), Catch::StartsWith(dir / "vocab.bpe" + ": cannot read the merges"));
  }
  SECTION("truncated JSON") {
    const std::string text = good.encoder.dump(1);  // one token per line
    test::write_bytes(dir / "encoder.json", text.substr(0, text.size() / 2));
    const std::string message = load_error(dir.path());
    CHECK_THAT(message, Catch::StartsWith(dir / "encoder.json:") && Catch::Contains("not valid JSON") &&
                            Catch::Contains("unexpected end of input"));
    CHECK_THAT(message, Catch::Contains(":" + std::to_string(std::count(text.begin(), text.begin() + text.size() / 2, '\n') + 1) + ": "));
  }
  SECTION("not an object of ids") {
    test::write_bytes(dir / "encoder.json", "[1, 2]");
    CHECK(load_error(dir.path()) == dir / "encoder.json" + ": expected a JSON object mapping each token to its id, got array");
    good.encoder["x"] = "1";
    test::write_bytes(dir / "encoder.json", good.encoder.dump());
    CHECK_THAT(load_error(dir.path()), Catch::Contains("token \"x\" has id \"1\""));
    good.encoder["x"] = 3;
    test::write_bytes(dir / "encoder.json", good.encoder.dump());
    CHECK_THAT(load_error(dir.path()), Catch::Contains("both have id 3"));
  }
  SECTION("a byte without its token") {
    good.encoder.erase(alphabet_char('\n'));
    good.encoder["zz"] = 10;
    test::write_bytes(dir / "encoder.json", good.encoder.dump());
    CHECK(load_error(dir.path()) == dir / "encoder.json" +
                                        ": no token for byte 0x0A (\"\u010a\"): a byte-level vocabulary has a "
                                        "token for each of the 256 bytes");
  }
  SECTION("no <|endoftext|>") {
    good.encoder.erase("<|endoftext|>");
    test::write_bytes(dir / "encoder.json", good.encoder.dump());
    CHECK(load_error(dir.path()) == dir / "encoder.json" + ": no <|endoftext|> token");
  }
  SECTION("a merge of unknown tokens") {
    test::write_bytes(dir / "vocab.bpe", "#version: 0.2\na b\nab q\n");
    CHECK(load_error(dir.path()) == dir / "vocab.bpe" + ":3: merge \"ab q\" makes \"abq\", which is not in " + dir / "encoder.json");
    test::write_bytes(dir / "vocab.bpe", "#version: 0.2\na b\nxy c\n");
    CHECK(load_error(dir.path()) == dir / "vocab.bpe" + ":3: merge \"xy c\": \"xy\" is not in " + dir / "encoder.json");
  }
  SECTION("a merge made twice, a line that is not a merge") {
    test::write_bytes(dir / "vocab.bpe", "#version: 0.2\na b\nab c\na b\n");
    CHECK(load_error(dir.path()) == dir / "vocab.bpe" + ":4: merge \"a b\" makes \"ab\", as line 2 does already");
    test::write_bytes(dir / "vocab.bpe", "#version: 0.2\na b c\n");
    CHECK_THAT(load_error(dir.path()), Catch::StartsWith(dir / "vocab.bpe" + ":2: expected a merge"));
  }
}

TEST_CASE("Hugging Face's tokenizer.json loads the same GPT-2 vocabulary, its merges as strings or pairs",
          "[tokenizer]") {
  ScratchDir dir;
  const VocabularyListing listing = list_gpt2_vocabulary(test::gpt2_hf_dir());
  nlohmann::json doc = nlohmann::json::parse(gpt2_tokenizer_json(listing));
  std::filesystem::create_directories(dir / "strings");
  std::filesystem::create_directories(dir / "pairs");
  test::write_bytes(dir / "strings/tokenizer.json", doc.dump());
  for (auto& merge : doc["model"]["merges"]) {  // the newer form: ["LEFT", "RIGHT"]
    const std::string m = merge.get<std::string>();
    merge = nlohmann::json::array({m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)});
  }
  test::write_bytes(dir / "pairs/tokenizer.json", doc.dump());

  const Gpt2Tokenizer two_files = Gpt2Tokenizer::load(test::gpt2_hf_dir());
  const std::string text = "Hello world, it's 2024: naïve café, 日本語 \U0001F44D\n\n  <|endoftext|> end";
  for (const std::string& path : {dir / "strings", dir / "strings/tokenizer.json", dir / "pairs"}) {
    INFO(path);
    const Gpt2Tokenizer t = Gpt2Tokenizer::load(path);
    CHECK(t.source() == (path.ends_with(".json") ? path : path + "/tokenizer.json"));
    CHECK(t.vocab_size() == 50257);
    CHECK(t.eot() == 50256);
    bool same = true;
    for (std::int32_t id = 0; id < t.vocab_size() && same; ++id) {
      same = t.decode_token(id) == two_files.decode_token(id);
    }
    CHECK(same);
    CHECK(t.encode(text) == two_files.encode(text));
  }
  // Listed again from tokenizer.json, the vocabulary is the files' (their text made anew).
  const VocabularyListing again = list_gpt2_vocabulary(dir / "pairs");
  CHECK(again.tokens == listing.tokens);
  CHECK(again.merges == listing.merges);
  CHECK(nlohmann::json::parse(vocab_json(again)) ==
        nlohmann::json::parse(test::read_bytes(test::gpt2_hf_dir() + "/vocab.json")));
  CHECK(merges_txt(again).starts_with("#version: 0.2\n\u0120 t\n"));
  CHECK(is_gpt2_tokenizer_json(dir / "pairs/tokenizer.json"));
}

TEST_CASE("a tokenizer.json of another kind than GPT-2's, or a byte-level one, is refused naming the key",
          "[tokenizer]") {
  ScratchDir toy, dir;
  const nlohmann::json good = nlohmann::json::parse(
      gpt2_tokenizer_json(list_gpt2_vocabulary(write_vocab(toy, toy_vocab({"a b", "ab c"})))));
  const std::string path = dir / "tokenizer.json";
  const auto error_with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json doc = good;
    doc[nlohmann::json::json_pointer(key)] = value;
    test::write_bytes(path, doc.dump());
    return load_error(dir.path());
  };
  test::write_bytes(path, good.dump());
  REQUIRE(load_error(dir.path()) == "(no error)");
  CHECK(is_gpt2_tokenizer_json(path));
  const std::string only = ": only GPT-2's byte-level BPE is supported";
  CHECK(error_with("/model/type", "WordPiece") == path + ": model.type is \"WordPiece\"" + only +
                                                    " (model.type \"BPE\", a \"ByteLevel\" pre_tokenizer with its "
                                                    "regex and no prefix space, no normalizer)");
  CHECK_THAT(error_with("/pre_tokenizer", {{"type", "Metaspace"}}),
             Catch::StartsWith(path + ": pre_tokenizer is {\"type\":\"Metaspace\"}" + only));
  CHECK_THAT(error_with("/pre_tokenizer/add_prefix_space", true), Catch::StartsWith(path + ": pre_tokenizer is "));
  CHECK_THAT(error_with("/pre_tokenizer/use_regex", false), Catch::StartsWith(path + ": pre_tokenizer is "));
  CHECK_THAT(error_with("/normalizer", {{"type", "NFC"}}),
             Catch::StartsWith(path + ": normalizer is {\"type\":\"NFC\"}"));
  CHECK_THAT(error_with("/model/continuing_subword_prefix", "##"),
             Catch::StartsWith(path + ": model.continuing_subword_prefix is \"##\""));
  CHECK_THAT(error_with("/model/ignore_merges", true), Catch::StartsWith(path + ": model.ignore_merges is true"));
  CHECK_THAT(error_with("/model/dropout", 0.1), Catch::StartsWith(path + ": model.dropout is 0.1"));
  CHECK(error_with("/model/dropout", 0.0) == "(no error)");
  CHECK(error_with("/model/merges/1", 7) ==
        path + ": model.merges[1]: expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"], got 7");
  CHECK(error_with("/model/merges/1", "ab q") ==
        path + ": model.merges[1]: merge \"ab q\" makes \"abq\", which is not in model.vocab");
  CHECK(error_with("/model/merges/1", "a b") ==
        path + ": model.merges[1]: merge \"a b\" makes \"ab\", as model.merges[0] does already");
  CHECK(error_with("/model/vocab", nlohmann::json::array()) ==
        path + ": model.vocab: expected a JSON object mapping each token to its id, got array");
  CHECK_THAT(error_with("/pre_tokenizer/add_prefix_space", "no"),
             Catch::StartsWith(path + ": not a tokenizer.json as Hugging Face writes one: "));
  test::write_bytes(path, "{\"model\": ");
  CHECK_THAT(load_error(dir.path()), Catch::StartsWith(path + ":1: not valid JSON"));

  // A byte-level model's tokenizer.json (our exports of one) is not a GPT-2 vocabulary.
  test::write_bytes(path, byte_level_tokenizer_json());
  CHECK_FALSE(is_gpt2_tokenizer_json(path));
  CHECK_THAT(load_error(dir.path()), Catch::StartsWith(path + ": pre_tokenizer is "));  // no regex: the bytes whole
}
