// hearth-loader: reads a model once, publishes it as the instance's weights segment and
// stays resident so that engines attach in milliseconds. A restarted loader adopts a
// valid segment of the same model without reading the model again.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/process.h"
#include "common/program.h"
#include "loader/device_slabs.h"
#include "loader/lora_resident.h"
#include "loader/resident.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth-loader --model PATH [options]
       hearth-loader --load-lora NAME=PATH [--instance NAME] [--shm-dir DIR]

Publishes the model as the shared-memory segment hearth.<instance>.weights and stays
resident. Prints one JSON line to stdout when the segment is ready.

  --model PATH        GGUF file, Hugging Face directory or llama2.c checkpoint
  --tokenizer PATH    tokenizer for containers that keep it apart
  --instance NAME     instance name (default "default")
  --shm-dir DIR       shared-memory directory (default $HEARTH_SHM_DIR or /dev/shm)
  --quant int8|int4   quantize the weight matrices (group-wise, 32 values per scale)
  --tp N              split for N tensor-parallel ranks (default 1)
  --layout cpu-r16|plain  tensor layout: cpu-r16 (default) row-interleaves quantized
                      matrices for the CPU kernels; plain keeps them as quantized
  --draft-model PATH  also publish a draft model for speculative decoding (hearth-engine
                      --spec draft) as hearth.<instance>.draft-weights: a smaller model of
                      the same tokenizer, unsplit (rank 0 drafts), quantized and laid out
                      as the target; its tokenizer must be the target's
  --lora NAME=PATH    also keep this LoRA adapter (a PEFT directory or GGUF LoRA file,
                      checked against the model) resident in hearth.<instance>.lora, where
                      requests select it by naming NAME as their model (repeatable); an
                      adapter of that name a previous loader kept stays as it is
  --max-loras N       adapter slots of hearth.<instance>.lora (1..64, default 4 with --lora):
                      adapters resident at once, loaded at start or at run time
  --max-lora-rank R   the largest adapter rank a slot holds (default 16)
  --load-lora NAME=PATH  load one adapter into the running instance's adapter segment
                      (checked against its weights segment) and exit, printing one JSON
                      line: {"event":"lora_loaded",...} or {"event":"error","code":...}; how
                      hearth-frontend serves POST /v1/load_lora_adapter
  --device cuda|cuda:N[,N...]  also keep each rank's weights in device memory, one slab per
                      GPU (rank r on device r, or on the listed devices), served to engine
                      ranks at hearth.<instance>.slabs.sock and kept by systemd or hearth
                      serve so that a restarted loader adopts them; implies --layout plain
  --device-sharing auto|vmm|cuda-ipc  how slabs are shared: the CUDA VMM API with fds
                      (survives the loader), legacy CUDA IPC (dies with it), or auto
  --hugepages         fail unless the weights are on 2 MiB pages (they go there by
                      default where the kernel allows) and start each rank's data on
                      a 2 MiB boundary
  --remove-on-exit    remove the segment when stopped (default: leave it resident)
  --exit-after-publish  publish (or adopt), print the ready line and exit
  --log-level LEVEL   trace, debug, info, warn, error or off (default info; $HEARTH_LOG_LEVEL)
  --log-format FMT    text or json, one object per line (default text; $HEARTH_LOG_FORMAT)
  --version           print the version and exit
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth-loader: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

// --load-lora NAME=PATH: one adapter into the instance's adapter segment, the outcome as
// one JSON line on stdout.
int load_lora(const std::string& flag, const std::string& instance, std::filesystem::path dir) {
  using namespace hearth;
  auto loaded = [&]() -> Result<LoraSlotInfo> {
    const size_t eq = flag.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
      return make_error(ErrorCode::kInvalidArgument, "--load-lora {}: expected NAME=PATH", flag);
    }
    if (dir.empty()) dir = shm_dir_default();
    HEARTH_ASSIGN_OR_RETURN(AttachedWeights base, weights_attach(segment_path(dir, instance, "weights")));
    HEARTH_ASSIGN_OR_RETURN(LoraSegment segment, LoraSegment::attach(segment_path(dir, instance, "lora"), true));
    return lora_segment_load(segment, base, flag.substr(0, eq), flag.substr(eq + 1));
  }();
  boost::json::object out;
  if (!loaded.is_ok()) {
    out = {{"event", "error"},
           {"code", error_code_name(loaded.status().code())},
           {"message", loaded.status().message()}};
  } else {
    out = {{"event", "lora_loaded"}, {"name", loaded->name},         {"slot", loaded->slot},
           {"id", loaded->id},       {"max_rank", loaded->max_rank}, {"matrices", loaded->n_matrices},
           {"source", loaded->source}};
  }
  std::printf("%s\n", boost::json::serialize(out).c_str());
  return loaded.is_ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  daemon_block_signals();
  const Status logging = log_init("loader");
  auto args = Args::parse({argv + 1, argv + argc},
                          with_program_flags({"model", "tokenizer", "instance", "shm-dir", "quant", "tp", "layout",
                                              "device", "device-sharing", "draft-model", "lora", "load-lora", "max-loras",
                                              "max-lora-rank"},
                                             kProgramValueFlags),
                          with_program_flags({"hugepages", "remove-on-exit", "exit-after-publish", "help"},
                                             kProgramBoolFlags));
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (auto exit = handle_program_flags(*args, "hearth-loader", logging)) return *exit;
  if (auto flag = args->get("load-lora")) {
    // A path that never answers (a FIFO, a hung mount) must not hold the frontend's
    // request forever: two minutes, then SIGALRM ends this process.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_UNBLOCK, &all, nullptr);
    ::alarm(120);
    return load_lora(*flag, args->get("instance").value_or("default"), args->get("shm-dir").value_or(""));
  }
  ResidentOptions o;
  if (!args->get("model")) return usage_error("--model is required");
  o.model = *args->get("model");
  o.tokenizer = args->get("tokenizer").value_or("");
  o.instance = args->get("instance").value_or("default");
  o.shm_dir = args->get("shm-dir").value_or("");
  o.hugepages = args->has("hugepages");
  if (auto layout = args->get("layout")) {
    if (Status st = layout_check_name(*layout); !st.is_ok()) return usage_error(st.message());
    o.layout = *layout;
  }
  if (auto q = args->get("quant")) {
    auto quant = quant_from_name(*q);
    if (!quant.is_ok()) return usage_error(quant.status().message());
    o.quant = *quant;
  }
  auto tp = args->get_int("tp", 1, 16);
  if (!tp.is_ok()) return usage_error(tp.status().message());
  o.tp = static_cast<int>(tp->value_or(1));
  std::optional<DeviceSlabOptions> device;
  if (auto name = args->get("device")) {
    auto devices = device_list_from_name(*name, o.tp);
    if (!devices.is_ok()) return usage_error(devices.status().message());
    device.emplace();
    device->devices = *devices;
    device->instance = o.instance;
    device->shm_dir = o.shm_dir.empty() ? shm_dir_default() : o.shm_dir;
    if (auto sharing = args->get("device-sharing")) {
      auto s = device_sharing_from_name(*sharing);
      if (!s.is_ok()) return usage_error(s.status().message());
      device->sharing = *s;
    }
    if (args->get("layout") && o.layout != kLayoutPlain) {
      return usage_error("--device keeps the weights for the GPU kernels, which read --layout plain");
    }
    o.layout = kLayoutPlain;
  } else if (args->get("device-sharing")) {
    return usage_error("--device-sharing needs --device");
  }

  if (device) {
    if (Status st = device_slabs_check(*device); !st.is_ok()) {
      std::fprintf(stderr, "hearth-loader: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  auto published = resident_publish(o);
  if (!published.is_ok()) {
    std::fprintf(stderr, "hearth-loader: %s\n", published.status().to_string().c_str());
    return 1;
  }
  ResidentSegment& r = published.value();
  std::optional<ResidentSegment> draft;
  if (auto path = args->get("draft-model")) {
    ResidentOptions d = o;
    d.model = *path;
    d.tokenizer.clear();
    d.tp = 1;
    d.segment = "draft-weights";
    auto made = resident_publish(d);
    Status st = made.is_ok() ? draft_segment_check(r, *made) : made.status();
    if (made.is_ok() && !st.is_ok()) {  // a draft nothing can use does not stay
      std::error_code ec;
      std::filesystem::remove(made->segment.path(), ec);
    }
    if (!st.is_ok()) {
      std::fprintf(stderr, "hearth-loader: the draft model %s: %s\n", path->c_str(), st.to_string().c_str());
      return 1;
    }
    draft.emplace(std::move(made).value());
    HEARTH_LOG_INFO("{} the draft model as {} ({})", draft->adopted ? "adopted" : "published",
                    draft->segment.path().string(), human_bytes(draft->segment.size()));
  } else {
    // A draft model an earlier loader of the instance kept goes with this one's target:
    // an engine must not draft with one nobody checked against it.
    const auto stale = segment_path(o.shm_dir.empty() ? shm_dir_default() : o.shm_dir, o.instance, "draft-weights");
    std::error_code ec;
    if (std::filesystem::remove(stale, ec)) HEARTH_LOG_INFO("removed {}: this loader keeps no draft model", stale.string());
  }
  // Resident LoRA adapters: the segment, adopted with what it holds where it fits, and
  // the adapters named on the command line that it does not hold yet.
  std::optional<OpenedLoraSegment> lora;
  const auto lora_path = segment_path(o.shm_dir.empty() ? shm_dir_default() : o.shm_dir, o.instance, "lora");
  const std::vector<std::string> lora_flags = args->get_all("lora");
  if (!lora_flags.empty() || args->get("max-loras") || args->get("max-lora-rank")) {
    auto max_loras = args->get_int("max-loras", 1, kMaxLoraSlots);
    if (!max_loras.is_ok()) return usage_error(max_loras.status().message());
    auto max_rank = args->get_int("max-lora-rank", 1, 1024);
    if (!max_rank.is_ok()) return usage_error(max_rank.status().message());
    const auto wanted = static_cast<uint32_t>(max_loras->value_or(std::max<int64_t>(4, static_cast<int64_t>(lora_flags.size()))));
    if (lora_flags.size() > wanted) {
      return usage_error(fmt::format("{} --lora adapters do not fit --max-loras {}", lora_flags.size(), wanted));
    }
    auto base = weights_attach(r.segment.path());
    auto opened = base.is_ok() ? lora_segment_open(*base, {.path = lora_path,
                                                          .max_loras = wanted,
                                                          .max_rank = static_cast<int32_t>(max_rank->value_or(16))})
                               : Result<OpenedLoraSegment>(base.status());
    if (!opened.is_ok()) {
      std::fprintf(stderr, "hearth-loader: the adapter segment: %s\n", opened.status().to_string().c_str());
      return 1;
    }
    lora.emplace(std::move(opened).value());
    if (!lora->why_new.empty()) HEARTH_LOG_INFO("replaced {}: {}", lora_path.string(), lora->why_new);
    for (const std::string& flag : lora_flags) {
      const size_t eq = flag.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
        return usage_error(fmt::format("--lora {}: expected NAME=PATH", flag));
      }
      const std::string name = flag.substr(0, eq);
      const std::filesystem::path path = flag.substr(eq + 1);
      std::optional<LoraSlotInfo> held;  // READY, or UNLOADING (an unload waiting for an engine)
      for (const LoraSlotInfo& a : lora->segment.list()) {
        if (a.name == name) held = a;
      }
      if (held) {
        std::error_code ec;
        const auto wanted = std::filesystem::absolute(path, ec);
        if (held->source != (ec ? path : wanted).string()) {
          HEARTH_LOG_WARN("adapter {} stays resident as it was loaded, from {}, not from {}: unload it "
                          "(POST /v1/unload_lora_adapter) and load the other under that name to replace it",
                          name, held->source, path.string());
        } else {
          HEARTH_LOG_INFO("adapter {} stays resident{} (from {}, {} matrices of rank up to {})", name,
                          held->unloading ? ", being unloaded" : "", held->source, held->n_matrices, held->max_rank);
        }
        continue;
      }
      if (name == o.instance || name == base->model_name) {
        return usage_error(fmt::format("--lora {}: \"{}\" is the {}'s name, which requests use for the base model",
                                       flag, name, name == o.instance ? "instance" : "model"));
      }
      auto loaded = lora_segment_load(lora->segment, *base, name, path);
      if (!loaded.is_ok() && lora->adopted) {
        // The adopted segment holds what was loaded and unloaded at run time since: a
        // restart must not fail on it (the slots may be taken, the path gone).
        HEARTH_LOG_WARN("--lora {}: not loaded ({}); the adopted {} keeps its {} adapter(s)", flag,
                        loaded.status().to_string(), lora_path.string(), lora->segment.list().size());
        continue;
      }
      if (!loaded.is_ok()) {
        std::fprintf(stderr, "hearth-loader: --lora %s: %s\n", flag.c_str(), loaded.status().to_string().c_str());
        return 1;
      }
      HEARTH_LOG_INFO("adapter {} resident in slot {}: {} matrices of rank up to {}", name, loaded->slot,
                      loaded->n_matrices, loaded->max_rank);
    }
    HEARTH_LOG_INFO("{} {}: {} adapter slots of rank up to {} ({})", lora->adopted ? "adopted" : "created",
                    lora_path.string(), lora->segment.n_slots(), lora->segment.max_rank(),
                    human_bytes(lora->segment.size()));
  } else {
    // Adapters an earlier loader kept go with it, unless engines or frontends use them.
    std::vector<int> users = processes_mapping(lora_path);
    std::error_code ec;
    if (!users.empty()) {
      HEARTH_LOG_WARN("kept {}: processes {} use its adapters (it goes once they stop and a loader without --lora "
                      "or --max-loras starts, or with hearth clean)", lora_path.string(), fmt::join(users, ", "));
    } else if (std::filesystem::remove(lora_path, ec)) {
      HEARTH_LOG_INFO("removed {}: this loader keeps no adapters", lora_path.string());
    }
  }
  std::unique_ptr<DeviceSlabs> slabs;
  if (device) {
    auto made = device_slabs_publish(r, *device);
    if (!made.is_ok()) {
      std::fprintf(stderr, "hearth-loader: %s\n", made.status().to_string().c_str());
      return 1;
    }
    slabs = std::move(*made);
  }
  boost::json::object ready;
  ready["event"] = "ready";
  ready["segment"] = r.segment.path().string();
  ready["adopted"] = r.adopted;
  ready["seconds"] = r.seconds;
  ready["bytes"] = r.segment.size();
  ready["fingerprint"] = r.fingerprint.hex();
  if (slabs) ready["device_slabs"] = slabs->describe();
  if (draft) ready["draft_segment"] = draft->segment.path().string();
  if (lora) ready["lora_segment"] = lora->segment.path().string();
  const std::string status = fmt::format("{} {} ({})", r.adopted ? "adopted" : "published", r.segment.path().string(),
                                         human_bytes(r.segment.size()));
  HEARTH_LOG_INFO("{}; resident", status);
  std::printf("%s\n", boost::json::serialize(ready).c_str());
  std::fflush(stdout);
  daemon_notify_ready(status);
  if (args->has("exit-after-publish")) return 0;

  std::vector<const ResidentSegment*> kept = {&r};  // the segments this loader keeps
  if (draft) kept.push_back(&*draft);

  const auto interval = daemon_watchdog_interval(std::chrono::milliseconds(2000));
  while (true) {
    const int sig = daemon_wait_signal(interval);
    daemon_notify_watchdog();
    if (sig == SIGTERM || sig == SIGINT) break;
    if (sig == SIGHUP) HEARTH_LOG_INFO("SIGHUP ignored: the loader has nothing to reload");
    for (const ResidentSegment* segment : kept) {
      struct stat st {};
      if (::stat(segment->segment.path().c_str(), &st) != 0) {
        HEARTH_LOG_ERROR("segment {} was removed; exiting so that a new loader publishes it again",
                         segment->segment.path().string());
        return 1;
      }
    }
    if (lora && !std::filesystem::exists(lora->segment.path())) {
      HEARTH_LOG_ERROR("segment {} was removed; exiting so that a new loader creates it again", lora->segment.path().string());
      return 1;
    }
  }
  daemon_notify_stopping();
  if (args->has("remove-on-exit")) {
    for (const ResidentSegment* segment : kept) {
      std::error_code ec;
      std::filesystem::remove(segment->segment.path(), ec);
      HEARTH_LOG_INFO("removed {}", segment->segment.path().string());
    }
    if (lora) {
      std::error_code ec;
      std::filesystem::remove(lora->segment.path(), ec);
    }
  } else {
    HEARTH_LOG_INFO("stopping; {} stays resident", r.segment.path().string());
  }
  return 0;
}
