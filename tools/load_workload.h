// The requests `hearth bench` sends: synthetic prompts of a set length with a shared
// prefix of a set share (as a common system prompt is), or prompts from a file; each
// made into a streaming OpenAI request body. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

struct WorkloadSpec {
  std::string model;
  bool chat = false;          // /v1/chat/completions (one user message), else /v1/completions
  int input_tokens = 64;      // synthetic prompts
  int output_tokens = 32;     // max_tokens (a prompts file's own max_tokens wins)
  double shared_prefix = 0;   // the share of input_tokens every synthetic prompt begins with
  int num_prompts = 1000;     // distinct synthetic prompts
  bool ignore_eos = false;
  std::optional<double> temperature;
  uint64_t seed = 1;
  boost::json::object extra;  // added to every body, replacing fields of the same name
};

// Prompt texts: `num_prompts` of them, each the same shared prefix then its own words.
// With a tokenizer each encodes to exactly input_tokens tokens (no BOS counted); without
// one, a word stands for a token.
Result<std::vector<std::string>> synthetic_prompts(const WorkloadSpec& spec, const Tokenizer* tokenizer);

// The request body for one prompt (text, or a JSON message array for chat).
std::string request_body(const WorkloadSpec& spec, std::string_view prompt, std::optional<int> max_tokens = {});

Result<std::vector<std::string>> synthetic_bodies(const WorkloadSpec& spec, const Tokenizer* tokenizer);
// One body per non-empty line of `text`: a JSON string, a JSON object with "prompt" or
// "messages" (and optionally "max_tokens"), or else the line itself as plain text.
Result<std::vector<std::string>> bodies_from_prompts(const WorkloadSpec& spec, std::string_view text);

// One line for the log, and the settings for the JSON report.
std::string describe(const WorkloadSpec& spec, bool from_file);
boost::json::object workload_json(const WorkloadSpec& spec, const std::string& prompts_file);

}  // namespace hearth::cli
