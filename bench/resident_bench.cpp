// Resident weights, side by side for the 1B synthetic model in F16, Q8_0 and Q4_0:
//   cold load    hearth-loader reading the GGUF and publishing the segment, page cache
//                dropped first when this user may (the warm figure is printed too)
//   attach       `hearth generate --attach`: process start (spawn) to ready to run
//   first token  the same process: spawn to its first generated token (3-token prompt)
//   in-process   `hearth generate --model FILE`: spawn to first token, no loader
// With --device cuda (a GPU machine) the loader also keeps each weight type in a device
// slab (hearth-loader --device cuda) and the runs use --backend cuda:0:
//   slab copy    the loader's copy of the segment to its VMM slab (GB/s beside it)
//   attach       `hearth generate --attach --backend cuda:0`: spawn to ready, the slab
//                imported and the weights read in place
//   first token  spawn to the first generated token on the GPU
//   in-process   `hearth generate --model FILE --backend cuda:0` (its own copy)
// Usage: resident_bench [--models DIR] [--reps N] [--shm-dir DIR] [--threads N]
//                       [--device cuda] [--types f16,q8_0,q4_0]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "common/args.h"
#include "common/process.h"
#include "common/subprocess.h"
#include "kernels/cpu/isa.h"

namespace {

using hearth::bench::bin;

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

// The stages of `hearth generate --json`'s ready_split_ms, in the order they run.
const char* const kStages[] = {"start", "attach", "backend", "kv_cache", "model", "rest"};

// Each stage's time in ms from a generate JSON line (-1 where absent).
std::vector<double> split_of(const std::string& json) {
  std::vector<double> out(std::size(kStages), -1.0);
  boost::system::error_code ec;
  const auto v = boost::json::parse(json, ec);
  if (ec || !v.is_object() || !v.as_object().contains("ready_split_ms")) return out;
  const auto& split = v.as_object().at("ready_split_ms").as_object();
  for (size_t i = 0; i < std::size(kStages); ++i) {
    if (split.contains(kStages[i])) out[i] = split.at(kStages[i]).to_number<double>();
  }
  return out;
}

// Spawns a hearth command with HEARTH_SPAWNED_AT set to now, returns its JSON line.
std::string timed_run(const std::vector<std::string>& argv, hearth::Environment env) {
  env.push_back("HEARTH_SPAWNED_AT=" + std::to_string(hearth::monotonic_seconds()));
  const auto r = hearth::run_process(argv, env);
  if (r.exit_code != 0) std::fprintf(stderr, "%s failed: %s\n", argv[0].c_str(), r.err.c_str());
  return r.out;
}

// The GPU table: a resident loader with --device per weight type, engines-to-be
// attaching to its slab.
template <typename ModelOf>
int device_table(const std::string& device, const std::vector<std::string>& types, ModelOf&& model_of,
                 const std::string& shm, int reps, const hearth::Environment& env) {
  std::printf("# resident GPU weights: 1B synthetic Llama, hearth-loader --device %s, medians of %d runs\n",
              device.c_str(), reps);
  std::printf("| weights | slab MiB | slab copy s | copy GB/s | attach ms | first token ms | in-process first token "
              "ms |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string& type : types) {
    const auto model = model_of(type);
    const std::string instance = "gpubench-" + type;
    hearth::ChildProcess loader({bin("hearth-loader"), "--model", model.string(), "--instance", instance, "--shm-dir",
                                 shm, "--device", device, "--remove-on-exit"},
                                env);
    const auto line = loader.read_line(std::chrono::seconds(600));
    if (!line) {
      std::fprintf(stderr, "hearth-loader --device %s did not become ready: %s\n", device.c_str(), loader.err().c_str());
      return 1;
    }
    boost::system::error_code ec;
    const auto ready = boost::json::parse(*line, ec);
    double copy_s = -1, bytes = 0;
    if (!ec && ready.is_object() && ready.as_object().contains("device_slabs")) {
      const auto& slab = ready.at("device_slabs").at(0).as_object();
      copy_s = slab.at("seconds").to_number<double>();
      bytes = slab.at("bytes").to_number<double>();
    }
    std::vector<double> attach, first, inproc;
    for (int i = 0; i < reps; ++i) {
      const std::string out = timed_run({bin("hearth"), "generate", "--attach", instance, "--shm-dir", shm, "--backend",
                                         "cuda:0", "--prompt", "hello world", "--max-tokens", "1", "--ctx", "512",
                                         "--json"},
                                        env);
      attach.push_back(field(out, "ready_seconds") * 1e3);
      first.push_back(field(out, "first_token_seconds") * 1e3);
      inproc.push_back(field(timed_run({bin("hearth"), "generate", "--model", model.string(), "--backend", "cuda:0",
                                        "--prompt", "hello world", "--max-tokens", "1", "--ctx", "512", "--json"},
                                       env),
                             "first_token_seconds") *
                       1e3);
    }
    loader.signal(SIGTERM);
    loader.wait(std::chrono::seconds(30));
    std::printf("| %s | %.0f | %.3f | %.1f | %.1f | %.1f | %.1f |\n", type.c_str(), bytes / (1 << 20), copy_s,
                copy_s > 0 ? bytes / 1e9 / copy_s : 0.0, median(attach), median(first), median(inproc));
  }
  std::printf("\nattach: spawn of `hearth generate --attach --backend cuda:0` to ready to run (segment mapped, the\n"
              "loader's slab imported, model built on it, KV cache allocated); first token: spawn to the first token.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hearth::Args::parse({argv + 1, argv + argc}, {"models", "reps", "shm-dir", "threads", "device", "types"}, {});
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
  std::vector<std::string> types;
  for (std::string_view list = args->get("types").value_or("f16,q8_0,q4_0"); !list.empty();) {
    const size_t comma = list.find(',');
    types.emplace_back(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  auto model_of = [&](const std::string& type) {
    const auto model = models / ("1b-" + type + ".gguf");
    if (!std::filesystem::exists(model)) {
      hearth::run_process({bin("hearth"), "synth", "--preset", "1b", "--type", type, "--gguf", model.string()});
    }
    return model;
  };
  if (auto device = args->get("device")) return device_table(*device, types, model_of, shm, reps, env);

  std::printf("# cpu: %s\n", hearth::kernels::cpu::cpu_host_summary().c_str());
  std::printf("# resident weights: 1B synthetic Llama (dim 2048, ffn 8192, 16 layers, 32/8 heads, vocab 32000)\n");
  std::printf("# shm %s, %s threads, medians of %d runs, page cache %s before the cold load\n", shm.c_str(),
              args->get("threads").value_or("all").c_str(), reps, can_drop ? "dropped" : "NOT dropped (not root)");
  std::printf("| weights | segment MiB | cold load s | warm load s | attach ms | first token ms | in-process first "
              "token ms | cold load / attach |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<std::string> split_rows;
  for (const std::string& type : types) {
    const auto model = model_of(type);
    const std::string instance = "bench-" + type;
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
    std::vector<std::vector<double>> stages(std::size(kStages));
    for (int i = 0; i < reps; ++i) {
      const std::string out = timed_run({bin("hearth"), "generate", "--attach", instance, "--shm-dir", shm, "--prompt",
                                         "hello world", "--max-tokens", "1", "--ctx", "512", "--json"},
                                        env);
      attach.push_back(field(out, "ready_seconds") * 1e3);
      const std::vector<double> split = split_of(out);
      for (size_t s = 0; s < split.size(); ++s) stages[s].push_back(split[s]);
      first.push_back(field(out, "first_token_seconds") * 1e3);
      inproc.push_back(field(timed_run({bin("hearth"), "generate", "--model", model.string(), "--prompt", "hello world",
                                        "--max-tokens", "1", "--ctx", "512", "--json"},
                                       env),
                             "first_token_seconds") *
                       1e3);
    }
    std::error_code ec;
    const double mib = static_cast<double>(std::filesystem::file_size(segment, ec)) / (1 << 20);
    std::printf("| %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.1f | %.0fx |\n", type.c_str(), mib, cold, warm, median(attach),
                median(first), median(inproc), cold * 1e3 / median(attach));
    split_rows.push_back(type);
    for (const auto& s : stages) split_rows.back() += fmt::format(" | {:.1f}", median(s));
    std::filesystem::remove(segment);
  }
  std::printf("\nattach: spawn of `hearth generate --attach` to ready to run (segment mapped and checked, tokenizer\n"
              "and model built, KV cache allocated); first token: spawn to the first generated token.\n");
  // Where attach's time goes, medians per stage: start (spawn to the command's first line:
  // exec, the dynamic loader, static constructors, logging), attach (the segment mapped
  // and checked, the tokenizer built), backend, KV cache, model, the rest.
  std::printf("\n| weights | attach split ms: start | attach | backend | kv_cache | model | rest |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string& r : split_rows) std::printf("| %s |\n", r.c_str());
  return 0;
}
