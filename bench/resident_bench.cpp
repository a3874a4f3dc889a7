// Resident weights, side by side for the 1B synthetic model in F16, Q8_0 and Q4_0:
//   cold load    hearth-loader reading the GGUF and publishing the segment, page cache
//                dropped first when this user may (the warm figure is printed too)
//   attach       `hearth generate --attach`: process start (spawn) to ready to run
//   first token  the same process: spawn to its first generated token (3-token prompt)
//   in-process   `hearth generate --model FILE`: spawn to first token, no loader
// Usage: resident_bench [--models DIR] [--reps N] [--shm-dir DIR] [--threads N]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/process.h"
#include "common/subprocess.h"

namespace {

std::string bin(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f);
}

double field(const std::string& json, const char* key) {
  boost::system::error_code ec;
  const auto v = boost::json::parse(json, ec);
  if (ec || !v.is_object() || !v.as_object().contains(key)) return -1.0;
  return v.as_object().at(key).to_number<double>();
}

// Spawns a hearth command with HEARTH_SPAWNED_AT set to now, returns its JSON line.
std::string timed_run(const std::vector<std::string>& argv, hearth::Environment env) {
  env.push_back("HEARTH_SPAWNED_AT=" + std::to_string(hearth::monotonic_seconds()));
  const auto r = hearth::run_process(argv, env);
  if (r.exit_code != 0) std::fprintf(stderr, "%s failed: %s\n", argv[0].c_str(), r.err.c_str());
  return r.out;
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hearth::Args::parse({argv + 1, argv + argc}, {"models", "reps", "shm-dir", "threads"}, {});
  if (!args.is_ok()) {
    std::fprintf(stderr, "resident_bench: %s\n", args.status().message().c_str());
    return 2;
  }
  const std::filesystem::path models = args->get("models").value_or("/tmp/hearth-bench/models");
  const std::string shm = args->get("shm-dir").value_or("/dev/shm");
  const int reps = static_cast<int>(args->get_int("reps", 1, 100)->value_or(5));
  hearth::Environment env;
  if (auto t = args->get("threads")) env.push_back("HEARTH_THREADS=" + *t);
  std::filesystem::create_directories(models);
  const bool can_drop = ::access("/proc/sys/vm/drop_caches", W_OK) == 0;

  std::printf("# resident weights: 1B synthetic Llama (dim 2048, ffn 8192, 16 layers, 32/8 heads, vocab 32000)\n");
  std::printf("# shm %s, %s threads, medians of %d runs, page cache %s before the cold load\n", shm.c_str(),
              args->get("threads").value_or("all").c_str(), reps, can_drop ? "dropped" : "NOT dropped (not root)");
  std::printf("| weights | segment MiB | cold load s | warm load s | attach ms | first token ms | in-process first "
              "token ms | cold load / attach |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const char* type : {"f16", "q8_0", "q4_0"}) {
    const auto model = models / (std::string("1b-") + type + ".gguf");
    if (!std::filesystem::exists(model)) {
      hearth::run_process({bin("hearth"), "synth", "--preset", "1b", "--type", type, "--gguf", model.string()});
    }
    const std::string instance = std::string("bench-") + type;
    const auto segment = std::filesystem::path(shm) / ("hearth." + instance + ".weights");
    const std::vector<std::string> loader = {bin("hearth-loader"), "--model", model.string(), "--instance", instance,
                                             "--shm-dir", shm, "--exit-after-publish"};
    std::filesystem::remove(segment);
    double cold = -1.0;
    if (can_drop && drop_page_cache()) {
      cold = field(timed_run(loader, env), "seconds");
      std::filesystem::remove(segment);
    }
    const double warm = field(timed_run(loader, env), "seconds");
    if (cold < 0) cold = warm;
    std::vector<double> attach, first, inproc;
    for (int i = 0; i < reps; ++i) {
      const std::string out = timed_run({bin("hearth"), "generate", "--attach", instance, "--shm-dir", shm, "--prompt",
                                         "hello world", "--max-tokens", "1", "--ctx", "512", "--json"},
                                        env);
      attach.push_back(field(out, "ready_seconds") * 1e3);
      first.push_back(field(out, "first_token_seconds") * 1e3);
      inproc.push_back(field(timed_run({bin("hearth"), "generate", "--model", model.string(), "--prompt", "hello world",
                                        "--max-tokens", "1", "--ctx", "512", "--json"},
                                       env),
                             "first_token_seconds") *
                       1e3);
    }
    std::error_code ec;
    const double mib = static_cast<double>(std::filesystem::file_size(segment, ec)) / (1 << 20);
    std::printf("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.1f | %.0fx |\n", type, mib, cold, warm, median(attach),
                median(first), median(inproc), cold * 1e3 / median(attach));
    std::filesystem::remove(segment);
  }
  std::printf("\nattach: spawn of `hearth generate --attach` to ready to run (segment mapped and checked, tokenizer\n"
              "and model built, KV cache allocated); first token: spawn to the first generated token.\n");
  return 0;
}
