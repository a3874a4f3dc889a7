#include "quant/eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/core/backend.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"

namespace hearth::quant {
namespace {

// Running mean and variance (Welford), for the intervals.
class Moments {
 public:
  void add(double x) {
    ++n_;
    const double d = x - mean_;
    mean_ += d / static_cast<double>(n_);
    m2_ += d * (x - mean_);
  }
  double mean() const { return mean_; }
  // 1.96 standard errors of the mean.
  double half_width() const {
    return n_ > 1 ? 1.96 * std::sqrt(m2_ / static_cast<double>(n_ - 1) / static_cast<double>(n_)) : 0.0;
  }
  Estimate estimate() const { return {mean_, mean_ - half_width(), mean_ + half_width()}; }
  // exp of the mean of negative log-likelihoods, with the interval carried through exp.
  Estimate perplexity() const {
    return {std::exp(mean_), std::exp(mean_ - half_width()), std::exp(mean_ + half_width())};
  }

 private:
  int64_t n_ = 0;
  double mean_ = 0.0, m2_ = 0.0;
};

// log-softmax of a row, in double.
void log_softmax(const float* row, int32_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double max = -INFINITY;
  for (int32_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(row[i]));
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  const double log_z = max + std::log(sum);
  for (int32_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(row[i]) - log_z;
}

int32_t argmax(const float* row, int32_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

}  // namespace

SequenceScorer::~SequenceScorer() = default;

Result<std::unique_ptr<SequenceScorer>> SequenceScorer::create(const ModelConfig& config,
                                                               std::span<const TensorView> tensors,
                                                               std::string_view layout, int32_t ctx, int threads) {
  if (ctx < 2 || ctx > config.max_context) {
    return make_error(ErrorCode::kInvalidArgument, "--ctx must be between 2 and the model's context of {}, not {}",
                      config.max_context, ctx);
  }
  std::unique_ptr<SequenceScorer> s(new SequenceScorer());
  s->vocab_ = config.vocab_size;
  s->backend_ = make_cpu_backend({false, threads});
  HEARTH_ASSIGN_OR_RETURN(s->model_, Model::create(config, tensors, *s->backend_, ctx, {layout, nullptr}));
  const int32_t block = 16;
  HEARTH_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*s->backend_, {config.n_layers, config.kv_dim(), block,
                                                                         (ctx + block - 1) / block, KvDType::kF32}));
  s->cache_ = std::make_unique<KvCache>(std::move(cache));
  KvSequence seq;
  HEARTH_RETURN_IF_ERROR(kv_sequence_reserve(*s->cache_, seq, ctx));
  s->blocks_ = seq.blocks;
  return s;
}

Status SequenceScorer::logits(std::span<const TokenId> tokens, std::vector<float>& out) {
  ModelInput in;
  in.clear(cache_->config().block_size);
  HEARTH_RETURN_IF_ERROR(in.add_sequence(tokens, 0, blocks_, false));
  in.want_every_row();
  out.resize(tokens.size() * static_cast<size_t>(vocab_));
  return model_->forward(in, *cache_, out.data());
}

Result<EvalResult> evaluate(SequenceScorer& model, SequenceScorer* reference, std::span<const TokenId> tokens,
                            const EvalOptions& o, const ChunkProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.ctx < 4) return make_error(ErrorCode::kInvalidArgument, "--ctx must be at least 4, not {}", o.ctx);
  if (reference != nullptr && reference->vocab_size() != model.vocab_size()) {
    return make_error(ErrorCode::kInvalidArgument, "the reference model has {} tokens in its vocabulary, the model {}",
                      reference->vocab_size(), model.vocab_size());
  }
  int64_t chunks = static_cast<int64_t>(tokens.size()) / o.ctx;
  if (chunks < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the text has {} tokens, fewer than one chunk of --ctx {}: give more text or a smaller --ctx",
                      tokens.size(), o.ctx);
  }
  if (o.max_chunks > 0) chunks = std::min<int64_t>(chunks, o.max_chunks);
  const int32_t vocab = model.vocab_size();
  EvalResult r;
  r.chunks = static_cast<int32_t>(chunks);
  r.ctx = o.ctx;
  r.has_reference = reference != nullptr;
  Moments nll, ref_nll, kl, top1;
  std::vector<TokenId> chunk;
  std::vector<float> logits, ref_logits;
  std::vector<double> lp, ref_lp;
  for (int64_t k = 0; k < chunks; ++k) {
    chunk.assign(tokens.begin() + k * o.ctx, tokens.begin() + (k + 1) * o.ctx);
    if (o.bos >= 0) chunk[0] = o.bos;
    HEARTH_RETURN_IF_ERROR(model.logits(chunk, logits));
    if (reference != nullptr) HEARTH_RETURN_IF_ERROR(reference->logits(chunk, ref_logits));
    for (int32_t j = o.ctx / 2; j + 1 < o.ctx; ++j) {
      const float* row = &logits[static_cast<size_t>(j) * static_cast<size_t>(vocab)];
      const auto next = static_cast<size_t>(chunk[static_cast<size_t>(j) + 1]);
      log_softmax(row, vocab, lp);
      nll.add(-lp[next]);
      if (reference == nullptr) continue;
      const float* ref_row = &ref_logits[static_cast<size_t>(j) * static_cast<size_t>(vocab)];
      log_softmax(ref_row, vocab, ref_lp);
      ref_nll.add(-ref_lp[next]);
      double d = 0.0;
      for (int32_t i = 0; i < vocab; ++i) {
        const double p = std::exp(ref_lp[static_cast<size_t>(i)]);
        if (p > 0.0) d += p * (ref_lp[static_cast<size_t>(i)] - lp[static_cast<size_t>(i)]);
      }
      d = std::max(d, 0.0);  // rounding can leave a hair below zero for identical rows
      kl.add(d);
      r.kl_max = std::max(r.kl_max, d);
      top1.add(argmax(row, vocab) == argmax(ref_row, vocab) ? 1.0 : 0.0);
      ++r.scored;
    }
    if (reference == nullptr) r.scored += o.ctx - 1 - o.ctx / 2;
    if (progress) progress(static_cast<int32_t>(k + 1), static_cast<int32_t>(chunks));
  }
  r.perplexity = nll.perplexity();
  if (reference != nullptr) {
    r.reference_perplexity = ref_nll.perplexity();
    r.kl = kl.estimate();
    r.top1 = top1.estimate();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace hearth::quant
