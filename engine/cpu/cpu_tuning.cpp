#include "engine/cpu/cpu_tuning.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/log.h"
#include "kernels/cpu/isa.h"

namespace hearth {
namespace {

// The cache's lines other than `key`'s, and key's value when it names a candidate.
std::pair<std::vector<std::string>, int> read_cache(const std::filesystem::path& file, const std::string& key) {
  std::vector<std::string> others;
  int found = -1;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos) continue;  // not ours: dropped on the next write
    if (line.compare(0, tab, key) != 0 || tab != key.size()) {
      others.push_back(line);
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(line.c_str() + tab + 1, &end, 10);
    if (*end == '\0' && std::find(kPrefetchCandidates.begin(), kPrefetchCandidates.end(), v) !=
                            kPrefetchCandidates.end()) {
      found = static_cast<int>(v);
    }
  }
  return {others, found};
}

void write_cache(const std::filesystem::path& file, const std::string& key, int bytes) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  std::vector<std::string> lines = read_cache(file, key).first;
  lines.push_back(key + "\t" + std::to_string(bytes));
  const std::filesystem::path tmp = file.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& l : lines) out << l << '\n';
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      HEARTH_LOG_DEBUG("cannot write the CPU tuning cache {}", file.string());
      return;
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    HEARTH_LOG_DEBUG("cannot write the CPU tuning cache {}", file.string());
  }
}

}  // namespace

std::string PrefetchTuning::describe(double pass_bytes) const {
  std::ostringstream s;
  s << "weight prefetch " << bytes << " bytes (" << source;
  if (!seconds.empty()) {
    s << " in " << static_cast<int>(elapsed_ms + 0.5) << " ms:";
    for (const auto& [candidate, secs] : seconds) {
      s << ' ' << candidate << '=';
      if (pass_bytes > 0 && secs > 0) {
        s << static_cast<int>(pass_bytes / secs / 1e8 + 0.5) / 10.0 << " GB/s";
      } else {
        s << secs * 1e3 << " ms";
      }
    }
  }
  s << ')';
  return s.str();
}

PrefetchTuning tune_weight_prefetch(const PrefetchTuningOptions& o, const std::function<double(int)>& pass) {
  PrefetchTuning t;
  const auto start = std::chrono::steady_clock::now();
  const int env = kernels::cpu::weight_prefetch_from_env();
  if (env >= 0) {
    t.source = "HEARTH_CPU_PREFETCH";
    kernels::cpu::set_weight_prefetch_bytes(env);
    t.bytes = kernels::cpu::weight_prefetch_bytes();
    return t;
  }
  if (!o.cache_file.empty()) {
    const int cached = read_cache(o.cache_file, o.key).second;
    if (cached >= 0) {
      kernels::cpu::set_weight_prefetch_bytes(cached);
      t.bytes = cached;
      t.source = "cached in " + o.cache_file.string();
      t.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return t;
    }
  }
  std::vector<double> best(kPrefetchCandidates.size(), 1e300);
  for (int round = 0; round < std::max(1, o.rounds); ++round) {
    for (size_t i = 0; i < kPrefetchCandidates.size(); ++i) {
      kernels::cpu::set_weight_prefetch_bytes(kPrefetchCandidates[i]);
      best[i] = std::min(best[i], pass(kPrefetchCandidates[i]));
    }
  }
  size_t choice = 0;
  for (size_t i = 0; i < kPrefetchCandidates.size(); ++i) {
    if (kPrefetchCandidates[i] == 0) choice = i;
  }
  const double none_seconds = best[choice];
  for (size_t i = 0; i < kPrefetchCandidates.size(); ++i) {
    if (best[i] < none_seconds * 0.97 && best[i] < best[choice]) choice = i;
  }
  for (size_t i = 0; i < kPrefetchCandidates.size(); ++i) t.seconds.emplace_back(kPrefetchCandidates[i], best[i]);
  t.bytes = kPrefetchCandidates[choice];
  t.source = "measured";
  kernels::cpu::set_weight_prefetch_bytes(t.bytes);
  if (!o.cache_file.empty()) write_cache(o.cache_file, o.key, t.bytes);
  t.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return t;
}

std::vector<std::vector<const TensorView*>> prefetch_tuning_windows(std::span<const TensorView> tensors,
                                                                    uint64_t window_bytes, size_t max_windows) {
  std::map<int, std::vector<const TensorView*>> layers;
  for (const TensorView& t : tensors) {
    int layer = -1;
    if (t.n_dims == 2 && std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1 && layer >= 0) {
      layers[layer].push_back(&t);
    }
  }
  std::vector<std::vector<const TensorView*>> windows;
  if (layers.empty()) return windows;
  // The first layer decides how many of each layer's matrices a window takes and how
  // many layers it spans.
  const std::vector<const TensorView*>& first = layers.begin()->second;
  size_t take = 0;
  uint64_t layer_bytes = 0;
  while (take < first.size() && layer_bytes < window_bytes) layer_bytes += first[take++]->bytes;
  if (layer_bytes == 0) return windows;
  const uint64_t per_window = (window_bytes + layer_bytes - 1) / layer_bytes;
  std::vector<const TensorView*> window;
  uint64_t layers_in = 0;
  for (const auto& [index, matrices] : layers) {
    if (windows.size() == max_windows || matrices.size() < take) break;
    window.insert(window.end(), matrices.begin(), matrices.begin() + static_cast<std::ptrdiff_t>(take));
    if (++layers_in == per_window) {
      windows.push_back(std::move(window));
      window.clear();
      layers_in = 0;
    }
  }
  return windows;
}

Status prefetch_env_check() {
  const char* env = std::getenv("HEARTH_CPU_PREFETCH");
  if (env == nullptr || *env == '\0' || kernels::cpu::weight_prefetch_from_env() >= 0) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument,
                    "HEARTH_CPU_PREFETCH={} is not a byte count from 0 to 65536 (0 turns software prefetch off)", env);
}

std::filesystem::path default_tuning_cache_file() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  std::filesystem::path dir;
  if (!env("HEARTH_CACHE_DIR").empty()) {
    dir = env("HEARTH_CACHE_DIR");
  } else if (!env("CACHE_DIRECTORY").empty()) {
    // systemd's CacheDirectory=; several are separated by colons: the first.
    const std::string all = env("CACHE_DIRECTORY");
    dir = all.substr(0, all.find(':'));
  } else if (!env("XDG_CACHE_HOME").empty()) {
    dir = std::filesystem::path(env("XDG_CACHE_HOME")) / "hearth";
  } else if (!env("HOME").empty()) {
    dir = std::filesystem::path(env("HOME")) / ".cache" / "hearth";
  } else {
    return {};
  }
  return dir / "cpu-tuning";
}

}  // namespace hearth
