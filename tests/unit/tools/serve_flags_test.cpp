#include "tools/serve_flags.h"

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/test_util.h"

namespace hearth::cli {
namespace {

using hearth::testing::TempDir;

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir.path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(ServeFlagTableTest, YamlAndTomlGiveTheSameFlags) {
  TempDir dir;
  const std::string yaml = write(dir, "a.yaml",
                                 "# hearth\n"
                                 "port: 9000\n"
                                 "max_queue: 12   # a comment\n"
                                 "served-model-name:\n"
                                 "  - one\n"
                                 "  - \"two # not a comment\"\n"
                                 "cors-origin: [https://a.example, 'https://b.example']\n"
                                 "lenient-fields: true\n"
                                 "log-prompts: false\n");
  const std::string toml = write(dir, "a.toml",
                                 "port = 9000\n"
                                 "max_queue = 12\n"
                                 "served-model-name = [\"one\", \"two # not a comment\"]\n"
                                 "cors-origin = [\"https://a.example\", \"https://b.example\"]\n"
                                 "lenient-fields = true\n"
                                 "log-prompts = false\n");
  const std::vector<std::string> expected = {"--port", "9000", "--max-queue", "12", "--served-model-name", "one",
                                             "--served-model-name", "two # not a comment", "--cors-origin",
                                             "https://a.example", "--cors-origin", "https://b.example",
                                             "--lenient-fields"};
  for (const std::string& file : {yaml, toml}) {
    auto flags = read_config_file(file);
    ASSERT_TRUE(flags.is_ok()) << flags.status().to_string();
    EXPECT_EQ(*flags, expected) << file;
  }
}

TEST(ServeFlagTableTest, FlagsWinOverTheFileAndTheModelMayBePositional) {
  TempDir dir;
  const std::string model = write(dir, "model.gguf", "x");
  const std::string config = write(dir, "c.yaml", "port: 9000\nslots: 16\nserved-model-name: [a, b]\n");
  auto args = parse_serve_args({model, "--config", config, "--port", "9100", "--served-model-name", "c"});
  ASSERT_TRUE(args.is_ok()) << args.status().to_string();
  EXPECT_EQ(args->get("model"), model);
  EXPECT_EQ(args->get("port"), "9100");
  EXPECT_EQ(args->get("slots"), "16");
  EXPECT_EQ(args->get_all("served-model-name"), std::vector<std::string>{"c"});
  auto short_form = parse_serve_args({"-m", model});
  ASSERT_TRUE(short_form.is_ok());
  EXPECT_EQ(short_form->get("model"), model);
  // A flag whose value is the same text as the model stays that flag's.
  auto same_text = parse_serve_args({"--tokenizer", model, model});
  ASSERT_TRUE(same_text.is_ok()) << same_text.status().to_string();
  EXPECT_EQ(same_text->get("tokenizer"), model);
  EXPECT_EQ(same_text->get("model"), model);
  EXPECT_FALSE(parse_serve_args({model, "--model", model}).is_ok());
  EXPECT_FALSE(parse_serve_args({model, model}).is_ok());
}

// A draft model goes with --spec draft, and --spec draft with one.
TEST(ServeFlagTableTest, SpecDraftAndDraftModelComeTogether) {
  TempDir dir;
  const std::string model = write(dir, "model.gguf", "x");
  const std::string draft = write(dir, "draft.gguf", "x");
  auto both = parse_serve_args({model, "--spec", "draft", "--draft-model", draft});
  ASSERT_TRUE(both.is_ok()) << both.status().to_string();
  EXPECT_EQ(find_serve_flag("draft-model")->targets, kToLoader);
  const auto alone = parse_serve_args({model, "--spec", "draft"});
  EXPECT_NE(alone.status().message().find("--spec draft needs --draft-model"), std::string::npos)
      << alone.status().to_string();
  const auto unused = parse_serve_args({model, "--spec", "ngram", "--draft-model", draft});
  EXPECT_NE(unused.status().message().find("--draft-model is for --spec draft"), std::string::npos)
      << unused.status().to_string();
  EXPECT_EQ(parse_serve_args({model, "--draft-model", "/nonexistent"}).status().code(), ErrorCode::kNotFound);
}

TEST(ServeFlagTableTest, BadFilesNameTheLine) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a.yaml", "port: 1\n  slots: 2\n"},          // nested
      {"b.yaml", "port 1\n"},                       // no separator
      {"c.toml", "[serve]\nport = 1\n"},            // a table
      {"d.yaml", "port: [1, 2]\n"},                 // a list for a single value
      {"e.yaml", "lenient-fields: yes\n"},          // not true / false
      {"f.yaml", "name: \"open\n"},                 // unterminated
      {"g.yaml", "config: other.yaml\n"},           // not a setting
  };
  for (const auto& [name, text] : cases) {
    auto r = read_config_file(write(dir, name, text));
    ASSERT_FALSE(r.is_ok()) << name;
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().message().find("line"), std::string::npos) << r.status().to_string();
  }
  EXPECT_FALSE(read_config_file(write(dir, "h.ini", "port=1\n")).is_ok());
  EXPECT_FALSE(read_config_file((dir.path() / "missing.yaml").string()).is_ok());
}

TEST(ServeFlagTableTest, EveryFlagHasHelpAndASectionAndTheTableIsConsistent) {
  std::set<std::string_view> names;
  for (const ServeFlag& f : serve_flags()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.section.empty()) << f.name;
    EXPECT_NE(f.targets, 0u) << f.name;
    if (f.kind == FlagKind::kInt) {
      EXPECT_LT(f.min, f.max) << f.name;
    }
    if (f.kind == FlagKind::kChoice) {
      EXPECT_FALSE(f.choices.empty()) << f.name;
    }
    EXPECT_NE(serve_usage().find("--" + std::string(f.name)), std::string::npos) << f.name;
    EXPECT_NE(serve_flag_reference().find("`--" + std::string(f.name) + "`"), std::string::npos) << f.name;
  }
}

// The flags the shipped Kubernetes manifests and container pass to `hearth serve` are flags
// it has.
TEST(ServeFlagTableTest, TheDeployFilesUseRealFlags) {
  int seen = 0;
  for (const char* file : {"deploy/kubernetes/deployment.yaml", "deploy/kubernetes/deployment-gpu.yaml",
                           "deploy/container/Dockerfile"}) {
    std::ifstream in(std::filesystem::path(HEARTH_SOURCE_DIR) / file);
    ASSERT_TRUE(in) << file;
    for (std::string line; std::getline(in, line);) {
      for (size_t at = line.find("--"); at != std::string::npos; at = line.find("--", at + 2)) {
        if (at > 0 && line[at - 1] != ' ' && line[at - 1] != '"' && line[at - 1] != '[') continue;
        size_t end = at + 2;
        while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '-')) ++end;
        const std::string name = line.substr(at + 2, end - at - 2);
        if (line.find("serve") == std::string::npos && line.find("- --") == std::string::npos &&
            !line.starts_with("CMD")) {
          continue;
        }
        if (name.empty()) continue;
        ++seen;
        EXPECT_NE(find_serve_flag(name), nullptr) << file << ": --" << name << " is not a flag of hearth serve";
      }
    }
  }
  EXPECT_GT(seen, 5);
}

}  // namespace
}  // namespace hearth::cli
