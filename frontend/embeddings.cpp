#include "frontend/embeddings.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/json.h"
#include "frontend/request_json.h"

namespace hearth {

using namespace request_json;

namespace {

constexpr size_t kMaxRequestDepth = 8;  // input: a list of lists of ids at most
constexpr std::array<std::string_view, 5> kFields = {"model", "input", "encoding_format", "dimensions", "user"};

std::string base64_of(std::span<const std::byte> bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? std::to_integer<uint32_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// `input`: a string, a list of strings, a list of ids, or a list of lists of ids.
Status parse_input(const json::value& input, EmbeddingsRequest& req) {
  auto text = [&](const json::value& v, const std::string& at) -> Status {
    if (v.as_string().empty()) {
      return make_error(ErrorCode::kInvalidArgument, "{} is empty: an input needs at least one token", at);
    }
    req.texts.emplace_back(v.as_string());
    return Status::ok();
  };
  if (input.is_string()) return text(input, "input");
  if (!input.is_array()) return wrong_type("input", "a string or an array", input);
  const json::array& list = input.as_array();
  if (list.empty()) return make_error(ErrorCode::kInvalidArgument, "input is an empty array: give at least one input");
  if (list.size() > kMaxEmbeddingInputs) {
    return make_error(ErrorCode::kInvalidArgument, "input has {} entries; at most {} are accepted", list.size(),
                      kMaxEmbeddingInputs);
  }
  if (is_number(list.front())) {  // one input as token ids
    HEARTH_ASSIGN_OR_RETURN(auto ids, token_ids_of(list, "input"));
    req.token_inputs.push_back(std::move(ids));
    return Status::ok();
  }
  const bool strings = list.front().is_string();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("input[{}]", i);
    if (strings) {
      if (!list[i].is_string()) return wrong_type(at, "a string (as input[0] is)", list[i]);
      HEARTH_RETURN_IF_ERROR(text(list[i], at));
      continue;
    }
    if (!list[i].is_array()) return wrong_type(at, "an array of token ids", list[i]);
    if (list[i].as_array().empty()) {
      return make_error(ErrorCode::kInvalidArgument, "{} is empty: an input needs at least one token", at);
    }
    HEARTH_ASSIGN_OR_RETURN(auto ids, token_ids_of(list[i].as_array(), at));
    req.token_inputs.push_back(std::move(ids));
  }
  return Status::ok();
}

}  // namespace

Result<EmbeddingsRequest> embeddings_parse_request(std::string_view body, const ApiParseOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(const json::value doc, json_parse(body, "request body", kMaxRequestDepth));
  if (!doc.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "the request body must be a JSON object, not {}", kind_of(doc));
  }
  const json::object& obj = doc.as_object();
  EmbeddingsRequest req;
  for (const auto& kv : obj) {
    const std::string_view name(kv.key().data(), kv.key().size());
    if (std::find(kFields.begin(), kFields.end(), name) != kFields.end()) continue;
    HEARTH_RETURN_IF_ERROR(unknown_field_of(name, "/v1/embeddings", options, req.ignored_fields));
  }
  HEARTH_ASSIGN_OR_RETURN(const auto model, opt_string(obj, "model"));
  req.model = model.value_or("");
  const json::value* input = field(obj, "input");
  if (input == nullptr) return make_error(ErrorCode::kInvalidArgument, "input is required");
  HEARTH_RETURN_IF_ERROR(parse_input(*input, req));
  HEARTH_ASSIGN_OR_RETURN(const auto format, opt_string(obj, "encoding_format"));
  if (format && *format != "float" && *format != "base64") {
    return make_error(ErrorCode::kInvalidArgument, "encoding_format must be \"float\" or \"base64\", not {}",
                      short_quote(*format));
  }
  req.base64 = format == "base64";
  HEARTH_ASSIGN_OR_RETURN(const auto dimensions, opt_integer_in(obj, "dimensions", 1, kInt32Max));
  if (dimensions) req.dimensions = static_cast<int32_t>(*dimensions);
  HEARTH_ASSIGN_OR_RETURN(req.user, opt_string(obj, "user"));
  return req;
}

std::vector<float> embedding_finish(std::span<const float> pooled, int32_t dimensions) {
  const size_t n = std::min(pooled.size(), static_cast<size_t>(std::max(dimensions, 0)));
  std::vector<float> out(pooled.begin(), pooled.begin() + static_cast<long>(n));
  double sum = 0.0;
  for (const float v : out) sum += static_cast<double>(v) * v;
  if (sum > 0.0) {
    const double scale = 1.0 / std::sqrt(sum);
    for (float& v : out) v = static_cast<float>(v * scale);
  }
  return out;
}

std::string embeddings_response_body(const std::vector<std::vector<float>>& vectors, bool base64,
                                     std::string_view model, int32_t prompt_tokens) {
  json::array data;
  data.reserve(vectors.size());
  for (size_t i = 0; i < vectors.size(); ++i) {
    json::value embedding;
    if (base64) {
      static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian float32");
      embedding = json::string(base64_of(std::as_bytes(std::span(vectors[i]))));
    } else {
      json::array values;
      values.reserve(vectors[i].size());
      for (const float v : vectors[i]) values.push_back(static_cast<double>(v));
      embedding = std::move(values);
    }
    data.push_back(json::object{{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  return json::serialize(json::object{{"object", "list"},
                                      {"data", std::move(data)},
                                      {"model", model},
                                      {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace hearth
