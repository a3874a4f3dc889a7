#include "engine/core/speculation.h"

#include <algorithm>

namespace hearth {
namespace {

constexpr double kStateDecay = 0.9;   // per drafting step: a sequence's last ~10 drafts count
constexpr double kCostDecay = 0.95;   // per step: the last ~20 steps fit the cost
constexpr int32_t kProbeAfter = 16;   // decoding steps without a draft before one probe ...
constexpr int32_t kProbeAfterMax = 256;  // ... doubling while probes fail, up to this

}  // namespace

std::string_view spec_method_name(SpecMethod method) {
  switch (method) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraft: return "draft";
  }
  return "unknown";
}

Result<SpecMethod> spec_method_from_name(std::string_view name) {
  if (name == "none") return SpecMethod::kNone;
  if (name == "ngram") return SpecMethod::kNgram;
  if (name == "draft") return SpecMethod::kDraft;
  return make_error(ErrorCode::kInvalidArgument, "unknown speculative method \"{}\" (ngram, draft or none)", name);
}

Status spec_config_validate(const SpecConfig& c) {
  if (c.max_tokens < 1 || c.max_tokens > kMaxSpecTokens) {
    return make_error(ErrorCode::kInvalidArgument, "--spec-tokens {} is out of range 1..{}", c.max_tokens,
                      kMaxSpecTokens);
  }
  if (c.ngram_min < 1 || c.ngram_max < c.ngram_min || c.ngram_max > 64) {
    return make_error(ErrorCode::kInvalidArgument, "the n-gram sizes {}..{} are out of range 1..64", c.ngram_min,
                      c.ngram_max);
  }
  return Status::ok();
}

void ngram_propose(std::span<const TokenId> tokens, int32_t ngram_min, int32_t ngram_max, int32_t k,
                   std::vector<TokenId>& out) {
  out.clear();
  const auto n = static_cast<int64_t>(tokens.size());
  if (k < 1 || ngram_min < 1 || n < ngram_min + 1) return;
  const int64_t longest = std::min<int64_t>(ngram_max, n - 1);
  const TokenId last = tokens[static_cast<size_t>(n - 1)];
  int64_t best = 0, best_end = -1;  // match length, and where the earlier occurrence ends
  for (int64_t j = n - 2; j >= 0 && best < longest; --j) {
    if (tokens[static_cast<size_t>(j)] != last) continue;
    int64_t m = 1;
    while (m < longest && j - m >= 0 && tokens[static_cast<size_t>(j - m)] == tokens[static_cast<size_t>(n - 1 - m)]) ++m;
    if (m > best) {
      best = m;
      best_end = j;
    }
  }
  if (best < ngram_min) return;
  // What followed the earlier occurrence; where that runs into the end, the text repeats
  // with the period between the two occurrences.
  const int64_t period = n - 1 - best_end;
  for (int64_t i = 0; i < k; ++i) out.push_back(tokens[static_cast<size_t>(best_end + 1 + i % period)]);
}

double SpecState::accept() const { return (accepted + 1.0) / (accepted + rejected + 2.0); }

void SpecState::observe(int32_t drafted, int32_t kept) {
  idle_steps = 0;
  if (drafted == 0) return;  // nothing was compared
  if (probing) probe_after = kept > 0 ? kProbeAfter : std::min(2 * probe_after, kProbeAfterMax);
  probing = false;
  accepted = accepted * kStateDecay + kept;
  rejected = rejected * kStateDecay + (kept < drafted ? 1.0 : 0.0);
}

void StepCost::observe(int32_t tokens, uint64_t ns) {
  const double n = tokens, t = static_cast<double>(ns);
  w_ = w_ * kCostDecay + 1.0;
  x_ = x_ * kCostDecay + n;
  y_ = y_ * kCostDecay + t;
  xx_ = xx_ * kCostDecay + n * n;
  xy_ = xy_ * kCostDecay + n * t;
  // Fitted where recent steps differ enough in size to tell the two costs apart (a
  // spread of a tenth of a token or more, relative to their mean size); otherwise the
  // last such fit stands.
  if (w_ < 4.0) return;
  const double mx = x_ / w_, my = y_ / w_;
  const double var = xx_ / w_ - mx * mx;
  if (var < 0.01 * std::max(mx * mx, 1.0)) return;
  const double per_token = (xy_ / w_ - mx * my) / var;
  if (per_token <= 0.0) return;  // noise: more tokens cannot cost less
  fit_ = StepFit{std::max(my - per_token * mx, 0.0), per_token};
}

double spec_threshold(std::optional<StepFit> fit, int32_t produced, int32_t tokens, double draft_ns) {
  if (!fit) return draft_ns > 0.0 ? 0.25 : 0.1;
  const double step = fit->fixed_ns + fit->per_token_ns * std::max(tokens, 1);
  if (step <= 0.0) return 1.0;
  const double t = static_cast<double>(produced) * (fit->per_token_ns + std::max(draft_ns, 0.0)) / step;
  return std::clamp(t, 0.0, 1.0);
}

int32_t spec_draft_length(SpecState& state, int32_t max_tokens, double threshold, bool back_off) {
  const double a = state.accept();
  double reach = 1.0;  // probability that every draft token so far is accepted
  int32_t k = 0;
  while (k < max_tokens) {
    reach *= a;
    if (reach <= threshold) break;
    ++k;
  }
  if (k > 0) {
    state.probing = false;
    return k;
  }
  if (++state.idle_steps < (back_off ? state.probe_after : kProbeAfter)) return 0;
  state.idle_steps = 0;
  state.probing = back_off;
  return 1;
}

}  // namespace hearth
