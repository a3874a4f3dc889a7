// GrammarCache: the compiled grammars of the requests an engine runs, by their GBNF text,
// so that requests with the same schema share one compiled grammar and its cached masks
// (grammar/matcher.h). The vocabulary is built on first use (a grammar request), from a
// source the engine gives, so engines that never see one pay nothing.
// Not thread-safe: the step loop's.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace hearth {

// Makes the model's vocabulary (token byte strings, one per logit row).
using VocabularySource = std::function<Result<std::shared_ptr<const grammar::Vocabulary>>()>;

class GrammarCache {
 public:
  explicit GrammarCache(VocabularySource source, size_t capacity = 32)
      : source_(std::move(source)), capacity_(capacity) {}

  // The compiled grammar for `gbnf`: kInvalidArgument for a grammar that does not parse or
  // that this vocabulary cannot write; kUnsupported when the engine has no vocabulary.
  Result<std::shared_ptr<grammar::CompiledGrammar>> get(const std::string& gbnf);

 private:
  VocabularySource source_;
  size_t capacity_;
  std::shared_ptr<const grammar::Vocabulary> vocabulary_;
  Status vocabulary_error_;
  bool tried_ = false;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<grammar::CompiledGrammar>, std::list<std::string>::iterator>>
      compiled_;
};

}  // namespace hearth
