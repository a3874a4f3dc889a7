// `hearth lora`: LoRA adapters for a base model: a synthetic one (seeded factors, a PEFT
// directory), and the base with an adapter merged into its weights (a GGUF), the
// reference an adapted run is compared with.
#include <cstdio>
#include <string>

#include "common/args.h"
#include "common/process.h"
#include "loader/lora.h"
#include "loader/model.h"
#include "tools/commands.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth lora synth --model BASE --out DIR [--rank R] [--alpha A] [--rslora]
                         [--targets q,k,v,o,gate,up,down] [--seed S] [--strength X]
       hearth lora merge --model BASE --lora DIR --out FILE.gguf

synth   writes a PEFT adapter directory (adapter_config.json, adapter_model.safetensors)
        with seeded factors for every layer of BASE: rank R (default 8), lora_alpha A
        (default 2R), the listed matrices (default all seven), each changed by about X
        (default 0.5) times a base matrix's typical scale.
merge   writes BASE with the adapter at DIR merged into its weights (W + alpha/r * B A) as
        a GGUF of F32 matrices (llama, mistral and qwen2 bases).
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth lora: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

int fail(const Status& status) {
  std::fprintf(stderr, "hearth lora: %s\n", status.to_string().c_str());
  return 1;
}

Result<std::vector<LoraTarget>> parse_targets(const std::string& list) {
  std::vector<LoraTarget> targets;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = list.find(',', at);
    const std::string name = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    static constexpr std::pair<std::string_view, LoraTarget> kNames[] = {
        {"q", LoraTarget::kQ},       {"k", LoraTarget::kK},   {"v", LoraTarget::kV},      {"o", LoraTarget::kOutput},
        {"gate", LoraTarget::kGate}, {"up", LoraTarget::kUp}, {"down", LoraTarget::kDown}};
    bool found = false;
    for (const auto& [n, t] : kNames) {
      if (n == name) {
        targets.push_back(t);
        found = true;
      }
    }
    if (!found) {
      return make_error(ErrorCode::kInvalidArgument, "--targets: {:?} is not one of q, k, v, o, gate, up, down", name);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return targets;
}

}  // namespace

int lora_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "help") {
    std::fputs(kUsage, argv.empty() ? stderr : stdout);
    return argv.empty() ? 2 : 0;
  }
  const std::string sub = argv[0];
  if (sub != "synth" && sub != "merge") return usage_error(fmt::format("{:?} is not synth or merge", sub));
  auto args = Args::parse(std::vector<std::string>(argv.begin() + 1, argv.end()),
                          {"model", "out", "rank", "alpha", "targets", "seed", "strength", "lora"}, {"rslora", "help"});
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const auto model_path = args->get("model");
  const auto out = args->get("out");
  if (!model_path || !out) return usage_error("--model and --out are required");
  const double start = monotonic_seconds();
  auto base = model_open(*model_path);
  if (!base.is_ok()) return fail(base.status());
  if (sub == "synth") {
    if (args->has("lora")) return usage_error("--lora is for merge");
    LoraSynthOptions o;
    auto rank = args->get_int("rank", 1, 4096);
    if (!rank.is_ok()) return usage_error(rank.status().message());
    o.rank = static_cast<int32_t>(rank->value_or(8));
    auto alpha = args->get_double("alpha");
    if (!alpha.is_ok()) return usage_error(alpha.status().message());
    o.alpha = alpha->value_or(2.0 * o.rank);
    auto strength = args->get_double("strength");
    if (!strength.is_ok()) return usage_error(strength.status().message());
    o.strength = strength->value_or(0.5);
    if (!(o.alpha > 0.0) || !(o.strength > 0.0 && o.strength <= 10.0)) {
      return usage_error("--alpha must be positive and --strength in (0, 10]");
    }
    auto seed = args->get_int("seed", 0, INT64_MAX);
    if (!seed.is_ok()) return usage_error(seed.status().message());
    o.seed = static_cast<uint64_t>(seed->value_or(1));
    o.rslora = args->has("rslora");
    if (auto list = args->get("targets")) {
      auto targets = parse_targets(*list);
      if (!targets.is_ok()) return usage_error(targets.status().message());
      o.targets = *targets;
    }
    if (Status st = lora_synth_write(*base, o, *out); !st.is_ok()) return fail(st);
  } else {
    for (const char* flag : {"rank", "alpha", "targets", "seed", "strength", "rslora"}) {
      if (args->has(flag)) return usage_error(fmt::format("--{} is for synth", flag));
    }
    const auto dir = args->get("lora");
    if (!dir) return usage_error("--lora DIR is required");
    auto adapter = lora_open(*dir, base->config, base->tensors);
    if (!adapter.is_ok()) return fail(adapter.status());
    if (Status st = lora_merge_write(*base, *adapter, *out); !st.is_ok()) return fail(st);
  }
  std::fprintf(stderr, "hearth lora: wrote %s in %.1f s\n", out->c_str(), monotonic_seconds() - start);
  return 0;
}

}  // namespace hearth::cli
