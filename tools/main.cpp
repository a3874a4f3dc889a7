// hearth: the command-line entry point. `hearth <command> [flags]`.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/process.h"
#include "common/version.h"
#include "tools/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth <command> [flags]

commands:
  serve      run an instance (loader, engine, OpenAI HTTP frontend): hearth serve --model PATH
  generate   run a model in this process: hearth generate --model PATH --prompt TEXT
             (or on resident weights: hearth generate --attach INSTANCE --prompt TEXT)
  status     what the instances hold in shared memory: hearth status [--instance NAME]
  synth      write a synthetic model: hearth synth --preset 1b --type q4_0 --gguf FILE
  quantize   GPTQ / round-to-nearest of a model into GGUF: hearth quantize MODEL --out FILE.gguf
             --calibration TEXT
  eval       perplexity, and KL divergence against a reference: hearth eval MODEL --text FILE
             [--reference MODEL]
  bench      load an OpenAI-compatible server and report latency and throughput per load
             level: hearth bench --url http://127.0.0.1:8080/v1 --users 1,4,16,64
  clean      remove an instance's segments: hearth clean [--instance NAME]
  lora       LoRA adapters: hearth lora synth --model BASE --out DIR (a seeded one), hearth lora
             merge --model BASE --lora DIR --out FILE.gguf (the base with it merged)
  version    print the version (also --version)

Run `hearth <command> --help` for the flags of a command.
)";

}  // namespace

// When this process started: now, or the CLOCK_MONOTONIC time a benchmark recorded just
// before spawning it (HEARTH_SPAWNED_AT, seconds), so that reported times include exec.
double process_started_at() {
  const double now = hearth::monotonic_seconds();
  if (const char* env = std::getenv("HEARTH_SPAWNED_AT"); env != nullptr) {
    const double t = std::strtod(env, nullptr);
    if (t > now - 60.0 && t <= now) return t;
  }
  return now;
}

int main(int argc, char** argv) {
  const double started_at = process_started_at();
  if (const hearth::Status logging = hearth::log_init("hearth"); !logging.is_ok()) {
    std::fprintf(stderr, "hearth: %s\n", logging.message().c_str());
    return 2;
  }
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "generate") return hearth::cli::generate_command(args, started_at);
  if (command == "status") return hearth::cli::status_command(args);
  if (command == "synth") return hearth::cli::synth_command(args);
  if (command == "serve") return hearth::cli::serve_command(args);
  if (command == "clean") return hearth::cli::clean_command(args);
  if (command == "quantize") return hearth::cli::quantize_command(args);
  if (command == "eval") return hearth::cli::eval_command(args);
  if (command == "bench") return hearth::cli::bench_command(args);
  if (command == "lora") return hearth::cli::lora_command(args);
  if (command == "--version" || command == "version") {
    std::printf("%s\n", hearth::version_line("hearth").c_str());
    return 0;
  }
  if (command == "--help" || command == "help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "hearth: unknown command \"%s\"\n\n%s", command.c_str(), kUsage);
  return 2;
}
