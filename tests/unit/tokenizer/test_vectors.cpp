#include "tests/unit/tokenizer/test_vectors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "common/json.h"
#include "common/mapped_file.h"

namespace hearth::testing {
namespace {

std::string read_all(const std::filesystem::path& path) {
  auto text = read_small_file(path, size_t{64} << 20);
  EXPECT_TRUE(text.is_ok()) << text.status().to_string();
  return text.is_ok() ? *text : std::string();
}

std::vector<TokenId> ids_of(const boost::json::value& v) {
  std::vector<TokenId> ids;
  for (const auto& id : v.as_array()) ids.push_back(static_cast<TokenId>(id.to_number<int64_t>()));
  return ids;
}

std::string show_ids(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace

std::vector<VectorCase> read_jsonl_vectors(const std::filesystem::path& path) {
  std::vector<VectorCase> cases;
  std::istringstream in(read_all(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto v = json_parse(line, path.string());
    EXPECT_TRUE(v.is_ok()) << v.status().to_string();
    if (!v.is_ok()) continue;
    const auto& obj = v->as_object();
    VectorCase c;
    c.text = std::string(obj.at("text").as_string());
    c.ids = ids_of(obj.at("ids"));
    if (obj.contains("decoded")) c.decoded = std::string(obj.at("decoded").as_string());
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<std::string> read_inp_texts(const std::filesystem::path& inp) {
  // Each string is followed by "\n__ggml_vocab_test__\n"; the newline before the
  // marker belongs to the separator, not to the string.
  static constexpr std::string_view kMarker = "\n__ggml_vocab_test__\n";
  const std::string text = read_all(inp);
  std::vector<std::string> texts;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t hit = text.find(kMarker, pos);
    if (hit == std::string::npos) break;
    texts.push_back(text.substr(pos, hit - pos));
    pos = hit + kMarker.size();
  }
  return texts;
}

std::vector<VectorCase> read_inp_out_vectors(const std::filesystem::path& inp, const std::filesystem::path& out) {
  const std::vector<std::string> texts = read_inp_texts(inp);
  std::vector<std::vector<TokenId>> ids;
  std::istringstream in(read_all(out));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<TokenId> row;
    long id = 0;
    while (words >> id) row.push_back(static_cast<TokenId>(id));
    ids.push_back(std::move(row));
  }
  EXPECT_EQ(texts.size(), ids.size()) << inp << " and " << out << " disagree on the number of cases";
  std::vector<VectorCase> cases;
  for (size_t i = 0; i < std::min(texts.size(), ids.size()); ++i) cases.push_back({texts[i], ids[i], std::nullopt});
  return cases;
}

std::vector<VectorCase> read_gpt3_vectors(const std::filesystem::path& path) {
  std::vector<VectorCase> cases;
  auto v = json_parse(read_all(path), path.string());
  EXPECT_TRUE(v.is_ok()) << v.status().to_string();
  if (!v.is_ok()) return cases;
  for (const auto& c : v->as_object().at("cases").as_array()) {
    cases.push_back({std::string(c.as_object().at("text").as_string()), ids_of(c.as_object().at("ids")), std::nullopt});
  }
  return cases;
}

VectorCounts check_vectors(const Tokenizer& tokenizer, const std::vector<VectorCase>& cases, const std::string& label) {
  VectorCounts counts;
  EncodeOptions plain;
  plain.add_special = false;
  plain.parse_special = false;
  int reported = 0;
  for (const VectorCase& c : cases) {
    ++counts.total;
    auto ids = tokenizer.encode(c.text, plain);
    if (ids.is_ok() && *ids == c.ids) {
      ++counts.encode_pass;
    } else if (reported++ < 5) {
      ADD_FAILURE() << label << ": encode(\"" << c.text << "\") gave "
                    << (ids.is_ok() ? show_ids(*ids) : ids.status().to_string()) << ", expected " << show_ids(c.ids);
    }
    if (c.decoded) {
      ++counts.decode_checked;
      const std::string text = tokenizer.decode(c.ids);
      if (text == *c.decoded) {
        ++counts.decode_pass;
      } else if (reported++ < 5) {
        ADD_FAILURE() << label << ": decode(" << show_ids(c.ids) << ") gave \"" << text << "\", expected \""
                      << *c.decoded << "\"";
      }
    }
  }
  std::printf("[vectors] %s: encode %zu/%zu, decode %zu/%zu\n", label.c_str(), counts.encode_pass, counts.total,
              counts.decode_pass, counts.decode_checked);
  std::fflush(stdout);
  ::testing::Test::RecordProperty(label + ".encode",
                                  std::to_string(counts.encode_pass) + "/" + std::to_string(counts.total));
  if (counts.decode_checked > 0) {
    ::testing::Test::RecordProperty(label + ".decode",
                                    std::to_string(counts.decode_pass) + "/" + std::to_string(counts.decode_checked));
  }
  EXPECT_GT(counts.total, 0u) << label << ": no cases read";
  EXPECT_EQ(counts.encode_pass, counts.total) << label;
  EXPECT_EQ(counts.decode_pass, counts.decode_checked) << label;
  return counts;
}

std::unique_ptr<Tokenizer> load_from_path(const std::filesystem::path& path, std::optional<int32_t> vocab_size) {
  auto source = tokenizer_source_from_path(path);
  EXPECT_TRUE(source.is_ok()) << path << ": " << source.status().to_string();
  if (!source.is_ok()) return nullptr;
  source->vocab_size = vocab_size;
  auto tokenizer = tokenizer_load(*source);
  EXPECT_TRUE(tokenizer.is_ok()) << path << ": " << tokenizer.status().to_string();
  if (!tokenizer.is_ok()) return nullptr;
  return std::move(tokenizer).value();
}

}  // namespace hearth::testing
