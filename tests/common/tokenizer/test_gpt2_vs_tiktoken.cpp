// Our GPT-2 encoder against js-tiktoken's `gpt2` encoding (scripts/gpt2-reference.cjs), token for
// token, on several megabytes of varied text: Debian's fortunes and license texts, the fortunes
// rewritten into other scripts, digits, white space, line endings and case, a sweep over the
// Unicode code points, white-space and contraction edge cases, and random byte soup. Also: the
// character class table against the JavaScript engine's regex classes, for every code point; and
// the tokenizer.json we write (for GPT-2's vocabulary and for bytes) loaded by Hugging Face's
// Tokenizers.js, on the same text, against our tokens and text.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/tokenizer/gpt2_pretokenizer.hpp"
#include "common/tokenizer/gpt2_tokenizer.hpp"
#include "common/tokenizer/hf_tokenizer_json.hpp"
#include "common/tokenizer/unicode_classes.hpp"
#include "tests/common/tokenizer/gpt2_reference.hpp"
#include "tests/worker/test_files.hpp"

using namespace xtrain;
namespace fs = std::filesystem;

namespace {

struct Document {
  std::string kind;
  std::string bytes;  // what both tokenizers get; may be ill-formed UTF-8 ("byte soup")
};

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// What a UTF-8 decoder with replacement reads: each ill-formed sequence becomes U+FFFD.
std::string replace_ill_formed(std::string_view bytes) {
  std::string out;
  for (std::size_t pos = 0; pos < bytes.size();) {
    const Utf8Unit u = decode_utf8(bytes, pos);
    out += u.valid ? bytes.substr(pos, u.length) : std::string_view("\xEF\xBF\xBD");
    pos += u.length;
  }
  return out;
}

std::vector<std::string> regular_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every fortune of Debian's fortunes packages (entries are separated by lines holding "%").
std::vector<std::string> fortunes() {
  std::vector<std::string> out;
  for (const std::string& file : regular_files("/usr/share/games/fortunes")) {
    const std::string text = test::read_bytes(file);
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t end = text.find("\n%\n", pos);
      if (end == std::string::npos) end = text.size();
      out.push_back(text.substr(pos, end + 1 - pos));
      pos = end + 3;
    }
  }
  return out;
}

// Every Unicode White_Space character, and three look-alikes that are not (BOM, ZWSP, MVS).
const std::vector<char32_t> kSpaces = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,
                                       0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                       0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F,
                                       0x3000, 0xFEFF, 0x200B, 0x180E};
// Zero digits of other scripts (Nd), and runs of letters of other scripts (L*), to map ASCII onto.
const std::vector<char32_t> kZeros = {0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0x0F20, 0x1040, 0xFF10, 0x1D7CE, 0x104A0};
const std::vector<char32_t> kAlphabets = {0x03B1, 0x0430, 0x0561, 0x05D0, 0x0627, 0x0915, 0x0E01, 0x10D0,
                                          0x1200, 0x13A0, 0x3041, 0x4E00, 0xAC00, 0x1D41A, 0x10428, 0x10300};

// One fortune rewritten in one of six ways, so the tokenizers meet other scripts, digits, spaces,
// line endings, case (and contractions like 'S 'LL), combining marks and emoji in real text.
std::string variant(const std::string& text, std::size_t which, std::size_t seed) {
  std::string out;
  std::size_t k = seed;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool letter = std::isalpha(c) != 0;
    switch (which % 6) {
      case 0: out += static_cast<char>(std::toupper(c)); break;
      case 1: out += c == '\n' ? "\r\n" : std::string(1, ch); break;
      case 2: out += c == ' ' ? utf8(kSpaces[k++ % kSpaces.size()]) : std::string(1, ch); break;
      case 3: out += std::isdigit(c) ? utf8(kZeros[seed % kZeros.size()] + (c - '0')) : std::string(1, ch); break;
      case 4:
        out += letter ? utf8(kAlphabets[seed % kAlphabets.size()] + (std::tolower(c) - 'a')) : std::string(1, ch);
        break;
      default:  // combining marks after vowels, emoji for full stops
        out += ch;
        if (std::strchr("aeiou", c) && c != 0) out += utf8(0x0300 + static_cast<char32_t>(k++ % 0x70));
        if (c == '.') out += (k++ % 2) ? "\U0001F44D\U0001F3FD" : "\U0001F468\u200D\U0001F469\u200D\U0001F467";
    }
  }
  return out;
}

// Hand-written and combinatorial edge cases: contractions in every case and quote, numbers,
// scripts, emoji, <|endoftext|>, and every kind of white space in runs before letters, digits,
// punctuation, other spaces and the end of the text.
std::vector<std::string> edge_cases() {
  std::vector<std::string> docs = {
      "it's they're I've I'm we'll he'd don't 's 't 're 've 'm 'll 'd",
      "IT'S THEY'RE I'VE I'M WE'LL HE'D DON'T 'S 'T 'RE 'VE 'M 'LL 'D 'Ll 'lL 'Re",
      "it\u2019s they\u2019re don\u2019t \u2018quoted\u2019 ''s '''t ' s 's's'sss 'steve 'dd '", "'", "''", " '", "'s",
      "$100.50, 1,000,000.00 3.14159e-10 0x7FFF 1st 2nd 10am \u00bd \u00b2 \u2163 \u0663\u0664 \u0969\u096a",
      "na\u00efve caf\u00e9 cafe\u0301 \u1e9b\u0323 \u0915\u094d\u0937 \u0e01\u0e34\u0e19 \u1100\u1161\u11a8",
      "\u4e2d\u6587\u5b57 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 \U00020000\U0002A6DF",
      "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea \u200f\u202b mixed \u202c",
      "\U0001F600\U0001F44D\U0001F3FD \U0001F1EB\U0001F1F7 1\uFE0F\u20E3 \U0001F468\u200D\U0001F469\u200D\U0001F467 \u2764\uFE0F",
      "<|endoftext|> between <|endoftext|><|endoftext|>text",
      "\x01\x02\x1b[31mred\x1b[0m\x7f \u00ad\u200d\u2060 tab\there",
      "line\r\nline\r\n\r\n\r\nend\r\n", "   leading", "trailing   ", "\n\n\n", " ", "\t \n \u3000", ""};
  for (const char32_t s : kSpaces) {
    for (int run = 1; run <= 3; ++run) {
      std::string spaces;
      for (int i = 0; i < run; ++i) spaces += utf8(s);
      for (const char* after : {"a", "1", "!", "", "\n", " a", "\u00e9", "\u0301", "'s", "\u3000x"}) {
        docs.push_back(spaces + after);
        docs.push_back("x" + spaces + after);
        docs.push_back("9" + utf8(s) + " " + spaces + after);
      }
    }
  }
  return docs;
}

// The classes of every code point as the reference's regex engine sees them, and its Unicode version.
struct EngineClasses {
  std::string bytes;  // one UnicodeClass value per code point
  std::string unicode_version;
};

const EngineClasses& engine_classes() {
  static const EngineClasses classes = [] {
    test::ScratchDir dir;
    EngineClasses c;
    c.unicode_version = test::run_reference("classes " + test::shell_quote(dir / "classes.bin"));
    c.bytes = test::read_bytes(dir / "classes.bin");
    return c;
  }();
  return classes;
}

UnicodeClass our_class(char32_t c) { return unicode_class(c); }
UnicodeClass engine_class(char32_t c) { return static_cast<UnicodeClass>(engine_classes().bytes.at(c)); }
UnicodeClass as_regex_sees(UnicodeClass c) { return c == UnicodeClass::kUnassigned ? UnicodeClass::kOther : c; }

// Each code point in a few contexts that expose its class ("a" c: letter run? "1" c: number run?
// "!" c: other run? " " c: space run?): every code point where our class changes, and every 13th
// one, except those the engine's Unicode version classifies differently (see the class test).
std::vector<std::string> unicode_sweep() {
  std::vector<std::string> docs;
  std::string doc;
  for (char32_t c = 1; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const bool edge = our_class(c) != our_class(c - 1) || (c < 0x10FFFF && our_class(c) != our_class(c + 1));
    if (!edge && c % 13 != 0) continue;
    if (as_regex_sees(our_class(c)) != as_regex_sees(engine_class(c))) continue;
    const std::string s = utf8(c);
    doc += "a" + s + "1" + s + "!" + s + " " + s + s + "\n";
    if (doc.size() > 16384) docs.push_back(std::move(doc)), doc.clear();
  }
  docs.push_back(doc);
  return docs;
}

// Random bytes, and random mixtures of well-formed characters with every kind of ill-formed sequence.
std::vector<std::string> byte_soup() {
  std::mt19937 rng(20240520);
  const std::vector<std::string> ill_formed = {"\x80", "\xbf", "\xc0\xaf", "\xc1", "\xe0\x80\x80", "\xed\xa0\x80",
                                               "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5", "\xff", "\xfe",
                                               "\xe4\xb8", "\xf0\x9f\x98", "\xc3"};
  const std::string ascii = "abcXYZ019 !?.,'\n\t-";
  std::vector<std::string> docs;
  for (int d = 0; d < 400; ++d) {
    std::string doc;
    const int n = static_cast<int>(rng() % 1500) + 1;
    for (int i = 0; i < n; ++i) {
      if (d % 2 == 0) {
        doc += static_cast<char>(rng() & 0xFF);
        continue;
      }
      switch (rng() % 4) {
        case 0: doc += ill_formed[rng() % ill_formed.size()]; break;
        case 1: {
          char32_t c = rng() % 0x110000;
          if (c >= 0xD800 && c <= 0xDFFF) c -= 0x800;
          doc += utf8(c);
          break;
        }
        default: doc += ascii[rng() % ascii.size()];
      }
    }
    docs.push_back(doc);
  }
  return docs;
}

std::vector<Document> corpus() {
  std::vector<Document> docs;
  const std::vector<std::string> all_fortunes = fortunes();
  for (const std::string& f : all_fortunes) docs.push_back({"fortunes", f});
  for (const std::string& file : regular_files("/usr/share/common-licenses")) {
    docs.push_back({"licenses", test::read_bytes(file)});
  }
  for (std::size_t i = 0; i < all_fortunes.size(); i += 4) {
    docs.push_back({"rewritten fortunes", variant(all_fortunes[i], i / 4, i)});
  }
  for (const std::string& s : edge_cases()) docs.push_back({"edge cases", s});
  for (const std::string& s : unicode_sweep()) docs.push_back({"unicode sweep", s});
  for (const std::string& s : byte_soup()) docs.push_back({"byte soup", s});
  return docs;
}

// Runs the reference's `command` (its arguments before DOCS OUT) over the documents, in one file;
// returns what it wrote.
std::string run_on_documents(const std::vector<Document>& docs, const std::string& command) {
  test::ScratchDir dir;
  std::string framed;
  for (const Document& d : docs) {
    const auto n = static_cast<std::uint32_t>(d.bytes.size());
    framed.append(reinterpret_cast<const char*>(&n), 4).append(d.bytes);
  }
  test::write_bytes(dir / "docs.bin", framed);
  test::run_reference(command + " " + test::shell_quote(dir / "docs.bin") + " " + test::shell_quote(dir / "out.bin"));
  return test::read_bytes(dir / "out.bin");
}

// The uint32 count at `pos` and that many items after it (a document's int32 tokens, or the chars
// of its text), moving `pos` past them.
template <typename T>
std::vector<T> read_counted(const std::string& out, std::size_t& pos) {
  std::uint32_t n = 0;
  if (pos + 4 > out.size()) throw std::runtime_error("the reference's output ends early");
  std::memcpy(&n, out.data() + pos, 4);
  if (pos + 4 + sizeof(T) * n > out.size()) throw std::runtime_error("the reference's output ends early");
  std::vector<T> items(n);
  std::memcpy(items.data(), out.data() + pos + 4, sizeof(T) * n);
  pos += 4 + sizeof(T) * n;
  return items;
}

std::vector<std::vector<std::int32_t>> reference_encode(const std::vector<Document>& docs, bool stock) {
  const std::string out = run_on_documents(docs, stock ? "encode --stock" : "encode");
  std::vector<std::vector<std::int32_t>> tokens;
  for (std::size_t pos = 0; pos < out.size();) tokens.push_back(read_counted<std::int32_t>(out, pos));
  return tokens;
}

std::string describe_mismatch(const Gpt2Tokenizer& t, const std::vector<std::int32_t>& ours,
                              const std::vector<std::int32_t>& theirs) {
  std::size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  const auto window = [&](const std::vector<std::int32_t>& v) {
    std::string s;
    for (std::size_t j = i >= 3 ? i - 3 : 0; j < std::min(v.size(), i + 4); ++j) {
      s += std::to_string(v[j]) + "(" + t.decode_token(v[j]) + ") ";
    }
    return s;
  };
  return "first difference at token " + std::to_string(i) + "\n  ours:   " + window(ours) + "\n  theirs: " + window(theirs);
}

bool has_js_space_difference(std::string_view text) {  // U+0085 or U+FEFF
  return text.find("\xC2\x85") != std::string_view::npos || text.find("\xEF\xBB\xBF") != std::string_view::npos;
}

}  // namespace

TEST_CASE("the class table agrees with the regex engine on every code point assigned in both versions", "[tokenizer]") {
  std::map<std::pair<int, int>, int> differences;  // (ours, engine) -> code points
  int unexplained = 0;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    const UnicodeClass ours = our_class(c), theirs = engine_class(c);
    if (as_regex_sees(ours) == as_regex_sees(theirs)) continue;
    ++differences[{static_cast<int>(ours), static_cast<int>(theirs)}];
    // A code point new in one of the two versions is the only acceptable difference.
    if (ours != UnicodeClass::kUnassigned && theirs != UnicodeClass::kUnassigned) ++unexplained;
  }
  std::printf("class table: Unicode %s (ours) vs %s (node %s)\n", std::string(unicode_version()).c_str(),
              engine_classes().unicode_version.c_str(), test::run_command("node --version").c_str());
  for (const auto& [classes, count] : differences) {
    std::printf("  %d code points: ours %d, engine %d (unassigned in one version)\n", count, classes.first,
                classes.second);
  }
  CHECK(unexplained == 0);
  if (engine_classes().unicode_version + ".0" == unicode_version()) CHECK(differences.empty());
}

TEST_CASE("our encoder matches js-tiktoken token for token on megabytes of varied text", "[tokenizer]") {
  const std::vector<Document> docs = corpus();
  const Gpt2Tokenizer openai = Gpt2Tokenizer::load(test::gpt2_openai_dir());
  const Gpt2Tokenizer hf = Gpt2Tokenizer::load(test::gpt2_hf_dir());
  const auto reference = reference_encode(docs, /*stock=*/false);
  REQUIRE(reference.size() == docs.size());

  struct Counts {
    std::size_t docs = 0, bytes = 0, tokens = 0, mismatches = 0, round_trip_failures = 0;
  };
  std::map<std::string, Counts> by_kind;
  Counts total;
  std::vector<std::vector<std::int32_t>> ours(docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Document& d = docs[i];
    // The reference reads ill-formed UTF-8 as U+FFFD; we encode the same text. The raw bytes
    // must round-trip, in pieces that are those of the replaced text.
    const std::string text = replace_ill_formed(d.bytes);
    ours[i] = openai.encode(text);
    Counts& c = by_kind[d.kind];
    ++c.docs;
    c.bytes += d.bytes.size();
    c.tokens += ours[i].size();
    if (ours[i] != reference[i]) {
      if (c.mismatches++ == 0) UNSCOPED_INFO(d.kind << " document " << i << ": " << describe_mismatch(openai, ours[i], reference[i]));
    }
    if (openai.decode(openai.encode(d.bytes)) != d.bytes) ++c.round_trip_failures;
    if (text != d.bytes) {
      std::vector<std::string> replaced_pieces;
      for (const std::string_view p : gpt2_pieces(d.bytes)) replaced_pieces.push_back(replace_ill_formed(p));
      std::vector<std::string> text_pieces;
      for (const std::string_view p : gpt2_pieces(text)) text_pieces.emplace_back(p);
      CHECK(replaced_pieces == text_pieces);
    }
  }
  std::printf("GPT-2 encoder vs js-tiktoken (gpt2, \\s = White_Space):\n  %-20s %7s %10s %10s %10s %10s\n", "kind", "docs",
              "bytes", "tokens", "mismatches", "round trip");
  for (const auto& [kind, c] : by_kind) {
    std::printf("  %-20s %7zu %10zu %10zu %10zu %10zu\n", kind.c_str(), c.docs, c.bytes, c.tokens, c.mismatches,
                c.round_trip_failures);
    total.docs += c.docs, total.bytes += c.bytes, total.tokens += c.tokens, total.mismatches += c.mismatches,
        total.round_trip_failures += c.round_trip_failures;
  }
  std::printf("  %-20s %7zu %10zu %10zu %10zu %10zu\n", "total", total.docs, total.bytes, total.tokens,
              total.mismatches, total.round_trip_failures);
  CHECK(total.bytes >= 5'000'000);
  CHECK(total.mismatches == 0);
  CHECK(total.round_trip_failures == 0);

  // Hugging Face's form of the same vocabulary encodes identically.
  std::size_t hf_mismatches = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) hf_mismatches += hf.encode(replace_ill_formed(docs[i].bytes)) != ours[i];
  std::printf("  vocab.json + merges.txt vs encoder.json + vocab.bpe: %zu mismatching documents\n", hf_mismatches);
  CHECK(hf_mismatches == 0);
}

TEST_CASE("stock js-tiktoken differs only on U+0085 and U+FEFF, where JavaScript's white space is not Unicode's", "[tokenizer]") {
  std::vector<Document> docs;
  for (const std::string& s : edge_cases()) docs.push_back({"edge cases", s});
  const auto stock = reference_encode(docs, /*stock=*/true);
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(test::gpt2_openai_dir());
  int differing = 0, unexplained = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (t.encode(docs[i].bytes) == stock[i]) continue;
    ++differing;
    if (!has_js_space_difference(docs[i].bytes)) {
      ++unexplained;
      UNSCOPED_INFO("document " << i << ": " << describe_mismatch(t, t.encode(docs[i].bytes), stock[i]));
    }
  }
  std::printf("stock js-tiktoken: %d of %zu edge-case documents differ, all holding U+0085 or U+FEFF\n", differing,
              docs.size());
  CHECK(differing > 0);
  CHECK(unexplained == 0);
}

namespace {

// What Hugging Face's tokenizers give for GPT-2's vocabulary: <|endoftext|> in the text is their
// added special token; the text between is ours.
std::vector<std::int32_t> encode_with_special_eot(const Gpt2Tokenizer& t, const std::string& text) {
  static constexpr std::string_view kEot = "<|endoftext|>";
  std::vector<std::int32_t> out;
  for (std::size_t pos = 0;;) {
    const std::size_t at = text.find(kEot, pos);
    const std::vector<std::int32_t> part = t.encode(text.substr(pos, at == std::string::npos ? at : at - pos));
    out.insert(out.end(), part.begin(), part.end());
    if (at == std::string::npos) return out;
    out.push_back(t.eot());
    pos = at + kEot.size();
  }
}

}  // namespace

TEST_CASE("the tokenizer.json we write, loaded by Hugging Face's Tokenizers.js, encodes and decodes as ours",
          "[tokenizer]") {
  const std::vector<Document> docs = corpus();
  const Gpt2Tokenizer t = Gpt2Tokenizer::load(test::gpt2_hf_dir());
  // Either form of the vocabulary writes the same file: the vocabulary in id order, the merges in theirs.
  CHECK(gpt2_tokenizer_json(list_gpt2_vocabulary(test::gpt2_openai_dir())) ==
        gpt2_tokenizer_json(list_gpt2_vocabulary(test::gpt2_hf_dir())));
  test::ScratchDir dir;
  fs::create_directories(dir / "gpt2");
  fs::create_directories(dir / "bytes");
  test::write_bytes(dir / "gpt2/tokenizer.json", gpt2_tokenizer_json(list_gpt2_vocabulary(test::gpt2_hf_dir())));
  test::write_bytes(dir / "gpt2/tokenizer_config.json", gpt2_tokenizer_config(1024));
  test::write_bytes(dir / "bytes/tokenizer.json", byte_level_tokenizer_json());
  test::write_bytes(dir / "bytes/tokenizer_config.json", byte_level_tokenizer_config(1024));
  const std::string gpt2_out = run_on_documents(docs, "hf-encode " + test::shell_quote(dir / "gpt2"));
  const std::string bytes_out = run_on_documents(docs, "hf-encode " + test::shell_quote(dir / "bytes"));

  struct Counts {
    std::size_t differing = 0, unexplained = 0, decode_failures = 0, byte_differences = 0;
  } c;
  std::size_t gpt2_pos = 0, bytes_pos = 0;
  for (const Document& d : docs) {
    // Tokenizers.js reads ill-formed UTF-8 as U+FFFD, as js-tiktoken does.
    const std::string text = replace_ill_formed(d.bytes);
    const std::vector<std::int32_t> ours = encode_with_special_eot(t, text);
    const auto theirs = read_counted<std::int32_t>(gpt2_out, gpt2_pos);
    const auto decoded = read_counted<char>(gpt2_out, gpt2_pos);
    if (theirs != ours) {
      ++c.differing;
      if (!has_js_space_difference(text) && c.unexplained++ == 0) {
        UNSCOPED_INFO(d.kind << ": " << describe_mismatch(t, ours, theirs));
      }
    }
    if (std::string(decoded.begin(), decoded.end()) != text) ++c.decode_failures;
    const auto byte_tokens = read_counted<std::int32_t>(bytes_out, bytes_pos);
    const auto byte_decoded = read_counted<char>(bytes_out, bytes_pos);
    std::vector<std::int32_t> bytes;
    for (const char ch : text) bytes.push_back(static_cast<unsigned char>(ch));
    if (byte_tokens != bytes || std::string(byte_decoded.begin(), byte_decoded.end()) != text) ++c.byte_differences;
  }
  std::printf("tokenizer.json in Tokenizers.js, %zu documents: GPT-2's vocabulary: %zu differ (%zu not on U+0085 or "
              "U+FEFF), %zu decode to other text; bytes: %zu differ\n",
              docs.size(), c.differing, c.unexplained, c.decode_failures, c.byte_differences);
  CHECK((gpt2_pos == gpt2_out.size() && bytes_pos == bytes_out.size()));  // a document each, nothing more
  CHECK(c.unexplained == 0);
  CHECK(c.decode_failures == 0);
  CHECK(c.byte_differences == 0);
}
