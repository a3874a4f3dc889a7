#include "engine/core/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/ops.h"
#include "kernels/sampling_math.h"

namespace hearth {

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size) {
  counts_.assign(static_cast<size_t>(vocab_size), 0);
  seen_.assign(static_cast<size_t>(vocab_size), 0);
  candidates_.reserve(static_cast<size_t>(vocab_size));
  touched_.reserve(1024);
}

double Sampler::uniform_at(uint64_t n) const { return kernels::dev::sampling_uniform_at(params_.seed, n); }

SampledToken Sampler::sample(std::span<float> logits, std::span<const TokenId> prompt,
                             std::span<const TokenId> output) {
  const SamplingParams& p = params_;
  ++position_;  // every call takes its draw's index, whether or not it draws
  const bool penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (penalties) {
    for (TokenId id : output) {
      if (id < 0 || id >= vocab_size_) continue;
      if (counts_[static_cast<size_t>(id)]++ == 0 && !seen_[static_cast<size_t>(id)]) touched_.push_back(id);
      seen_[static_cast<size_t>(id)] = 1;
    }
    if (p.repetition_penalty != 1.0f) {
      for (TokenId id : prompt) {
        if (id < 0 || id >= vocab_size_) continue;
        if (!seen_[static_cast<size_t>(id)] && counts_[static_cast<size_t>(id)] == 0) touched_.push_back(id);
        seen_[static_cast<size_t>(id)] = 1;
      }
    }
    for (int32_t id : touched_) {
      float& l = logits[static_cast<size_t>(id)];
      l = kernels::dev::sampling_penalize(l, seen_[static_cast<size_t>(id)] != 0, counts_[static_cast<size_t>(id)],
                                          p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
    }
    for (int32_t id : touched_) {
      counts_[static_cast<size_t>(id)] = 0;
      seen_[static_cast<size_t>(id)] = 0;
    }
    touched_.clear();
  }

  if (p.temperature == 0.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab_size_; ++i) {
      if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
    }
    // Log-probability under the full distribution.
    const double sum = kernels::cpu::sum_exp_below(logits.data(), vocab_size_, logits[static_cast<size_t>(best)]);
    return {best, static_cast<float>(-std::log(sum))};
  }

  // Candidates sorted by logit, cut by top-k, then by top-p and min-p over the softmax.
  candidates_.clear();
  const float inv_t = 1.0f / p.temperature;
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float l = logits[static_cast<size_t>(i)];
    if (l == -std::numeric_limits<float>::infinity() || std::isnan(l)) continue;
    candidates_.emplace_back(l * inv_t, i);
  }
  if (candidates_.empty()) return {0, -std::numeric_limits<float>::infinity()};
  auto by_logit = [](const auto& a, const auto& b) {
    return kernels::dev::sampling_before(a.first, a.second, b.first, b.second);
  };
  size_t keep = candidates_.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<long>(keep), candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  const float max = candidates_[0].first;
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += std::exp(static_cast<double>(candidates_[i].first - max));
  if (p.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += std::exp(static_cast<double>(candidates_[i].first - max)) / total;
      if (cumulative >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (p.min_p > 0.0f) {
    // Keep tokens whose probability is at least min_p times the top token's.
    const double threshold = std::log(static_cast<double>(p.min_p));
    size_t cut = 1;
    while (cut < keep && kernels::dev::sampling_min_p_keeps(candidates_[cut].first, max, threshold)) ++cut;
    keep = cut;
  }
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += std::exp(static_cast<double>(candidates_[i].first - max));
  double r = uniform_at(position_ - 1) * kept_total;
  size_t chosen = keep - 1;
  for (size_t i = 0; i < keep; ++i) {
    r -= std::exp(static_cast<double>(candidates_[i].first - max));
    if (r < 0.0) {
      chosen = i;
      break;
    }
  }
  const double logprob = static_cast<double>(candidates_[chosen].first - max) - std::log(kept_total);
  return {candidates_[chosen].second, static_cast<float>(logprob)};
}

SampledRow sample_row(Sampler& sampler, std::span<const float> l, int32_t top_logprobs,
                      std::span<const TokenId> prompt, std::span<const TokenId> output, SampleScratch& scratch,
                      const RowShaping* shaping) {
  const size_t vocab = l.size();
  float max = l[0];
  size_t arg = 0;
  for (size_t i = 1; i < vocab; ++i) {
    if (l[i] > max) max = l[i], arg = i;
  }
  const double sum = kernels::cpu::sum_exp_below(l.data(), static_cast<int64_t>(vocab), max);
  const float log_z = max + static_cast<float>(std::log(sum));
  const auto k = static_cast<size_t>(std::clamp(top_logprobs, 0, kMaxTopLogprobs));
  SampledRow out;
  out.top_id = static_cast<TokenId>(arg);
  out.top_logit = max;
  if (k > 0) {
    auto& top = scratch.top;
    top.clear();
    for (size_t i = 0; i < vocab; ++i) {
      if (top.size() < k || l[i] > top.back().first) {
        top.emplace_back(l[i], static_cast<int32_t>(i));
        std::sort(top.begin(), top.end(), [](const auto& x, const auto& y) {
          return x.first > y.first || (x.first == y.first && x.second < y.second);
        });
        if (top.size() > k) top.pop_back();
      }
    }
    out.n_top = static_cast<int32_t>(top.size());
    for (size_t i = 0; i < top.size(); ++i) {
      out.top_ids[i] = top[i].second;
      out.top_logprobs[i] = top[i].first - log_z;
    }
  }
  scratch.row.assign(l.begin(), l.end());
  if (shaping != nullptr) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (const LogitBias& b : shaping->bias) {
      if (b.id >= 0 && static_cast<size_t>(b.id) < vocab) scratch.row[static_cast<size_t>(b.id)] += b.bias;
    }
    for (const TokenId id : shaping->banned) {
      if (id >= 0 && static_cast<size_t>(id) < vocab) scratch.row[static_cast<size_t>(id)] = kNegInf;
    }
    if (!shaping->allowed.empty()) {
      for (size_t w = 0; w * 64 < vocab; ++w) {
        const uint64_t bits = w < shaping->allowed.size() ? shaping->allowed[w] : 0;
        if (bits == ~uint64_t{0}) continue;
        for (size_t i = w * 64; i < std::min(vocab, w * 64 + 64); ++i) {
          if (((bits >> (i - w * 64)) & 1u) == 0) scratch.row[i] = kNegInf;
        }
      }
    }
  }
  const SampledToken t = sampler.sample(scratch.row, prompt, output);
  out.id = t.id;
  out.logprob = l[static_cast<size_t>(t.id)] - log_z;
  return out;
}

}  // namespace hearth
