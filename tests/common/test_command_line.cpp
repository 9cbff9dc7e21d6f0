// The commands' argument walk (common/command_line.hpp): values in both spellings, flags,
// positionals in order, and one error naming the argument for each mistake.
#include <catch2/catch.hpp>

#include <climits>
#include <string>
#include <vector>

#include "common/command_line.hpp"
#include "common/did_you_mean.hpp"

using xtrain::BadInput;
using xtrain::CommandLine;

namespace {

struct Parsed {
  std::string data;
  long long count = -1;
  bool quiet = false;
  std::vector<std::string> positionals;
};

Parsed walk(std::vector<std::string> args) {
  args.insert(args.begin(), "cmd");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  p.positionals = CommandLine("usage\n", "cmd --help")
                      .option("--data", [&](const std::string& v) { p.data = v; })
                      .option("--count", [&](const std::string& v) { p.count = xtrain::parse_integer("--count", v, 1, 9); })
                      .flag("--quiet", [&] { p.quiet = true; })
                      .parse(static_cast<int>(argv.size()), argv.data());
  return p;
}

}  // namespace

TEST_CASE("command line: --flag VALUE and --flag=VALUE, flags and positionals in order", "[command_line]") {
  const Parsed p = walk({"a", "--data", "x y", "-", "--count=3", "--quiet", "b", "--data=k=v"});
  CHECK(p.data == "k=v");  // the last one wins; only the first '=' splits
  CHECK(p.count == 3);
  CHECK(p.quiet);
  CHECK(p.positionals == std::vector<std::string>{"a", "-", "b"});
  CHECK(walk({"--data="}).data.empty());  // an empty value is a value
  CHECK(walk({}).positionals.empty());
}

TEST_CASE("command line: each mistake is one error naming the argument and the help", "[command_line]") {
  CHECK_THROWS_WITH(walk({"--bogus"}), "command line: unknown option \"--bogus\" (see cmd --help)");
  CHECK_THROWS_WITH(walk({"-x"}), "command line: unknown option \"-x\" (see cmd --help)");
  CHECK_THROWS_WITH(walk({"--bogus=1"}), "command line: unknown option \"--bogus\" (see cmd --help)");
  // A typo of an option: the option it was meant to be.
  CHECK_THROWS_WITH(walk({"--cuont", "3"}), "command line: unknown option \"--cuont\" (did you mean \"--count\"?) "
                                            "(see cmd --help)");
  CHECK_THROWS_WITH(walk({"--quite"}),
                    "command line: unknown option \"--quite\" (did you mean \"--quiet\"?) (see cmd --help)");
  CHECK_THROWS_WITH(walk({"a", "--data"}), "command line: --data needs a value (see cmd --help)");
  CHECK_THROWS_WITH(walk({"--quiet=yes"}), "command line: --quiet takes no value (see cmd --help)");
  CHECK_THROWS_AS(walk({"--data"}), BadInput);
  // A handler's own error comes through as it is.
  CHECK_THROWS_WITH(walk({"--count", "0"}), "--count: expected an integer >= 1 and <= 9, got \"0\"");
}

TEST_CASE("command line: integers and numbers are whole and in range, or an error that quotes them", "[command_line]") {
  using xtrain::parse_integer;
  using xtrain::parse_number;
  CHECK(parse_integer("--n", "0", 0) == 0);
  CHECK(parse_integer("--n", "-5", -5, 5) == -5);
  CHECK(parse_integer("--n", "9223372036854775807", 0) == LLONG_MAX);
  CHECK_THROWS_WITH(parse_integer("--n", "9223372036854775808", 0),
                    "--n: expected an integer >= 0, got \"9223372036854775808\"");
  for (const char* bad : {"", "1.5", "3x", " 3", "1e3"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_integer("--n", bad, 1), std::string("--n: expected an integer >= 1, got \"") + bad + "\"");
  }
  CHECK_THROWS_WITH(parse_integer("--n", "6", 1, 5), "--n: expected an integer >= 1 and <= 5, got \"6\"");
  CHECK(parse_number("--t", "0.25") == 0.25);
  CHECK(parse_number("--t", "-1e-3") == -1e-3);
  for (const char* bad : {"", "nan", "inf", "1,5", "0.5s", " 1"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_number("--t", bad), std::string("--t: expected a number, got \"") + bad + "\"");
  }
}

TEST_CASE("did you mean: the known name one typo away, two for a long one, a swap counted once", "[command_line]") {
  using xtrain::closest_name;
  using xtrain::spelling_distance;
  using xtrain::typo_edits;
  CHECK(spelling_distance("status", "stauts") == 1);  // a swap of neighbours
  CHECK(spelling_distance("--dry-run", "--dryrun") == 1);
  CHECK(spelling_distance("kitten", "sitting") == 3);
  CHECK(spelling_distance("", "abc") == 3);
  CHECK(spelling_distance("abc", "") == 3);
  CHECK(spelling_distance("ca", "abc") == 3);  // no edit of a swapped pair again (optimal string alignment)
  const std::vector<std::string> known = {"--job", "--dry-run", "--nproc-per-node"};
  CHECK(closest_name("--dryrun", known, typo_edits("--dryrun")) == "--dry-run");
  CHECK(closest_name("--nproc-per-nod", known, typo_edits("--nproc-per-nod")) == "--nproc-per-node");
  CHECK(closest_name("--foo", known, typo_edits("--foo")).empty());  // two edits from --job: not a typo of it
  CHECK(closest_name("--jbo", known, typo_edits("--jbo")) == "--job");
}
