// The cost of constrained decoding per token, on real vocabularies: how long the matcher
// takes to find the tokens a JSON schema allows next (cold: the state's first visit; warm:
// a cached state) and to advance by the token sampled, along outputs sampled at random
// among the allowed tokens. Prints one row per vocabulary and schema.
//
//   build/bin/grammar_bench [--steps N] [--seed S]
//
// Vocabularies come from ../shared (Llama 2's SentencePiece 32000, Llama 3's byte-level
// BPE 128256); a missing one is skipped with a note.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/args.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "kernels/cpu/isa.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace hearth;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

const char* kSchemas[][2] = {
    {"object", R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0,
       "maximum": 150}, "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type":
       "string"}, "maxItems": 5}, "address": {"type": "object", "properties": {"street": {"type": "string"}, "city":
       {"type": "string"}}, "required": ["street", "city"]}}, "required": ["name", "age", "tags", "address"]})"},
    {"any-json", R"({})"},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  auto args = Args::parse(argv_s, {"steps", "seed"}, {});
  if (!args.is_ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", args.status().message().c_str());
    return 2;
  }
  const int steps = std::stoi(args->get("steps").value_or("400"));
  const uint64_t seed = std::stoull(args->get("seed").value_or("1"));
  const std::string shared = std::getenv("HEARTH_SHARED") ? std::getenv("HEARTH_SHARED") : "../shared";
  struct Vocab {
    const char* name;
    std::string path;
  };
  const Vocab vocabs[] = {{"llama2 (spm 32000)", shared + "/models/llama2-tokenizer/tokenizer.model"},
                          {"llama3 (bpe 128256)", shared + "/tokenizers/llama3/meta-llama-3-8b.tokenizer.json"}};
  std::printf("# cpu: %s\n", hearth::kernels::cpu::cpu_host_summary().c_str());
  std::printf("%-20s %-9s %8s %7s %10s %10s %10s %10s %10s\n", "vocabulary", "schema", "build ms", "steps",
              "mask p50", "mask p99", "cold mean", "warm mean", "accept");
  for (const Vocab& v : vocabs) {
    auto source = tokenizer_source_from_path(v.path);
    if (!source.is_ok()) {
      std::printf("%-20s skipped: %s\n", v.name, source.status().message().c_str());
      continue;
    }
    auto tok = tokenizer_load(*source);
    if (!tok.is_ok()) {
      std::printf("%-20s skipped: %s\n", v.name, tok.status().message().c_str());
      continue;
    }
    const auto t0 = Clock::now();
    std::vector<std::string> bytes;
    for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) bytes.emplace_back((*tok)->token_bytes(id));
    auto vocab = std::make_shared<const grammar::Vocabulary>(grammar::Vocabulary::build(std::move(bytes)).value());
    const double build_ms = us_since(t0) / 1000.0;
    for (const auto& [schema_name, schema_text] : kSchemas) {
      auto gbnf = grammar::json_schema_to_gbnf(boost::json::parse(schema_text));
      auto g = grammar::CompiledGrammar::create(grammar::Grammar::parse(*gbnf).value(), vocab).value();
      std::mt19937_64 rng(seed);
      std::vector<double> mask_us, cold_us, warm_us, accept_us;
      grammar::TokenMask mask;
      std::vector<int32_t> allowed;
      int produced = 0;
      while (produced < steps) {
        grammar::GrammarMatcher m(g, {(*tok)->eos_id()});
        for (int i = 0; i < 200 && produced < steps; ++i, ++produced) {
          const uint64_t misses = g->cache_misses();
          auto t = Clock::now();
          if (!m.fill_mask(mask, 200 - i).is_ok()) return 1;
          const double us = us_since(t);
          mask_us.push_back(us);
          (g->cache_misses() > misses ? cold_us : warm_us).push_back(us);
          allowed.clear();
          for (int32_t id = 0; id < vocab->size(); ++id) {
            if (mask.test(id)) allowed.push_back(id);
          }
          const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
          t = Clock::now();
          if (!m.accept(pick).is_ok()) return 1;
          accept_us.push_back(us_since(t));
          if (m.terminated()) break;
        }
      }
      auto mean = [](const std::vector<double>& x) {
        double s = 0;
        for (double y : x) s += y;
        return x.empty() ? 0.0 : s / static_cast<double>(x.size());
      };
      std::printf("%-20s %-9s %8.1f %7d %8.0fus %8.0fus %8.0fus %8.0fus %8.1fus\n", v.name, schema_name, build_ms,
                  produced, percentile(mask_us, 0.5), percentile(mask_us, 0.99), mean(cold_us), mean(warm_us),
                  mean(accept_us));
    }
  }
  return 0;
}
