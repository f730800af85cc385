// The constraint engine against independent oracles: std::regex for regular expressions,
// nlohmann::json for JSON, and brute force for token masks (a token is allowed exactly when
// its bytes keep the automaton alive).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "constraint/compiled_grammar.h"
#include "constraint/constraint_cache.h"
#include "constraint/ebnf_parser.h"
#include "constraint/grammar_matcher.h"
#include "constraint/json_schema_compiler.h"
#include "constraint/mask_prefetcher.h"
#include "constraint/number_range.h"
#include "constraint/packed_stacks.h"
#include "constraint/regex_compiler.h"
#include "constraint/utf8_ranges.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/full_match.h"
#include "worker/engine/generation.h"

namespace walsh {
namespace {

// A vocabulary with every byte, then `extra` random tokens of 2..6 bytes drawn mostly from
// JSON's punctuation, letters and digits.
std::shared_ptr<const TokenTrie> SmallVocabulary(int extra, uint32_t seed) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  const std::string alphabet = "{}[]\":, abcxyz019-.eE\\ntruefalsn\xc3\xa9";
  std::mt19937 rng(seed);
  for (int i = 0; i < extra; ++i) {
    std::string t;
    const int len = 2 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    tokens.push_back(t);
  }
  tokens.push_back("");  // a control token: never in the trie
  return std::make_shared<const TokenTrie>(tokens);
}

std::shared_ptr<const CompiledGrammar> Compile(const absl::StatusOr<Grammar>& g,
                                               std::shared_ptr<const TokenTrie> trie) {
  EXPECT_TRUE(g.ok()) << g.status();
  return std::make_shared<const CompiledGrammar>(*g, std::move(trie));
}

using testing::FullMatch;

bool Bit(const std::vector<uint64_t>& bits, int64_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }

// Walks random allowed tokens, checking each step's mask against brute force.
void CheckMasksAlongRandomWalks(std::shared_ptr<const CompiledGrammar> g, int walks, int steps,
                                uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t vocab = g->trie().vocab_size();
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g);
    for (int step = 0; step < steps && !m.MustEnd(); ++step) {
      std::vector<uint64_t> mask;
      m.FillMask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab; ++id) {
        GrammarMatcher probe = m;
        const bool brute = probe.AcceptToken(id);
        // Plain comparisons: this loop runs hundreds of thousands of times.
        if (m.Accepts(id) != brute || Bit(mask, id) != brute) {
          FAIL() << "token " << id << " '" << g->trie().bytes(id) << "' at step " << step
                 << " of walk " << w << ": brute force " << brute << ", Accepts " << m.Accepts(id)
                 << ", mask " << Bit(mask, id);
        }
        if (brute) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
    }
  }
}

TEST(Utf8Ranges, EncodeExactlyTheRange) {
  for (auto [lo, hi] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 0x10FFFF},
                                                                  {0x7F, 0x800},
                                                                  {0x20, 0x21},
                                                                  {0xD700, 0xE100},
                                                                  {0x10000, 0x10FFFF},
                                                                  {0x3A0, 0x1F600}}) {
    const auto seqs = Utf8Sequences(lo, hi);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string utf8;
      if (cp < 0x80) {
        utf8 = std::string(1, static_cast<char>(cp));
      } else if (cp < 0x800) {
        utf8 = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      } else if (cp < 0x10000) {
        utf8 = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                static_cast<char>(0x80 | (cp & 0x3F))};
      } else {
        utf8 = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                static_cast<char>(0x80 | (cp & 0x3F))};
      }
      int matches = 0;
      for (const auto& seq : seqs) {
        if (seq.size() != utf8.size()) continue;
        bool all = true;
        for (size_t i = 0; i < seq.size(); ++i) {
          const uint8_t b = static_cast<uint8_t>(utf8[i]);
          all = all && b >= seq[i].lo && b <= seq[i].hi;
        }
        matches += all;
      }
      ASSERT_EQ(matches, cp >= lo && cp <= hi ? 1 : 0) << std::hex << cp;
    }
  }
}

TEST(Regex, AgreesWithStdRegexOnAscii) {
  auto trie = SmallVocabulary(0, 1);
  const std::vector<std::string> patterns = {
      "abc",       "a|b|cd", "(ab)*c",       "[a-c]+x?",     "a{2,3}",
      "a{2,}b",    "a{0}b",  "(a|b){1,2}c*", "[^abc]z",      "\\d+\\.\\d*",
      "\\w\\s\\W", ".{3}",   "^x(?:y|z)+$",  "[\\]\\-a]+",   "(a*)*b",
      "(?<n>ab)+", "a+?b",   "[-a]",         "\\x41\\u0042", "(|a)b"};
  std::vector<std::string> texts = {"",        "a",    "b",   "c",   "ab",  "abc",  "cd",
                                    "abababc", "acx",  "bbx", "aa",  "aaa", "aaaa", "aaab",
                                    "b",       "abbc", "zz",  "dz",  "12.", "1.5",  "a b",
                                    "a\nb",    "x y",  "xyz", "xzy", "]-a", "AB",   "-a"};
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int len = static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) t += "abcxyz1. -]\n"[rng() % 12];
    texts.push_back(t);
  }
  for (const std::string& p : patterns) {
    auto g = Compile(RegexGrammar(p), trie);
    if (p.find("?<") != std::string::npos) continue;  // std::regex lacks named groups
    const std::regex re(
        p.substr(p[0] == '^' ? 1 : 0, p.size() - (p[0] == '^') - (p.back() == '$' ? 1 : 0)),
        std::regex::ECMAScript);
    for (const std::string& t : texts) {
      EXPECT_EQ(FullMatch(*g, t), std::regex_match(t, re)) << "/" << p << "/ on '" << t << "'";
    }
  }
  auto named = Compile(RegexGrammar("(?<n>ab)+"), trie);
  EXPECT_TRUE(FullMatch(*named, "abab"));
  EXPECT_FALSE(FullMatch(*named, "aba"));
}

TEST(Regex, NonAsciiClassesAreWholeCharacters) {
  auto g = Compile(RegexGrammar("[é-ë]+\\u00ff."), SmallVocabulary(0, 1));
  EXPECT_TRUE(FullMatch(*g, "éêëÿ😀"));
  EXPECT_FALSE(FullMatch(*g, "\xc3\xa9\xc3"));  // half a character
  EXPECT_FALSE(FullMatch(*g, "eÿx"));
}

TEST(Regex, RefusesWhatItDoesNotSupportByName) {
  for (auto [pattern, message] : std::vector<std::pair<std::string, std::string>>{
           {"a(?=b)", "lookaround"},
           {"(a)\\1", "backreferences"},
           {"\\bword", "word boundaries"},
           {"a^b", "'^' is supported only at the start"},
           {"(ab", "a missing ')'"},
           {"[ab", "unterminated character class"},
           {"*a", "nothing to repeat"},
           {"a{3,2}", "below its minimum"},
           {"a{5000}", "above 2000"},
           {"\\p{L}", "Unicode property escapes"},
           {"[z-a]", "out of order"},
           {"\xff", "ill-formed UTF-8"}}) {
    auto g = RegexGrammar(pattern);
    ASSERT_FALSE(g.ok()) << pattern;
    EXPECT_NE(g.status().message().find(message), std::string::npos)
        << pattern << ": " << g.status();
    EXPECT_NE(g.status().message().find("regex"), std::string::npos) << g.status();
  }
}

TEST(Ebnf, ParsesTheDocumentedExample) {
  const char* grammar = R"(
    root   ::= object
    object ::= "{" ws ( pair ( "," ws pair )* )? "}"   # a comment
    pair   ::= [a-z]+ ":" ws ( "true" | "false" | [0-9]{1,3} )
    ws     ::= [ \t\n]*
  )";
  auto g = Compile(ParseEbnf(grammar), SmallVocabulary(0, 1));
  EXPECT_TRUE(FullMatch(*g, "{}"));
  EXPECT_TRUE(FullMatch(*g, "{ a:true, bc: 123}"));
  EXPECT_FALSE(FullMatch(*g, "{a:1234}"));
  EXPECT_FALSE(FullMatch(*g, "{A:true}"));
  EXPECT_FALSE(FullMatch(*g, "{a:true,}"));
}

TEST(Ebnf, RefusesBadGrammarsNamingTheRule) {
  for (auto [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"root ::= a", "rule 'a' is used but not defined"},
           {"root ::= root \"x\" | \"y\"", "rule 'root' is left-recursive"},
           {"root ::= a\na ::= \"\"? root", "left-recursive"},
           {"start ::= \"x\"", "no rule 'root'"},
           {"root ::= \"x", "unterminated string"},
           {"root ::= \"x\"\nroot ::= \"y\"", "rule 'root' is defined twice"},
           {"root = \"x\"", "expected '::=' after rule name 'root'"},
           {"root ::= [^\\u0000-\\u{10FFFF}]", "matches no text"},
           {"root ::= ( \"x\" ", "a missing ')'"}}) {
    auto g = ParseEbnf(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.status().message().find(message), std::string::npos) << text << ": " << g.status();
  }
}

TEST(Ebnf, EmbedsJsonSchemas) {
  auto g = Compile(ParseEbnf(R"(root ::= call ("\n" call)*
    call ::= "<call>" ( %json {"type": "object", "properties": {"x": {"type": "integer"}},
                               "required": ["x"]} | "none" ) "</call>")"),
                   SmallVocabulary(0, 1));
  EXPECT_TRUE(FullMatch(*g, "<call>{\"x\":5}</call>\n<call>none</call>"));
  EXPECT_FALSE(FullMatch(*g, "<call>{}</call>"));
  auto bad = ParseEbnf(R"(root ::= "a" %json {"type": "integer", "minimum": "x"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("grammar: %json at offset 19: json_schema: at /minimum"),
            std::string::npos)
      << bad.status();
  EXPECT_FALSE(ParseEbnf("root ::= %yaml {}").ok());
  EXPECT_FALSE(ParseEbnf("root ::= %json {\"type\": ").ok());
}

TEST(JsonSchema, AcceptsWhatTheSchemaAllowsInTheDocumentedForm) {
  auto trie = SmallVocabulary(0, 1);
  const char* schema = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 3},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 1]}, "minItems": 1, "maxItems": 2},
      "kind": {"const": {"x": [true, null]}},
      "id": {"type": "string", "format": "uuid"},
      "code": {"type": "string", "pattern": "^[A-Z]{2}\\d$"},
      "ratio": {"type": ["number", "null"]}
    },
    "required": ["name", "tags"]
  })";
  auto g = Compile(JsonSchemaGrammar(schema), trie);
  EXPECT_TRUE(FullMatch(*g, R"({"name":"abc","tags":["a"]})"));
  EXPECT_TRUE(FullMatch(*g, R"({"name": "", "age": -12, "tags": [1, "b"]})"));
  EXPECT_TRUE(FullMatch(*g, R"({"name":"\u00e9\n","tags":["a"],"kind":{"x":[true,null]}})"));
  EXPECT_TRUE(FullMatch(*g, R"({"name":"x","tags":["a"],"code":"AB1","ratio":1.5e-3})"));
  EXPECT_TRUE(
      FullMatch(*g, R"({"name":"x","tags":["a"],"id":"123e4567-e89b-12d3-a456-426614174000"})"));
  EXPECT_FALSE(FullMatch(*g, R"({"name":"abcd","tags":["a"]})"));         // maxLength
  EXPECT_FALSE(FullMatch(*g, R"({"tags":["a"]})"));                       // required
  EXPECT_FALSE(FullMatch(*g, R"({"name":"a","tags":[]})"));               // minItems
  EXPECT_FALSE(FullMatch(*g, R"({"name":"a","tags":["a","a","a"]})"));    // maxItems
  EXPECT_FALSE(FullMatch(*g, R"({"name":"a","tags":["c"]})"));            // enum
  EXPECT_FALSE(FullMatch(*g, R"({"name":"a","tags":["a"],"extra":1})"));  // no others
  EXPECT_FALSE(FullMatch(*g, R"({"tags":["a"],"name":"a"})"));            // the listed order
  EXPECT_FALSE(FullMatch(*g, R"({"name":"\ud800","tags":["a"]})"));       // no surrogate escapes
  EXPECT_FALSE(FullMatch(*g, R"({"name":"a","tags":["a"],"code":"AB12"})"));
  EXPECT_FALSE(FullMatch(*g, R"({"name":"a",  "tags":["a"]})"));  // one space at most
}

TEST(JsonSchema, RecursionAdditionalPropertiesAndPrefixItems) {
  auto trie = SmallVocabulary(0, 1);
  auto tree = Compile(JsonSchemaGrammar(R"({
    "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}},
    "$ref": "#/$defs/node"})"),
                      trie);
  EXPECT_TRUE(FullMatch(*tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})"));
  EXPECT_FALSE(FullMatch(*tree, R"({"v":1,"kids":[{"w":2}]})"));

  auto extra = Compile(JsonSchemaGrammar(R"({"properties": {"a": {"type": "integer"}},
    "additionalProperties": {"type": "boolean"}})"),
                       trie);
  EXPECT_TRUE(FullMatch(*extra, R"({"a":1,"b":true,"ab":false})"));
  EXPECT_TRUE(FullMatch(*extra, R"({"b":true})"));
  EXPECT_FALSE(FullMatch(*extra, R"({"a":1,"a":true})"));  // another 'a' would not be extra
  EXPECT_FALSE(FullMatch(*extra, R"({"b":1})"));

  auto tuple = Compile(JsonSchemaGrammar(R"({"type": "array",
    "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": false, "minItems": 1})"),
                       trie);
  EXPECT_TRUE(FullMatch(*tuple, R"(["x"])"));
  EXPECT_TRUE(FullMatch(*tuple, R"(["x", true])"));
  EXPECT_FALSE(FullMatch(*tuple, R"([])"));
  EXPECT_FALSE(FullMatch(*tuple, R"(["x",true,1])"));

  auto any = Compile(JsonObjectGrammar(), trie);
  EXPECT_TRUE(FullMatch(*any, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(FullMatch(*any, R"([1])"));
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByPath) {
  for (auto [schema, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type":"integer","multipleOf":3})", "at /: 'multipleOf' is not supported"},
           {R"({"properties":{"a b/c":{"multipleOf":2}}})",
            "at /properties/a b~1c: 'multipleOf' is not supported"},
           {R"({"type":"string","format":"hostname"})", "format 'hostname' is not supported"},
           {R"({"type":"wat"})", "unknown type 'wat'"},
           {R"({"$ref":"http://x/y"})", "only references inside the schema"},
           {R"({"$ref":"#/$defs/missing"})", "points at nothing"},
           {R"({"$ref":"#"})", "left-recursive"},
           {R"({"enum":[]})", "/enum: must be a non-empty array"},
           {R"j({"type":"string","pattern":"(?=a)"})j", "at /pattern: regex"},
           {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "accept no value"},
           {R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})", "two different 'pattern'"},
           {R"({"properties":{"a":{"enum":[1,"x"],"pattern":"x"}}})",
            "at /properties/a: enum or const values cannot be checked against 'pattern'"},
           {R"({"properties":{"a":false},"required":["a"]})", "schema is false"},
           {R"({"type":"array","maxItems":9999})", "/maxItems: above the supported bound"},
           {R"({"type":"string","minLength":-1})", "/minLength: must be a non-negative integer"},
           {R"({"type": )", "not valid JSON"}}) {
    auto g = JsonSchemaGrammar(schema);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(message), std::string::npos)
        << schema << ": " << g.status();
  }
}

TEST(NumberRange, IntegersMatchExactlyTheRange) {
  auto trie = SmallVocabulary(0, 1);
  using Bound = std::optional<int64_t>;
  for (auto [lo, hi] : std::vector<std::pair<Bound, Bound>>{{0, 0},
                                                            {1, 9},
                                                            {-5, 17},
                                                            {10, 99},
                                                            {7, 1234},
                                                            {-1000, -3},
                                                            {Bound(), 12},
                                                            {-12, Bound()},
                                                            {100, 100},
                                                            {19, 20},
                                                            {-1, 1},
                                                            {5, 4}}) {
    const std::string re = IntegerRangeRegex(lo, hi);
    if (lo && hi && *lo > *hi) {
      EXPECT_EQ(re, "");
      continue;
    }
    auto g = Compile(RegexGrammar(re), trie);
    for (int64_t n = -1500; n <= 1500; ++n) {
      const bool in = (!lo || n >= *lo) && (!hi || n <= *hi);
      ASSERT_EQ(FullMatch(*g, std::to_string(n)), in) << re << " on " << n;
    }
    EXPECT_FALSE(FullMatch(*g, "-0"));
    EXPECT_FALSE(FullMatch(*g, "01"));
  }
}

TEST(NumberRange, DecimalsStayInsideTheBounds) {
  auto trie = SmallVocabulary(0, 1);
  using Bound = std::optional<int64_t>;
  for (auto [lo, hi] : std::vector<std::pair<Bound, Bound>>{
           {0, 10}, {-10, -2}, {-3, 3}, {Bound(), 0}, {2, Bound()}, {5, 5}}) {
    auto g = Compile(RegexGrammar(NumberRangeRegex(lo, hi)), trie);
    int accepted = 0;
    for (int tenths = -200; tenths <= 200; ++tenths) {
      for (const std::string& text :
           {std::to_string(tenths / 10) + "." + std::to_string(std::abs(tenths % 10)),
            (tenths < 0 && tenths > -10 ? "-0." : "") + std::to_string(std::abs(tenths))}) {
        if (!FullMatch(*g, text)) continue;
        ++accepted;
        const double v = std::stod(text);
        EXPECT_TRUE((!lo || v >= *lo) && (!hi || v <= *hi)) << text;
      }
    }
    EXPECT_GT(accepted, 0);
  }
  auto g = Compile(RegexGrammar(NumberRangeRegex(0, 10)), trie);
  EXPECT_TRUE(FullMatch(*g, "9.75"));
  EXPECT_TRUE(FullMatch(*g, "10"));
  EXPECT_FALSE(FullMatch(*g, "10.5"));
}

TEST(JsonSchema, AllOfRefAndAnyOfBesideOtherKeywordsIntersect) {
  auto trie = SmallVocabulary(0, 1);
  auto g = Compile(JsonSchemaGrammar(R"({
    "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}},
                       "required": ["id"]}},
    "allOf": [{"$ref": "#/$defs/base"},
              {"properties": {"id": {"maximum": 9}, "kind": {"enum": ["a", "b", 3]}},
               "required": ["kind"]}],
    "properties": {"kind": {"type": "string"}}})"),
                   trie);
  EXPECT_TRUE(FullMatch(*g, R"({"id":7,"kind":"b"})"));
  EXPECT_FALSE(FullMatch(*g, R"({"id":10,"kind":"b"})"));  // maximum from the second branch
  EXPECT_FALSE(FullMatch(*g, R"({"id":7,"kind":3})"));     // type from beside allOf
  EXPECT_FALSE(FullMatch(*g, R"({"kind":"a"})"));          // required from the $ref
  auto any = Compile(JsonSchemaGrammar(R"({"type": "integer",
    "anyOf": [{"minimum": 5}, {"maximum": -5}], "exclusiveMaximum": 100})"),
                     trie);
  EXPECT_TRUE(FullMatch(*any, "5"));
  EXPECT_TRUE(FullMatch(*any, "-7"));
  EXPECT_FALSE(FullMatch(*any, "0"));
  EXPECT_FALSE(FullMatch(*any, "100"));
  EXPECT_FALSE(FullMatch(*any, "7.5"));
}

// Hostile inputs (a review's findings): each is refused or compiled quickly, never a crash,
// a hang or an output the constraint does not hold.
TEST(Constraints, HostileInputsAreRefusedOrBoundedNeverACrash) {
  auto trie = SmallVocabulary(0, 1);
  auto refused = [](const absl::StatusOr<Grammar>& g, const std::string& message) {
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status();
  };
  // A recursive $ref beside another keyword inlines itself forever: refused by depth.
  refused(JsonSchemaGrammar(R"({"$defs":{"n":{"type":"object","properties":{"k":{"type":"array",
            "items":{"$ref":"#/$defs/n","required":["v"]}}}}},"$ref":"#/$defs/n"})"),
          "nested (or inlined) more than 128 deep");
  refused(JsonSchemaGrammar(R"({"$defs":{"a":[0]},"$ref":"#/$defs/a/99999999999999999999"})"),
          "points at nothing");
  // anyOf against anyOf through two chains of references: 4^20 intersections, bounded.
  std::string defs;
  for (int k = 0; k < 20; ++k) {
    for (char c : {'a', 'b'}) {
      const std::string next = std::string("#/$defs/") + c + std::to_string(k + 1);
      defs += absl::StrCat("\"", std::string(1, c), k, "\":{\"anyOf\":[{\"$ref\":\"", next,
                           "\"},{\"$ref\":\"", next, "\",\"title\":\"x\"}]},");
    }
  }
  defs += R"("a20":{"type":"integer"},"b20":{"type":"integer"})";
  refused(
      JsonSchemaGrammar(absl::StrCat(
          R"({"$defs":{)", defs, R"(},"allOf":[{"$ref":"#/$defs/a0"},{"$ref":"#/$defs/b0"}]})")),
      "more than 2048 steps");
  // A 65,000-character required name: no recursion per character; the size bound refuses it.
  refused(JsonSchemaGrammar(absl::StrCat(R"({"required":[")", std::string(65000, 'a'), R"("]})")),
          "more than 200000 elements");
  std::string many;
  for (int i = 0; i < 7000; ++i) many += ".{0,2000}";
  refused(RegexGrammar(many), "more than 200000 elements");
  refused(RegexGrammar("\\01"), "octal escapes");
  refused(JsonSchemaGrammar(R"({"propertyNames":{"const":"a"},"minProperties":2})"),
          "'minProperties' above 1 is not supported");
  // Nested nullable repetitions: refused before they reach the matcher (its per-token work would
  // grow with them), in a regex, a grammar and a schema's pattern alike.
  refused(RegexGrammar("((a?){2000}){2000}b"), "can begin more than 512 ways");
  refused(ParseEbnf("root ::= (\"a\"?){600}"), "can begin more than 512 ways");
  refused(JsonSchemaGrammar(R"({"type":"string","pattern":"^(.?){2000}.{2000}$"})"),
          "can begin more than 512 ways");
  // An alternative that can never complete is left out: `a` is not allowed, `b` is.
  auto dead_branch = Compile(RegexGrammar("(a)[]|b"), trie);
  GrammarMatcher d(dead_branch);
  std::vector<uint64_t> mask;
  d.FillMask(mask);
  EXPECT_FALSE(Bit(mask, 'a'));
  EXPECT_TRUE(Bit(mask, 'b'));
  // enum beside const: the const alone; integer bounds past 2^53 exactly.
  auto both = Compile(JsonSchemaGrammar(R"({"enum":[1,2],"const":1})"), trie);
  EXPECT_TRUE(FullMatch(*both, "1"));
  EXPECT_FALSE(FullMatch(*both, "2"));
  auto big = Compile(JsonSchemaGrammar(R"({"type":"integer","minimum":9007199254740993})"), trie);
  EXPECT_FALSE(FullMatch(*big, "9007199254740992"));
  EXPECT_TRUE(FullMatch(*big, "9007199254740993"));
}

// Advancing a set of stacks equals advancing each stack alone and merging the results in
// order, duplicates dropped, both below and past the size where the set is indexed rather than
// scanned for them.
TEST(StackSets, AdvanceMergesEachStacksResultsOnceInFirstSeenOrder) {
  auto g = Compile(RegexGrammar("(a|aa|aaa|ab|ba){0,12}(b|ab)"), SmallVocabulary(0, 1));
  std::vector<GrammarStack> cur = g->Start(), next;
  size_t largest = cur.size();
  for (char c : std::string("aaaaaaabaaaaa")) {
    g->Advance(cur, static_cast<uint8_t>(c), next);
    std::vector<GrammarStack> merged, alone;
    for (const GrammarStack& s : cur) {
      g->Advance({s}, static_cast<uint8_t>(c), alone);
      for (GrammarStack& t : alone) {
        if (std::find(merged.begin(), merged.end(), t) == merged.end()) merged.push_back(t);
      }
    }
    ASSERT_EQ(next, merged) << "after '" << c << "'";
    largest = std::max(largest, next.size());
    cur.swap(next);
  }
  EXPECT_GT(largest, 16u);  // the indexed path ran
}

// The one stack set (packed_stacks.h), over both its stores: it agrees with std::set over
// hundreds of stacks (stacks that share prefixes, differ in their last element only, and the
// empty one), past the scanned few into the indexed path, keeps first-seen order, and stops at its
// limit; the pile gives back what was pushed, last first.
TEST(PackedStacks, SetAgreesWithStdSetAndPileIsLastInFirstOut) {
  std::mt19937 rng(11);
  PackedStacks packed;
  std::vector<GrammarStack> vectors;
  StackSet<PackedStacks> set(packed);
  StackSet<std::vector<GrammarStack>> limited(vectors, 20);
  for (int round = 0; round < 2; ++round) {
    set.Clear();
    limited.Clear();
    std::set<GrammarStack> seen;
    std::vector<GrammarStack> order;
    for (int i = 0; i < 400; ++i) {
      GrammarStack s(rng() % 4);
      for (int32_t& e : s) e = static_cast<int32_t>(rng() % 3);
      const bool fresh = seen.insert(s).second;
      if (fresh) order.push_back(s);
      ASSERT_EQ(set.Insert(s), fresh) << "insert " << i << ", round " << round;
      const bool room = vectors.size() < 20;
      GrammarStack moved = s;
      ASSERT_EQ(limited.Insert(std::move(moved)), fresh && room) << "insert " << i;
    }
    EXPECT_GT(seen.size(), 20u);  // many distinct stacks, not a few
    ASSERT_EQ(packed.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      EXPECT_EQ(packed[i], absl::MakeConstSpan(order[i])) << i;
    }
    EXPECT_EQ(vectors, std::vector<GrammarStack>(order.begin(), order.begin() + 20));
  }
  // Pushes and pops mixed, against a vector of stacks; cleared halfway, as each expansion does.
  StackPile pile;
  std::vector<GrammarStack> model;
  GrammarStack got{7, 7, 7};
  for (int i = 0; i < 600; ++i) {
    if (i == 300) {
      pile.Clear();
      model.clear();
    }
    if (rng() % 3 != 0) {
      GrammarStack s(rng() % 5);
      for (int32_t& e : s) e = static_cast<int32_t>(rng() % 100);
      pile.Push(s, i);
      s.push_back(i);
      model.push_back(s);
    } else {
      ASSERT_EQ(pile.Pop(got), !model.empty()) << "pop " << i;
      if (model.empty()) continue;
      ASSERT_EQ(got, model.back()) << "pop " << i;
      model.pop_back();
    }
  }
  while (!model.empty()) {
    ASSERT_TRUE(pile.Pop(got));
    ASSERT_EQ(got, model.back());
    model.pop_back();
  }
  EXPECT_FALSE(pile.Pop(got));
}

// An expansion that runs out of its budget leaves nothing behind for the next stack's: here the
// first stack after "a" descends 800 rules, each leaving its other alternative pending, and
// runs out near 500 deep with those alternatives never expanded; the second stack's expansion
// must not take them up.
TEST(StackSets, AnExpansionPastItsBudgetLeavesNothingToTheNext) {
  // root ::= "a" r0 | "a" "c";  r_i ::= r_{i+1} "z" | "x";  r800 ::= "x". Check() refuses it (r0
  // begins 801 ways), so it is built by hand: the expansion's own bound is what is tested.
  Grammar ebnf;
  const int32_t root = ebnf.Rule("root");
  ebnf.AddAlternative(root, {Grammar::Byte('a'), Grammar::Ref(ebnf.Rule("r0"))});
  ebnf.AddAlternative(root, {Grammar::Byte('a'), Grammar::Byte('c')});
  for (int i = 0; i < 800; ++i) {
    const int32_t r = ebnf.Rule(absl::StrCat("r", i));
    ebnf.AddAlternative(r, {Grammar::Ref(ebnf.Rule(absl::StrCat("r", i + 1))), Grammar::Byte('z')});
    ebnf.AddAlternative(r, {Grammar::Byte('x')});
  }
  ebnf.AddAlternative(ebnf.Rule("r800"), {Grammar::Byte('x')});
  for (const GrammarRule& r : ebnf.rules()) ASSERT_FALSE(r.alternatives.empty()) << r.name;
  for (int32_t r = 0; r < static_cast<int32_t>(ebnf.rules().size()); ++r) ebnf.Define(r);
  EXPECT_NE(ebnf.Check().message().find("can begin more than 512 ways"), std::string::npos);
  auto g = std::make_shared<const CompiledGrammar>(ebnf, SmallVocabulary(0, 1));
  const std::vector<GrammarStack> start = g->Start();
  ASSERT_EQ(start.size(), 2u);
  std::vector<GrammarStack> together, first, second;
  g->Advance(start, 'a', together);
  g->Advance({start[0]}, 'a', first);
  g->Advance({start[1]}, 'a', second);
  EXPECT_TRUE(first.empty());  // the budget ran out before any byte class was on top
  EXPECT_EQ(together, second);
}

TEST(TokenMask, EqualsBruteForceOnSmallVocabularies) {
  auto trie = SmallVocabulary(600, 3);
  CheckMasksAlongRandomWalks(Compile(JsonObjectGrammar(), trie), 6, 40, 1);
  CheckMasksAlongRandomWalks(Compile(JsonSchemaGrammar(R"({"type":"object","properties":{
        "name":{"type":"string","maxLength":4},"n":{"type":"number"},
        "t":{"type":"array","items":{"enum":["true","x"]}}},"required":["t"]})"),
                                     trie),
                             6, 40, 2);
  CheckMasksAlongRandomWalks(Compile(RegexGrammar("(ab|a\"c)+[0-9]{2,4}x?"), trie), 6, 20, 3);
  CheckMasksAlongRandomWalks(
      Compile(ParseEbnf("root ::= item (\",\" \" \"? item)*\nitem ::= \"true\" | [a-z]+ | "
                        "\"[\" root? \"]\""),
              trie),
      6, 30, 4);
}

TEST(TokenMask, ControlTokensAndEndOfText) {
  auto trie = SmallVocabulary(10, 5);
  auto g = Compile(RegexGrammar("ab"), trie);
  GrammarMatcher m(g);
  const int32_t control = static_cast<int32_t>(trie->vocab_size() - 1);
  EXPECT_FALSE(m.AcceptToken(control));
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.AcceptToken('a'));
  EXPECT_FALSE(m.AcceptToken('a'));  // refused and the state kept
  EXPECT_TRUE(m.AcceptToken('b'));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.MustEnd());
  std::vector<uint64_t> mask;
  m.FillMask(mask);
  for (uint64_t w : mask) EXPECT_EQ(w, 0u);
}

TEST(ConstraintCache, SharesOneCompiledGrammarPerContentAndStaysInBudget) {
  auto trie = SmallVocabulary(50, 6);
  ConstraintCache cache(trie, 64 << 10);
  auto a = cache.Get({ConstraintSpec::Kind::kRegex, "a+"});
  auto b = cache.Get({ConstraintSpec::Kind::kRegex, "a+"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.hits(), 1);
  auto bad = cache.Get({ConstraintSpec::Kind::kGrammar, "root ::= nope"});
  EXPECT_FALSE(bad.ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(
        cache.Get({ConstraintSpec::Kind::kRegex, "x{" + std::to_string(100 + i) + "}"}).ok());
  }
  EXPECT_LE(cache.bytes(), 64 << 10);
}

// A cached grammar's masks grow as requests use it: a hit counts them and evicts others.
TEST(ConstraintCache, MasksGrownAfterCachingEvictOthersOnAHit) {
  auto trie = SmallVocabulary(600, 13);
  const ConstraintSpec object{ConstraintSpec::Kind::kJsonObject, ""};
  const ConstraintSpec regex{ConstraintSpec::Kind::kRegex, "a+"};
  int64_t fresh = 0;
  {
    ConstraintCache unbounded(trie, int64_t{1} << 30);
    ASSERT_TRUE(unbounded.Get(object).ok() && unbounded.Get(regex).ok());
    fresh = unbounded.bytes();
  }
  ConstraintCache cache(trie, fresh + 64);
  auto a = cache.Get(object);
  ASSERT_TRUE(a.ok() && cache.Get(regex).ok());
  EXPECT_EQ(cache.bytes(), fresh);
  GrammarMatcher m(*a);
  std::vector<uint64_t> mask;
  for (int step = 0; step < 4; ++step) {
    m.FillMask(mask);
    int32_t id = 0;
    while (!Bit(mask, id)) ++id;
    ASSERT_TRUE(m.AcceptToken(id));
  }
  EXPECT_GT(cache.bytes(), fresh + 64);
  ASSERT_TRUE(cache.Get(object).ok());
  EXPECT_EQ(cache.hits(), 1);
  ASSERT_TRUE(cache.Get(regex).ok());  // evicted by the hit: compiled again
  EXPECT_EQ(cache.misses(), 3);
}

// The per-stack memo of a shared grammar against a grammar compiled afresh at every step,
// whose memo is empty: along random walks the masks agree bit for bit.
TEST(TokenMask, StackMemoAgreesWithAFreshWalk) {
  auto trie = SmallVocabulary(600, 11);
  auto shared = Compile(JsonObjectGrammar(), trie);
  std::mt19937 rng(5);
  for (int walk = 0; walk < 4; ++walk) {
    GrammarMatcher m(shared);
    std::vector<int32_t> path;
    for (int step = 0; step < 30 && !m.MustEnd(); ++step) {
      std::vector<uint64_t> memoized, fresh;
      m.FillMask(memoized);
      GrammarMatcher cold(Compile(JsonObjectGrammar(), trie));
      for (int32_t id : path) ASSERT_TRUE(cold.AcceptToken(id));
      cold.FillMask(fresh);
      ASSERT_EQ(memoized, fresh) << "step " << step << " of walk " << walk;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie->vocab_size(); ++id) {
        if (Bit(memoized, id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      path.push_back(allowed[rng() % allowed.size()]);
      ASSERT_TRUE(m.AcceptToken(path.back()));
    }
  }
}

// A grammar warmed in full holds every context a parse can meet: walks along random paths
// compute no new one, and their masks equal those of the same grammar left cold.
TEST(TokenMask, WarmUpCoversEveryContextAWalkMeets) {
  auto trie = SmallVocabulary(600, 17);
  const std::vector<std::function<absl::StatusOr<Grammar>()>> grammars = {
      [] { return JsonObjectGrammar(); },
      [] {
        return JsonSchemaGrammar(R"({"type":"object","$defs":{"node":{"type":"object",
            "properties":{"v":{"enum":["a","bc",1]},"kids":{"type":"array","items":
            {"$ref":"#/$defs/node"},"maxItems":3}},"required":["v"]}},
            "properties":{"name":{"type":"string","minLength":1,"maxLength":6},
            "tree":{"$ref":"#/$defs/node"},"n":{"anyOf":[{"type":"integer","minimum":-5,
            "maximum":40},{"type":"null"}]},"id":{"type":"string","format":"uuid"}},
            "required":["name","tree"]})");
      },
      [] { return RegexGrammar("(ab|a\"c)+[0-9]{2,4}x?"); },
      [] {
        return ParseEbnf(
            "root ::= item (\",\" \" \"? item)*\nitem ::= \"true\" | [a-z]+ | \"[\" root? \"]\"");
      },
  };
  std::mt19937 rng(23);
  for (size_t k = 0; k < grammars.size(); ++k) {
    auto warmed = Compile(grammars[k](), trie);
    auto cold = Compile(grammars[k](), trie);
    while (warmed->WarmNext()) {
    }
    EXPECT_FALSE(warmed->WarmNext());
    const int64_t contexts = warmed->cached_contexts();
    EXPECT_GT(contexts, 0);
    for (int walk = 0; walk < 6; ++walk) {
      GrammarMatcher a(warmed), b(cold);
      for (int step = 0; step < 40 && !a.MustEnd(); ++step) {
        std::vector<uint64_t> mask, cold_mask;
        a.FillMask(mask);
        b.FillMask(cold_mask);
        ASSERT_EQ(mask, cold_mask) << "grammar " << k << ", step " << step;
        ASSERT_EQ(warmed->cached_contexts(), contexts)
            << "grammar " << k << ": step " << step << " of walk " << walk
            << " met a context the warm-up did not find";
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->vocab_size(); ++id) {
          if (Bit(mask, id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t id = allowed[rng() % allowed.size()];
        ASSERT_TRUE(a.AcceptToken(id) && b.AcceptToken(id));
      }
    }
  }
}

// Masks computed by the prefetcher's threads, for matchers that share one grammar and its
// caches, equal each matcher's own; a job no thread has begun is computed by its taker.
TEST(MaskPrefetcher, ComputesEachMatchersOwnMask) {
  auto trie = SmallVocabulary(400, 7);
  auto g = Compile(JsonObjectGrammar(), trie);
  MaskPrefetcher prefetcher(3);
  std::mt19937 rng(9);
  std::vector<std::unique_ptr<GrammarMatcher>> matchers;
  for (int i = 0; i < 8; ++i) matchers.push_back(std::make_unique<GrammarMatcher>(g));
  for (int step = 0; step < 25; ++step) {
    std::vector<std::shared_ptr<MaskJob>> jobs;
    for (const auto& m : matchers) jobs.push_back(prefetcher.Start(m.get()));
    MaskJob untouched(matchers[0].get(), MaskLimits{}, nullptr, nullptr);
    std::vector<uint64_t> own;
    matchers[0]->FillMask(own);
    ASSERT_EQ(untouched.Take().value(), own);
    for (size_t i = 0; i < matchers.size(); ++i) {
      const std::vector<uint64_t> taken = jobs[i]->Take().value();
      matchers[i]->FillMask(own);
      ASSERT_EQ(taken, own) << "matcher " << i << " at step " << step;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie->vocab_size(); ++id) {
        if (Bit(own, id)) allowed.push_back(id);
      }
      if (allowed.empty()) {
        matchers[i] = std::make_unique<GrammarMatcher>(g);
      } else {
        ASSERT_TRUE(matchers[i]->AcceptToken(allowed[rng() % allowed.size()]));
      }
    }
  }
}

// A cancelled job never reads its matcher again (ASan sees the matcher freed right after), and
// one left queued when the prefetcher goes away is computed by its taker.
TEST(MaskPrefetcher, CancelledJobsLetGoOfTheirMatcher) {
  auto trie = SmallVocabulary(200, 8);
  auto g = Compile(JsonObjectGrammar(), trie);
  std::shared_ptr<MaskJob> orphan;
  auto kept = std::make_unique<GrammarMatcher>(g);
  {
    MaskPrefetcher prefetcher(2);
    for (int i = 0; i < 200; ++i) {
      auto m = std::make_unique<GrammarMatcher>(g);
      std::shared_ptr<MaskJob> job = prefetcher.Start(m.get());
      job->Cancel();
      m.reset();
    }
    orphan = prefetcher.Start(kept.get());
  }
  std::vector<uint64_t> own;
  kept->FillMask(own);
  EXPECT_EQ(orphan->Take().value(), own);
}

// A cache given the prefetcher warms what it compiles on the prefetcher's idle threads, up to
// every context a full warm-up finds; a grammar that went away before its turn is let go.
TEST(MaskPrefetcher, WarmsNewlyCompiledGrammarsInTheBackground) {
  auto trie = SmallVocabulary(400, 19);
  auto reference = Compile(JsonObjectGrammar(), trie);
  while (reference->WarmNext()) {
  }
  MaskPrefetcher prefetcher(2);
  prefetcher.Warm(Compile(RegexGrammar("[a-z]{1,8}"), trie));  // expires as it is queued
  ConstraintCache cache(trie, int64_t{1} << 30, &prefetcher);
  auto g = cache.Get({ConstraintSpec::Kind::kJsonObject, ""});
  ASSERT_TRUE(g.ok()) << g.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*g)->cached_contexts() < reference->cached_contexts() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ((*g)->cached_contexts(), reference->cached_contexts());
  GrammarMatcher m(*g);
  std::vector<uint64_t> own;
  m.FillMask(own);
  EXPECT_EQ(prefetcher.Start(&m)->Take().value(), own);
}

// A constrained generation draws the same tokens whether its masks were prefetched during the
// (here simulated) forward pass or computed after it.
TEST(MaskPrefetcher, PrefetchedGenerationsSampleTheSameTokens) {
  auto trie = SmallVocabulary(300, 12);
  const int64_t vocab = trie->vocab_size();
  auto g = Compile(JsonObjectGrammar(), trie);
  MaskPrefetcher prefetcher(2);
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenerationRequest r;
    r.sampling.seed = seed;
    r.stop.max_tokens = 80;
    r.stop.eos_ids = {static_cast<int32_t>(vocab - 1)};
    r.constraint = g;
    Generation plain(nullptr, r), overlapped(nullptr, r);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> noise(0.0f, 3.0f);
    std::vector<float> logits(vocab);
    while (!plain.finished()) {
      ASSERT_FALSE(overlapped.finished());
      overlapped.PrefetchMask(prefetcher);
      for (float& l : logits) l = noise(rng);
      const GeneratedToken a = plain.Advance(logits.data(), vocab).value();
      const GeneratedToken b = overlapped.Advance(logits.data(), vocab).value();
      ASSERT_EQ(a.id, b.id) << "at output " << a.index << " of seed " << seed;
    }
    EXPECT_TRUE(overlapped.finished());
    EXPECT_EQ(plain.output(), overlapped.output());
  }
}

}  // namespace
}  // namespace walsh
