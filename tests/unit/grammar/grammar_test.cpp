#include "grammar/grammar.h"

#include <regex>

#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"
#include "grammar/vocabulary.h"
#include "tests/unit/grammar/grammar_test_util.h"

namespace hearth::grammar {
namespace {

using testing::byte_vocabulary;
using testing::compile;
using testing::full_match;
using testing::kEnd;

std::shared_ptr<CompiledGrammar> bytes_grammar(std::string_view gbnf) {
  auto g = compile(gbnf, byte_vocabulary());
  EXPECT_NE(g, nullptr) << gbnf;
  return g;
}

TEST(GrammarTest, ParsesRulesLiteralsClassesAndRepetitions) {
  const auto g = bytes_grammar(R"(
    # a comment
    root ::= greeting " " name ("!" | "?")?   # trailing comment
    greeting ::= "hello" | "hi"
    name ::= [A-Z] [a-z]{1,4}
  )");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"hello Bob", "hi Alice!", "hi Al?", "hello Zo"}) EXPECT_TRUE(full_match(g, ok)) << ok;
  for (const char* bad : {"hello bob", "hi Alicia", "hey Bob", "hi B", "hello Bob!!", ""}) {
    EXPECT_FALSE(full_match(g, bad)) << bad;
  }
}

TEST(GrammarTest, RulesContinueOnLinesThatDoNotStartARule) {
  const auto g = bytes_grammar("root ::= \"a\"\n   \"b\"\n  | \"c\"\nother ::= \"x\"\n");
  EXPECT_TRUE(full_match(g, "ab"));
  EXPECT_TRUE(full_match(g, "c"));
  EXPECT_FALSE(full_match(g, "a"));
}

TEST(GrammarTest, RepetitionCountsAreExact) {
  const auto g = bytes_grammar(R"(root ::= "x"{2,4} "y"{3} "z"{1,} "w"*)");
  for (int x = 0; x <= 6; ++x) {
    const std::string s = std::string(static_cast<size_t>(x), 'x') + "yyyzz";
    EXPECT_EQ(full_match(g, s), x >= 2 && x <= 4) << s;
  }
  EXPECT_FALSE(full_match(g, "xxyyyy"));
  EXPECT_TRUE(full_match(g, "xxyyyzwww"));
}

TEST(GrammarTest, ClassesAndAnyAreUtf8) {
  const auto g = bytes_grammar(R"(root ::= [^"a] . [α-ω])");
  EXPECT_TRUE(full_match(g, "b€β"));
  EXPECT_TRUE(full_match(g, "é\nω"));
  EXPECT_TRUE(full_match(g, "😀xα"));
  EXPECT_FALSE(full_match(g, "a€β"));
  EXPECT_FALSE(full_match(g, "\"€β"));
  EXPECT_FALSE(full_match(g, "bxA"));
  EXPECT_FALSE(full_match(g, "b\xC3\xA9"));  // a byte short
  // Every code point of a negated class, encoded, matches; nothing invalid does.
  const auto any = bytes_grammar(R"(root ::= [^\x00-\x7F])");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    uint32_t cp = std::uniform_int_distribution<uint32_t>(0x80, 0x10FFFF)(rng);
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    utf8_append(s, cp);
    ASSERT_TRUE(full_match(any, s)) << std::hex << cp;
  }
  EXPECT_FALSE(full_match(any, "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(full_match(any, "\xC0\x80"));      // overlong
  EXPECT_FALSE(full_match(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(GrammarTest, BadGrammarsAreRefusedNamingWhy) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {"root ::= foo", "foo is not defined"},
           {"start ::= \"a\"", "no rule named root"},
           {"root ::= \"a", "unterminated string"},
           {"root ::= [a-", "unterminated character class"},
           {"root ::= root \"a\" | \"b\"", "left-recursive"},
           {"root ::= x \"a\"\nx ::= \"\" | root", "left-recursive"},
           {"root ::= (\"a\"", "expected )"},
           {"root ::= \"a\"{3,2}", "maximum below its minimum"},
           {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
           {"root ::= [z-a]", "backwards"},
           {"root ::= \"\\q\"", "unknown escape"},
           {"root ::= \"a\"{9999999}", "larger than"},
           {"", "no rules"},
           {"root ::= @", "unexpected character"},
       }) {
    auto g = Grammar::parse(c.text);
    ASSERT_FALSE(g.is_ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.says), std::string::npos) << c.text << ": " << g.status().message();
  }
  GrammarLimits small;
  small.max_elements = 1000;
  EXPECT_FALSE(Grammar::parse("root ::= \"a\"{1200}", "root", small).is_ok());
  EXPECT_FALSE(Grammar::parse("root ::= \"a\"{0,300}", "root", small).is_ok());
}

TEST(GrammarTest, MinimalLengthsCountOnlyAllowedBytes) {
  auto g = Grammar::parse(R"(root ::= "ab" x | "abcdef"
                             x ::= [x-z] "q"? | "long" x)");
  ASSERT_TRUE(g.is_ok());
  ByteSet all;
  all.set_range(0, 255);
  EXPECT_EQ(g->min_length(all), 3);
  ByteSet no_xyz = all;
  for (char c : {'x', 'y', 'z'}) no_xyz.words[static_cast<uint8_t>(c) >> 6] &= ~(uint64_t{1} << (c & 63));
  EXPECT_EQ(g->min_length(no_xyz), 6);
  ByteSet only_a;
  only_a.set('a');
  EXPECT_EQ(g->min_length(only_a), kUnreachable);
}

// The mask of every state along random outputs equals, token by token, what accept() takes.
TEST(MatcherTest, MaskEqualsWhatAcceptTakesOnRandomVocabularies) {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  rng.seed(seed);
  std::vector<std::string> extra;
  const std::string alphabet = "{}[]\":, ab01\xC3\xA9\\";
  for (int i = 0; i < 400; ++i) {
    std::string s;
    const int len = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int k = 0; k < len; ++k) s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    extra.push_back(s);
  }
  const auto vocab = byte_vocabulary(extra);
  auto gbnf = json_schema_to_gbnf(boost::json::parse(R"({"type": "object", "properties": {
      "a": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
      "b": {"type": "integer", "minimum": -5, "maximum": 120}, "c": {"type": "boolean"}}, "required": ["a"]})"));
  ASSERT_TRUE(gbnf.is_ok()) << gbnf.status().message();
  const auto g = compile(*gbnf, vocab);
  ASSERT_NE(g, nullptr) << *gbnf;
  TokenMask mask;
  for (int walk = 0; walk < 30; ++walk) {
    GrammarMatcher m(g, {kEnd});
    std::string text;
    for (int step = 0; step < 60; ++step) {
      ASSERT_TRUE(m.fill_mask(mask, 0).is_ok());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        GrammarMatcher probe = m;
        const bool takes = probe.accept(id).is_ok();
        ASSERT_EQ(mask.test(id), takes) << "token " << id << " \"" << vocab->bytes(id) << "\" after \"" << text << "\"";
        if (takes) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.accept(pick).is_ok());
      if (pick == kEnd || m.terminated()) break;
      text += vocab->bytes(pick);
    }
  }
  EXPECT_GT(g->cache_hits(), 0u);
}

TEST(MatcherTest, EndTokensOnlyWhenMatchedAndCompleteOutputsTerminate) {
  const auto g = bytes_grammar(R"(root ::= "ab" "c"?)");
  GrammarMatcher m(g, {kEnd});
  TokenMask mask;
  ASSERT_TRUE(m.fill_mask(mask, 0).is_ok());
  EXPECT_FALSE(mask.test(kEnd));
  EXPECT_TRUE(mask.test('a'));
  EXPECT_EQ(mask.count(), 1);
  EXPECT_FALSE(m.accept(kEnd).is_ok());
  ASSERT_TRUE(m.accept('a').is_ok());
  ASSERT_TRUE(m.accept('b').is_ok());
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.terminated());  // a "c" may still come
  ASSERT_TRUE(m.fill_mask(mask, 0).is_ok());
  EXPECT_TRUE(mask.test(kEnd));
  EXPECT_TRUE(mask.test('c'));
  EXPECT_EQ(mask.count(), 2);
  ASSERT_TRUE(m.accept('c').is_ok());
  EXPECT_TRUE(m.terminated());
  EXPECT_EQ(m.cost(), 0);
  EXPECT_FALSE(m.accept('c').is_ok());
}

// With a budget, random walks always end matched within it (or, when the budget is below
// what any output needs, as close as they can).
TEST(MatcherTest, BudgetsEndEveryOutputInTime) {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  rng.seed(seed);
  const auto vocab = byte_vocabulary({"aaaa", "[[[[", "{\"k\": ", "\"\"", "1234567", "]]", "}}", ",", ", "});
  for (const char* schema : {R"({})", R"({"type": "object"})", R"({"type": "array", "items": {"type": "array"}})",
                             R"({"type": "string"})", R"({"type": "number"})"}) {
    auto gbnf = json_schema_to_gbnf(boost::json::parse(schema));
    ASSERT_TRUE(gbnf.is_ok());
    const auto g = compile(*gbnf, vocab);
    ASSERT_NE(g, nullptr);
    const int32_t need = GrammarMatcher(g, {kEnd}).cost();
    for (int32_t budget : {need, need + 1, need + 3, 10, 40}) {
      for (int i = 0; i < 20; ++i) {
        const auto w = testing::random_walk(g, rng, budget);
        ASSERT_TRUE(w.error.is_ok()) << w.error.message();
        ASSERT_TRUE(w.ended) << schema << " budget " << budget << ": " << w.text;
        EXPECT_LE(w.tokens, budget);
        EXPECT_NO_THROW(boost::json::parse(w.text)) << w.text;
      }
    }
  }
}

TEST(MatcherTest, VocabulariesThatCannotSpellTheGrammarHaveNoFiniteCost) {
  // Only tokens "a" and "b": a grammar that needs a "c" cannot be written.
  auto v = Vocabulary::build({"a", "b", ""});
  ASSERT_TRUE(v.is_ok());
  auto vocab = std::make_shared<const Vocabulary>(std::move(v).value());
  auto g = CompiledGrammar::create(Grammar::parse(R"(root ::= "a" "c")").value(), vocab);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ((*g)->min_output_bytes(), kUnreachable);
  auto ok = CompiledGrammar::create(Grammar::parse(R"(root ::= "a"+ "b")").value(), vocab);
  EXPECT_EQ((*ok)->min_output_bytes(), 2);
}

TEST(MatcherTest, AmbiguityIsBounded) {
  // (a|a)* doubles its parses with each byte unless equal stacks merge; they do.
  const auto g = bytes_grammar(R"(root ::= ("a" | "a" | "a")* "b")");
  GrammarMatcher m(g, {kEnd});
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.accept('a').is_ok());
  ASSERT_TRUE(m.accept('b').is_ok());
  EXPECT_TRUE(m.terminated());
}

TEST(MaskLogitsTest, LeavesAllowedLogitsAndSinksTheRest) {
  TokenMask mask;
  mask.reset(130);
  for (int32_t id : {0, 63, 64, 129}) mask.set(id);
  std::vector<float> logits(130, 1.5f);
  mask_logits(mask, logits);
  for (int32_t i = 0; i < 130; ++i) {
    if (mask.test(i)) {
      EXPECT_EQ(logits[static_cast<size_t>(i)], 1.5f);
    } else {
      EXPECT_TRUE(std::isinf(logits[static_cast<size_t>(i)]) && logits[static_cast<size_t>(i)] < 0);
    }
  }
}

TEST(IntegerRangeTest, MatchesExactlyTheRangeAgainstBruteForce) {
  std::mt19937_64 rng(std::random_device{}());
  const auto vocab = byte_vocabulary();
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 0},     {0, 9},      {1, 10},   {-5, 5},     {-120, -7},
                                                     {17, 1234}, {-999, 999}, {99, 100}, {-1000, -1}, {305, 1299}};
  for (int i = 0; i < 15; ++i) {
    int64_t a = std::uniform_int_distribution<int64_t>(-1500, 1500)(rng);
    int64_t b = std::uniform_int_distribution<int64_t>(-1500, 1500)(rng);
    ranges.emplace_back(std::min(a, b), std::max(a, b));
  }
  for (const auto& [lo, hi] : ranges) {
    const std::string gbnf = "root ::= " + integer_range_gbnf(lo, hi);
    const auto g = compile(gbnf, vocab);
    ASSERT_NE(g, nullptr) << gbnf;
    for (int64_t v = -1600; v <= 1600; ++v) {
      ASSERT_EQ(full_match(g, std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << ", " << hi << "]";
    }
    EXPECT_FALSE(full_match(g, "-0"));
    EXPECT_FALSE(full_match(g, "007"));
  }
  // Large bounds, sampled.
  const int64_t lo = -123456789012, hi = 98765432109876;
  const auto g = compile("root ::= " + integer_range_gbnf(lo, hi), vocab);
  for (int i = 0; i < 3000; ++i) {
    const int64_t v = std::uniform_int_distribution<int64_t>(lo * 2, hi * 2)(rng);
    ASSERT_EQ(full_match(g, std::to_string(v)), v >= lo && v <= hi) << v;
  }
  for (int64_t edge : {lo, hi, lo - 1, hi + 1}) EXPECT_EQ(full_match(g, std::to_string(edge)), edge >= lo && edge <= hi);
}

// The regex compiler agrees with std::regex (ECMAScript) on random strings.
TEST(RegexTest, AgreesWithStdRegexOnRandomStrings) {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t seed = rng();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  rng.seed(seed);
  const auto vocab = byte_vocabulary();
  const std::string alphabet = "ab09-_ .\"\\\nZ";
  for (const char* pattern : {"a+b*", "(ab|ba){1,3}", "[a-c]?[0-9]{2}", "\\d+(\\.\\d{1,2})?", "[^ab]*", "\\w+@\\w+",
                              "(?:a|b)+?z?", "\\s*x?", "[\\d\\-_]{0,4}", "a.b", ".*", "[\"\\\\]+", "\\D\\W?\\S",
                              "(a(b(c)?)?)*", "ab{2,}", "[-a]+", "\\x41|\\u0042|\\.", "^a+$"}) {
    auto expr = regex_to_gbnf(pattern, RegexTarget::kText);
    ASSERT_TRUE(expr.is_ok()) << pattern << ": " << expr.status().message();
    const auto g = compile("root ::= " + *expr, vocab);
    ASSERT_NE(g, nullptr) << *expr;
    const std::regex re(pattern, std::regex::ECMAScript);
    for (int i = 0; i < 400; ++i) {
      std::string s;
      const int len = std::uniform_int_distribution<int>(0, 6)(rng);
      for (int k = 0; k < len; ++k) s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      ASSERT_EQ(full_match(g, s), std::regex_match(s, re)) << pattern << " on \"" << s << "\"";
    }
  }
}

TEST(RegexTest, JsonStringPatternsMatchTheEncodedStringAnywhereUnlessAnchored) {
  const auto vocab = byte_vocabulary();
  auto body = [&](const char* pattern) {
    auto e = regex_to_gbnf(pattern, RegexTarget::kJsonString);
    EXPECT_TRUE(e.is_ok()) << pattern;
    return compile("root ::= \"\\\"\" " + *e + " \"\\\"\"", vocab);
  };
  const auto anchored = body("^a\"b\\d$");
  EXPECT_TRUE(full_match(anchored, R"("a\"b7")"));
  EXPECT_FALSE(full_match(anchored, R"("a"b7")"));
  EXPECT_FALSE(full_match(anchored, R"("xa\"b7")"));
  const auto loose = body("[0-9]{3}");
  EXPECT_TRUE(full_match(loose, R"("tel 555 now")"));
  EXPECT_FALSE(full_match(loose, R"("tel 55 now")"));
  const auto newline = body("^a\\nb$");
  EXPECT_TRUE(full_match(newline, R"("a\nb")"));
}

TEST(RegexTest, UnsupportedConstructsAreNamed) {
  for (const char* p : {"(a)\\1", "a(?=b)", "\\bword", "a++", "[[:alpha:]]", "a^b", "^a|b$", "(?i)a"}) {
    auto e = regex_to_gbnf(p, RegexTarget::kText);
    ASSERT_FALSE(e.is_ok()) << p;
    EXPECT_EQ(e.status().code(), ErrorCode::kUnsupported) << p << ": " << e.status().message();
  }
  for (const char* p : {"(a", "a)", "[a", "a{3,1}", "*a"}) {
    auto e = regex_to_gbnf(p, RegexTarget::kText);
    ASSERT_FALSE(e.is_ok()) << p;
    EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument) << p << ": " << e.status().message();
  }
}

}  // namespace
}  // namespace hearth::grammar
