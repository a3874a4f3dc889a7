// TextStream with real tokenizers: streamed text adds up to decode(), stop strings are
// found across token boundaries and never emitted, and no chunk holds half a character.
#include "frontend/text_stream.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "common/utf8.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;

constexpr const char* kStories = "models/stories260K/tok512.model";
constexpr const char* kLlama2 = "models/llama2-tokenizer/tokenizer.model";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> load(const std::filesystem::path& path) {
  auto source = tokenizer_source_from_path(path);
  EXPECT_TRUE(source.is_ok()) << path << ": " << source.status().to_string();
  if (!source.is_ok()) return nullptr;
  auto tokenizer = tokenizer_load(*source);
  EXPECT_TRUE(tokenizer.is_ok()) << path << ": " << tokenizer.status().to_string();
  if (!tokenizer.is_ok()) return nullptr;
  return std::move(tokenizer).value();
}

// Loads a shared tokenizer into `tok`, or skips the test when the file is absent.
#define LOAD_OR_SKIP(tok, relative)                      \
  const auto tok##_path = shared_path(relative);         \
  HEARTH_REQUIRE_SHARED(tok##_path);                     \
  const std::unique_ptr<Tokenizer> tok = load(tok##_path); \
  ASSERT_NE(tok, nullptr)

std::vector<TokenId> encode(const Tokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.encode(text, EncodeOptions{/*add_special=*/false, /*parse_special=*/false});
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  return ids.is_ok() ? *ids : std::vector<TokenId>{};
}

struct Streamed {
  std::string text;                 // every push and finish, joined
  std::vector<std::string> chunks;  // what each push returned
  bool stopped = false;
  size_t stopped_at = SIZE_MAX;     // index of the push after which stopped() became true
};

// Streams `ids`, checking on the way that every chunk is whole UTF-8, that text() is
// the concatenation of the chunks and that nothing more comes after a stop.
Streamed stream(const Tokenizer& tokenizer, const std::vector<TokenId>& ids, std::vector<std::string> stop,
           bool at_start = true) {
  TextStream ts(tokenizer, std::move(stop), at_start);
  Streamed run;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool was_stopped = ts.stopped();
    std::string chunk = ts.push(ids[i]);
    EXPECT_TRUE(utf8_is_valid(chunk)) << "push #" << i << " emitted half a character";
    if (was_stopped) {
      EXPECT_EQ(chunk, "") << "push #" << i << " emitted text after the stop";
    }
    if (ts.stopped() && run.stopped_at == SIZE_MAX) run.stopped_at = i;
    run.text += chunk;
    run.chunks.push_back(std::move(chunk));
    EXPECT_EQ(ts.text(), run.text);
  }
  const bool stopped_before_finish = ts.stopped();
  const std::string tail = ts.finish();
  if (stopped_before_finish) {
    EXPECT_EQ(tail, "");
  }
  run.text += tail;
  EXPECT_EQ(ts.text(), run.text);
  run.stopped = ts.stopped();
  return run;
}

struct Vector {
  std::string text;
  std::vector<TokenId> ids;
};

std::vector<Vector> read_vectors(const std::filesystem::path& path) {
  std::vector<Vector> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const boost::json::value v = boost::json::parse(line);
    Vector c;
    c.text = std::string(v.at("text").as_string());
    for (const auto& id : v.at("ids").as_array()) c.ids.push_back(static_cast<TokenId>(id.to_number<int64_t>()));
    out.push_back(std::move(c));
  }
  return out;
}

const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
const std::string kMultiByte =
    "emoji \xf0\x9f\xa6\x99\xf0\x9f\x94\xa5 test caf\xc3\xa9 \xe5\xa4\xa7\xe6\xa8\xa1\xe5\x9e\x8b";

TEST(TextStream, MatchesDecodeWithoutStopStrings) {
  size_t checked = 0;
  for (const char* model : {kStories, kLlama2}) {
    const auto path = shared_path(model);
    if (!std::filesystem::exists(path)) continue;
    const auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    const auto vectors_path =
        path.parent_path() / (path.parent_path().filename() == "stories260K" ? "tok512.vectors.jsonl"
                                                                             : "tokenizer.vectors.jsonl");
    std::vector<Vector> cases = {{kStory, encode(*tok, kStory)}, {kMultiByte, encode(*tok, kMultiByte)}};
    if (std::filesystem::exists(vectors_path)) {
      for (Vector& v : read_vectors(vectors_path)) cases.push_back(std::move(v));
    }
    for (const Vector& c : cases) {
      for (const bool at_start : {true, false}) {
        DecodeOptions options;
        options.at_start = at_start;
        const std::string expected = tok->decode(c.ids, options);
        // No stop strings; empty ones (ignored); one that never occurs, so text is held
        // back and released in pieces cut on character boundaries.
        const std::string never = "\x01@@ never here @@\x01";
        ASSERT_EQ(expected.find(never), std::string::npos);
        for (const std::vector<std::string>& stop :
             {std::vector<std::string>{}, std::vector<std::string>{"", ""}, std::vector<std::string>{never, "#"}}) {
          if (stop.size() == 2 && stop[1] == "#" && expected.find('#') != std::string::npos) continue;
          const Streamed run = stream(*tok, c.ids, stop, at_start);
          EXPECT_EQ(run.text, expected) << model << ": " << c.text;
          EXPECT_FALSE(run.stopped);
          ++checked;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "neither shared tokenizer is present under " << testing::shared_dir();
  EXPECT_GE(checked, 2u * 3u * 2u);
}

TEST(TextStream, MultiByteCharactersAreNeverEmittedHalf) {
  for (const char* model : {kStories, kLlama2}) {
    const auto path = shared_path(model);
    HEARTH_REQUIRE_SHARED(path);
    const auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    const std::vector<TokenId> ids = encode(*tok, kMultiByte);
    size_t byte_tokens = 0;
    for (const TokenId id : ids) byte_tokens += tok->type(id) == TokenType::kByte;
    ASSERT_GE(byte_tokens, 8u) << model << ": the emoji should need byte-fallback tokens";
    // Stop strings of every length from 1 to 7 bytes that never occur: the hold-back
    // boundary falls at every offset inside the multi-byte characters.
    for (size_t len = 1; len <= 7; ++len) {
      const Streamed run = stream(*tok, ids, {std::string(len, '#')});
      EXPECT_EQ(run.text, kMultiByte) << model << " len " << len;
      for (const std::string& chunk : run.chunks) EXPECT_EQ(chunk.find(kReplacement), std::string::npos);
    }
    // Stop strings that are, or end in, multi-byte characters.
    EXPECT_EQ(stream(*tok, ids, {"\xf0\x9f\x94\xa5"}).text, "emoji \xf0\x9f\xa6\x99");
    EXPECT_EQ(stream(*tok, ids, {"\xe6\xa8\xa1\xe5\x9e\x8b"}).text,
              "emoji \xf0\x9f\xa6\x99\xf0\x9f\x94\xa5 test caf\xc3\xa9 \xe5\xa4\xa7");
    EXPECT_EQ(stream(*tok, ids, {"\xc3\xa9 "}).text, "emoji \xf0\x9f\xa6\x99\xf0\x9f\x94\xa5 test caf");
    // Bytes from inside a character are not valid UTF-8 on their own: never a match.
    const Streamed lone = stream(*tok, ids, {"\xa6\x99", "\xf0\x9f"});
    EXPECT_EQ(lone.text, kMultiByte);
    EXPECT_FALSE(lone.stopped);
  }
}

TEST(TextStream, HoldBackIsCutOnACharacterBoundary) {
  LOAD_OR_SKIP(tok, kLlama2);
  const auto c = tok->find_piece("\xe2\x96\x81" "c");                 // "▁c"
  const auto afe = tok->find_piece("af\xc3\xa9");                     // "afé"
  const auto space = tok->find_piece("\xe2\x96\x81");                 // "▁"
  ASSERT_TRUE(c && afe && space);
  TextStream ts(*tok, {"zz"}, /*at_start=*/false);  // holds back the last byte
  EXPECT_EQ(ts.push(*c), " ");
  // "café" with one byte held: the cut falls inside "é" and moves back before it.
  EXPECT_EQ(ts.push(*afe), "caf");
  EXPECT_EQ(ts.push(*space), "\xc3\xa9");
  EXPECT_EQ(ts.finish(), " ");
  EXPECT_EQ(ts.text(), " caf\xc3\xa9 ");
  EXPECT_FALSE(ts.stopped());
}

TEST(TextStream, HoldsBackOnlyWhatCouldStillBecomeAStop) {
  LOAD_OR_SKIP(tok, kStories);
  const std::vector<TokenId> ids = encode(*tok, "Once upon a time");
  ASSERT_EQ(ids, (std::vector<TokenId>{403, 407, 261, 378}));
  {
    TextStream ts(*tok, {"xyz"}, /*at_start=*/true);  // holds the last 2 bytes
    EXPECT_EQ(ts.push(ids[0]), "On");
    EXPECT_EQ(ts.push(ids[1]), "ce up");
    EXPECT_EQ(ts.push(ids[2]), "on");
    EXPECT_EQ(ts.push(ids[3]), " a ti");
    EXPECT_EQ(ts.finish(), "me");
  }
  {
    TextStream ts(*tok, {}, /*at_start=*/true);  // nothing to wait for
    EXPECT_EQ(ts.push(ids[0]), "Once");
    EXPECT_EQ(ts.push(ids[1]), " upon");
    EXPECT_EQ(ts.finish(), "");
  }
  {
    TextStream ts(*tok, {"", ""}, /*at_start=*/false);  // empty stop strings are ignored
    EXPECT_EQ(ts.push(ids[0]), " Once");
    EXPECT_EQ(ts.push(ids[1]), " upon");
  }
  {
    // Control tokens add no text and cannot complete a stop string.
    TextStream ts(*tok, {"</s>", "<s>"}, /*at_start=*/true);  // holds the last 3 bytes
    EXPECT_EQ(ts.push(tok->bos_id()), "");
    EXPECT_EQ(ts.push(ids[0]), "O");
    EXPECT_EQ(ts.push(tok->eos_id()), "");
    EXPECT_FALSE(ts.stopped());
    EXPECT_EQ(ts.finish(), "nce");
  }
}

TEST(TextStream, StopSplitAcrossTokens) {
  LOAD_OR_SKIP(tok, kStories);
  const std::vector<TokenId> ids = encode(*tok, kStory);
  // "girl named" is "▁g" "ir" "l" "▁named": four tokens.
  const std::string stop = "girl named";
  size_t pieces_with_stop = 0;
  for (const TokenId id : ids) pieces_with_stop += std::string(tok->token_bytes(id)).find("girl") != std::string::npos;
  ASSERT_EQ(pieces_with_stop, 0u) << "the stop string should span several tokens";
  const Streamed run = stream(*tok, ids, {stop});
  EXPECT_TRUE(run.stopped);
  EXPECT_EQ(run.text, "Once upon a time, there was a little ");
  // Stopped exactly at the token that completed it ("▁named"), not before.
  ASSERT_LT(run.stopped_at, ids.size());
  EXPECT_EQ(tok->token_bytes(ids[run.stopped_at]), " named");
  // Nothing of the stop string ever went out, even while it was only partly there.
  // ("g" first occurs in the text where the stop string begins.)
  std::string so_far;
  for (const std::string& chunk : run.chunks) {
    so_far += chunk;
    EXPECT_EQ(so_far.find('g'), std::string::npos) << so_far;
  }

  // Mid-text streams (after a prompt) keep the leading space of the first token.
  const Streamed mid = stream(*tok, ids, {"a time"}, /*at_start=*/false);
  EXPECT_EQ(mid.text, " Once upon ");
}

TEST(TextStream, StopAtTheVeryStart) {
  LOAD_OR_SKIP(tok, kStories);
  const std::vector<TokenId> ids = encode(*tok, kStory);
  for (const std::string stop : {"Once", "On", "O", "Once upon"}) {
    const Streamed run = stream(*tok, ids, {stop});
    EXPECT_TRUE(run.stopped) << stop;
    EXPECT_EQ(run.text, "") << stop;
  }
  EXPECT_EQ(stream(*tok, ids, {"Once"}).stopped_at, 0u);
  // Mid-text, the first token brings a space.
  const Streamed space = stream(*tok, ids, {" "}, /*at_start=*/false);
  EXPECT_TRUE(space.stopped);
  EXPECT_EQ(space.text, "");
  EXPECT_EQ(space.stopped_at, 0u);
}

TEST(TextStream, NothingAfterTheStop) {
  LOAD_OR_SKIP(tok, kStories);
  const std::vector<TokenId> ids = encode(*tok, kStory);
  TextStream ts(*tok, {"time"}, /*at_start=*/true);
  std::string out;
  for (const TokenId id : ids) out += ts.push(id);
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(out, "Once upon a ");
  EXPECT_EQ(ts.push(ids[0]), "");
  EXPECT_EQ(ts.finish(), "");
  EXPECT_EQ(ts.finish(), "");
  EXPECT_EQ(ts.text(), "Once upon a ");
}

TEST(TextStream, OverlappingStopStrings) {
  LOAD_OR_SKIP(tok, kStories);
  const std::vector<TokenId> ids = encode(*tok, kStory);
  struct Case {
    std::vector<std::string> stop;
    std::string text;
  };
  const std::vector<Case> cases = {
      // Both complete with "▁time": the one that starts first wins, whatever the order.
      {{"a time", "upon a time"}, "Once "},
      {{"upon a time", "a time"}, "Once "},
      // One completes a token earlier than the other.
      {{"upon a", "a time"}, "Once "},
      {{"a time", "on a ti"}, "Once up"},
      // One is a prefix of the other.
      {{"a little", "a"}, "Once upon "},
      {{"little girl", "little"}, "Once upon a time, there was a "},
      // One overlaps the other's end; one lies inside the other.
      {{"e, th", "me, there"}, "Once upon a ti"},
      {{"ittle", "little girl named Lily"}, "Once upon a time, there was a l"},
      {{"xyz", "park.", "Lily"}, "Once upon a time, there was a little girl named "},
  };
  for (const Case& c : cases) {
    const Streamed run = stream(*tok, ids, c.stop);
    EXPECT_TRUE(run.stopped) << c.stop[0];
    EXPECT_EQ(run.text, c.text) << c.stop[0] << " / " << c.stop[1];
  }
}

TEST(TextStream, PartialMatchAtTheEndIsFlushedByFinish) {
  LOAD_OR_SKIP(tok, kStories);
  const std::string text = "Once upon a time, there was";
  const std::vector<TokenId> ids = encode(*tok, text);
  TextStream ts(*tok, {"upon a time, there is", "wasn't"}, /*at_start=*/true);
  for (const TokenId id : ids) ts.push(id);
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.text(), "Once up");  // the last 20 bytes could still begin a stop string
  EXPECT_EQ(ts.finish(), "on a time, there was");
  EXPECT_EQ(ts.text(), text);
  EXPECT_FALSE(ts.stopped());
}

TEST(TextStream, FinishReplacesUnfinishedBytes) {
  LOAD_OR_SKIP(tok, kLlama2);
  const auto f0 = tok->find_piece("<0xF0>");
  const auto x9f = tok->find_piece("<0x9F>");
  ASSERT_TRUE(f0 && x9f);
  TextStream ts(*tok, {"zzz"}, /*at_start=*/false);
  EXPECT_EQ(ts.push(15043), " Hel");  // " Hello": 6 bytes, 2 held back
  EXPECT_EQ(ts.push(*f0), "");
  EXPECT_EQ(ts.push(*x9f), "");
  EXPECT_EQ(ts.finish(), std::string("lo") + std::string(kReplacement) + std::string(kReplacement));
  // A stop string made whole by the replacement characters is still a stop.
  TextStream stops(*tok, {std::string(kReplacement)}, /*at_start=*/false);
  EXPECT_EQ(stops.push(15043), " Hel");
  EXPECT_EQ(stops.push(*f0), "");
  EXPECT_EQ(stops.finish(), "lo");
  EXPECT_TRUE(stops.stopped());
  EXPECT_EQ(stops.text(), " Hello");
}

// Every substring of the decoded text, used as the stop string, cuts the stream exactly
// before its first occurrence; a stream never holds back more than the longest stop
// string (less one byte) plus an unfinished character.
TEST(TextStream, EverySubstringAsStop) {
  for (const char* model : {kStories, kLlama2}) {
    const auto path = shared_path(model);
    HEARTH_REQUIRE_SHARED(path);
    const auto tok = load(path);
    ASSERT_NE(tok, nullptr);
    for (const std::string& source : {kStory.substr(0, 60), kMultiByte}) {
      const std::vector<TokenId> ids = encode(*tok, source);
      const std::string decoded = tok->decode(ids);
      for (size_t pos = 0; pos < decoded.size(); ++pos) {
        if (utf8_complete_prefix(decoded.substr(0, pos)) != pos) continue;  // inside a character
        for (size_t len = 1; len <= 9 && pos + len <= decoded.size(); ++len) {
          const std::string stop = decoded.substr(pos, len);
          if (!utf8_is_valid(stop)) continue;
          const size_t first = decoded.find(stop);
          // Alone, and beside a longer stop string that never occurs.
          for (const size_t max_stop : {len, len + 3}) {
            std::vector<std::string> stops = {stop};
            if (max_stop > len) stops.push_back(std::string(max_stop, '#'));
            TextStream ts(*tok, stops, /*at_start=*/true);
            IncrementalDetokenizer detok(*tok, /*at_start=*/true);
            std::string decoded_so_far;
            for (const TokenId id : ids) {
              const std::string chunk = ts.push(id);
              ASSERT_TRUE(utf8_is_valid(chunk));
              ASSERT_EQ(decoded.compare(0, ts.text().size(), ts.text()), 0) << "emitted more than the text";
              ASSERT_LE(ts.text().size(), first) << "emitted part of stop " << stop;
              decoded_so_far += detok.push(id);
              if (!ts.stopped()) {
                ASSERT_LE(decoded_so_far.size() - ts.text().size(), (max_stop - 1) + 3)
                    << "held back too much with stop " << stop;
              }
            }
            ts.finish();
            ASSERT_TRUE(ts.stopped()) << model << ": stop " << stop;
            ASSERT_EQ(ts.text(), decoded.substr(0, first)) << model << ": stop " << stop;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hearth
