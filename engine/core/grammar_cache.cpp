#include "engine/core/grammar_cache.h"

namespace hearth {

Result<std::shared_ptr<grammar::CompiledGrammar>> GrammarCache::get(const std::string& gbnf) {
  const auto hit = compiled_.find(gbnf);
  if (hit != compiled_.end()) {
    lru_.splice(lru_.begin(), lru_, hit->second.second);
    return hit->second.first;
  }
  if (!tried_) {
    tried_ = true;
    if (!source_) {
      vocabulary_error_ = make_error(ErrorCode::kUnsupported, "this engine has no token table to match grammars with");
    } else if (auto v = source_(); v.is_ok()) {
      vocabulary_ = std::move(v).value();
    } else {
      vocabulary_error_ = v.status();
    }
  }
  if (!vocabulary_) return vocabulary_error_;
  HEARTH_ASSIGN_OR_RETURN(grammar::Grammar g, grammar::Grammar::parse(gbnf));
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<grammar::CompiledGrammar> c,
                          grammar::CompiledGrammar::create(std::move(g), vocabulary_));
  if (c->min_output_bytes() >= grammar::kUnreachable) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the model's vocabulary cannot write any output the constraint allows");
  }
  if (compiled_.size() >= capacity_) {
    compiled_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(gbnf);
  compiled_.emplace(gbnf, std::pair(c, lru_.begin()));
  return c;
}

}  // namespace hearth
