// `hearth status`: what lives in shared memory for each instance, read from the segments
// themselves and from /proc (who created them, who holds them, who has them mapped).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <string>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/cpu_set.h"
#include "common/process.h"
#include "common/version.h"
#include "ipc/broker.h"
#include "ipc/lora_segment.h"
#include "ipc/segment.h"
#include "ipc/slab_channel.h"
#include "ipc/tp_segment.h"
#include "ipc/weights_segment.h"
#include "tools/commands.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth status [--instance NAME] [--shm-dir DIR] [--json]

Lists the shared-memory segments of one instance (or of all instances): model, format,
size, state, fingerprint, the loader that created and the one that holds each segment
(running or not), and the processes that have it mapped.
)";

std::string local_time(uint64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

boost::json::object describe_broker(const std::filesystem::path& path, boost::json::object o) {
  auto broker = Broker::attach(path);
  if (!broker.is_ok()) {
    o["error"] = broker.status().to_string();
    return o;
  }
  const BrokerHeader& h = broker->header();
  const uint64_t now = monotonic_ns();
  const uint64_t beat = h.engine_heartbeat_ns.load();
  o["engine_epoch"] = h.engine_epoch.load();
  o["engine_pid"] = h.engine_pid.load();
  o["engine_alive"] = broker->engine_alive(std::chrono::milliseconds(3000));
  o["engine_heartbeat_ms_ago"] = beat == 0 || beat > now ? -1 : static_cast<int64_t>((now - beat) / 1000000);
  o["running"] = h.stat_running.load();
  o["waiting"] = h.stat_waiting.load();
  o["kv_blocks_used"] = h.stat_kv_blocks_used.load();
  o["kv_blocks_total"] = h.stat_kv_blocks_total.load();
  o["slots"] = broker->n_slots();
  boost::json::object states;
  for (uint32_t i = 0; i < broker->n_slots(); ++i) {
    const std::string name(slot_state_name(broker->slot(i).state.load()));
    states[name] = states.contains(name) ? states[name].to_number<int64_t>() + 1 : 1;
  }
  o["slot_states"] = std::move(states);
  boost::json::array frontends;
  for (const FrontendEntry& f : h.frontends) {
    const int32_t pid = f.pid.load();
    if (pid == 0) continue;
    const uint64_t fb = f.heartbeat_ns.load();
    frontends.push_back(boost::json::object{{"pid", pid},
                                            {"running", process_alive(pid, f.start_time.load())},
                                            {"heartbeat_ms_ago", fb == 0 || fb > now ? -1 : static_cast<int64_t>((now - fb) / 1000000)}});
  }
  o["frontends"] = std::move(frontends);
  return o;
}

std::string_view rank_state_name(uint32_t s) {
  switch (static_cast<TpRankState>(s)) {
    case TpRankState::kAbsent: return "absent";
    case TpRankState::kWaiting: return "waiting";
    case TpRankState::kJoined: return "joined";
  }
  return "invalid";
}

// The CPUs of a rank entry's 64-bit mask, as a list such as "0-3,8".
std::string cpu_list(uint64_t mask) {
  CpuSet set;
  for (int c = 0; c < 64; ++c) {
    if (mask >> c & 1) set.cpus.push_back(c);
  }
  return set.describe();
}

boost::json::object describe_tp(const std::filesystem::path& path, boost::json::object o) {
  auto tp = TpSegment::attach(path, /*writable=*/false);
  if (!tp.is_ok()) {
    o["error"] = tp.status().to_string();
    return o;
  }
  const TpHeader& h = tp->header();
  const uint64_t now = monotonic_ns();
  o["tp"] = h.tp_size;
  o["group_epoch"] = h.epoch.load();
  o["group_state"] = std::string(tp_group_state_name(h.group_state.load()));
  o["groups_formed"] = h.formed.load();
  o["group_restarts"] = h.restarts.load();
  o["last_break"] = std::string(tp_break_name(h.broken_why.load()));
  o["last_break_rank"] = h.broken_rank.load();
  o["weights_fingerprint"] = h.weights.hex();
  o["retired"] = h.retired.load() != 0;
  const TpGeometry& g = h.geometry;
  boost::json::array ranks;
  for (int r = 0; r < tp->tp_size(); ++r) {
    const TpRankEntry& e = tp->rank(r);
    const int32_t pid = e.pid.load();
    const uint64_t beat = e.heartbeat_ns.load();
    const uint64_t steps = e.steps.load();
    const int heads = g.n_heads / tp->tp_size(), kv = g.n_kv_heads / tp->tp_size();
    ranks.push_back(boost::json::object{
        {"rank", r},
        {"pid", pid},
        {"running", pid != 0 && process_alive(pid, e.start_time.load())},
        {"state", std::string(rank_state_name(e.state.load()))},
        {"epoch", e.epoch.load()},
        {"heartbeat_ms_ago", beat == 0 || beat > now ? -1 : static_cast<int64_t>((now - beat) / 1000000)},
        {"shard", fmt::format("heads {}-{} of {}, KV heads {}-{} of {}", r * heads, (r + 1) * heads - 1, g.n_heads,
                              r * kv, (r + 1) * kv - 1, g.n_kv_heads)},
        {"steps", steps},
        {"step_ms_mean", steps == 0 ? 0.0 : static_cast<double>(e.step_ns.load()) / 1e6 / static_cast<double>(steps)},
        {"step_ms_last", static_cast<double>(e.last_step_ns.load()) / 1e6},
        {"cpus", cpu_list(e.cpu_mask.load())},
        {"threads", e.threads.load()},
    });
  }
  o["ranks"] = std::move(ranks);
  return o;
}

// hearth-loader --device: its device slabs, who imports them, and whether a restarted
// loader would find them again (an fd store keeps them).
boost::json::object describe_slabs(const std::filesystem::path& path, boost::json::object o) {
  auto status = slab_status(path);
  if (!status.is_ok()) {
    o["error"] = status.status().code() == ErrorCode::kNotFound
                     ? "no loader listens (the loader that served device slabs is gone)"
                     : status.status().to_string();
    return o;
  }
  o["loader_pid"] = (*status)["pid"];
  o["slabs"] = (*status)["slabs"];
  return o;
}

// The resident LoRA adapters: capacity and each loaded adapter.
boost::json::object describe_lora(const std::filesystem::path& path, boost::json::object o) {
  auto seg = LoraSegment::attach(path, /*writable=*/false);
  if (!seg.is_ok()) {
    o["error"] = seg.status().to_string();
    return o;
  }
  const LoraHeader& h = seg->header();
  o["base_fingerprint"] = h.base.hex();
  o["max_loras"] = seg->n_slots();
  o["max_lora_rank"] = seg->max_rank();
  boost::json::array adapters;
  for (const LoraSlotInfo& a : seg->list()) {
    adapters.push_back(boost::json::object{{"name", a.name},
                                           {"slot", a.slot},
                                           {"state", a.unloading ? "unloading" : "ready"},
                                           {"max_rank", a.max_rank},
                                           {"matrices", a.n_matrices},
                                           {"source", a.source},
                                           {"loaded", local_time(a.loaded_unix_ms)}});
  }
  o["adapters"] = std::move(adapters);
  return o;
}

boost::json::object describe(const std::filesystem::path& path, const std::string& what) {
  boost::json::object o;
  o["segment"] = what;
  o["path"] = path.string();
  std::error_code ec;
  o["bytes"] = static_cast<uint64_t>(std::filesystem::file_size(path, ec));
  boost::json::array attached;
  for (int pid : processes_mapping(path)) {
    if (pid == ::getpid()) continue;
    attached.push_back(boost::json::object{{"pid", pid}, {"command", process_command(pid)}});
  }
  o["attached"] = std::move(attached);
  if (what == "broker") return describe_broker(path, std::move(o));
  if (what == "tp") return describe_tp(path, std::move(o));
  if (what == "slabs.sock") return describe_slabs(path, std::move(o));
  if (what == "lora") return describe_lora(path, std::move(o));
  if (what != "weights" && what != "draft-weights") return o;  // the target, or speculative decoding's draft model

  auto seg = ShmSegment::attach(path, /*writable=*/false);
  if (!seg.is_ok() || seg->size() < kWeightsHeaderBytes) {
    o["error"] = seg.is_ok() ? "too small to be a weights segment" : seg.status().to_string();
    return o;
  }
  const auto* h = reinterpret_cast<const WeightsHeader*>(seg->data());
  if (Status st = weights_header_check(*h, seg->size(), path); !st.is_ok()) {
    o["error"] = st.to_string();
    return o;
  }
  auto fixed = [](const char* s, size_t n) { return std::string(s, strnlen(s, n)); };
  const uint32_t state = h->state.load(std::memory_order_acquire);
  o["state"] = std::string(segment_state_name(state));
  o["model"] = fixed(h->model_name, sizeof(h->model_name));
  o["format"] = fixed(h->model_format, sizeof(h->model_format));
  o["quant"] = fixed(h->quant, sizeof(h->quant));
  o["layout"] = fixed(h->layout, sizeof(h->layout));
  o["source"] = fixed(h->source_path, sizeof(h->source_path));
  o["source_bytes"] = h->source_bytes;
  o["huge_page_bytes"] = h->huge_page_bytes;
  o["fingerprint"] = h->fingerprint.hex();
  o["tp"] = h->tp_size;
  o["created"] = local_time(h->created_unix_ms);
  o["creator_pid"] = h->creator_pid;
  o["creator_running"] = process_alive(h->creator_pid, h->creator_start_time);
  const int owner = h->owner_pid.load(std::memory_order_acquire);
  o["loader_pid"] = owner;
  o["loader_running"] = process_alive(owner, h->owner_start_time.load(std::memory_order_relaxed));
  return o;
}

void print_text(const std::map<std::string, std::vector<boost::json::object>>& instances) {
  if (cuda_emulated()) {
    std::printf("this hearth build's CUDA device is emulated on the CPU (HEARTH_CUDA=EMU): not a GPU build\n");
  }
  if (instances.empty()) {
    std::printf("no hearth segments\n");
    return;
  }
  for (const auto& [instance, segments] : instances) {
    std::printf("instance %s\n", instance.c_str());
    for (const auto& o : segments) {
      const auto& what = o.at("segment").as_string();
      std::printf("  %-8s %s  %s", what.c_str(), o.at("path").as_string().c_str(),
                  human_bytes(o.at("bytes").to_number<uint64_t>()).c_str());
      if (const auto* err = o.if_contains("error")) {
        std::printf("  UNREADABLE: %s\n", err->as_string().c_str());
      } else if (o.contains("engine_epoch")) {
        std::printf("\n    engine       pid %lld, epoch %lld, %s (heartbeat %lld ms ago)\n",
                    static_cast<long long>(o.at("engine_pid").to_number<int64_t>()),
                    static_cast<long long>(o.at("engine_epoch").to_number<int64_t>()),
                    o.at("engine_alive").as_bool() ? "alive" : "NOT RUNNING",
                    static_cast<long long>(o.at("engine_heartbeat_ms_ago").to_number<int64_t>()));
        std::printf("    requests     %lld running, %lld waiting; KV blocks %lld / %lld used\n",
                    static_cast<long long>(o.at("running").to_number<int64_t>()),
                    static_cast<long long>(o.at("waiting").to_number<int64_t>()),
                    static_cast<long long>(o.at("kv_blocks_used").to_number<int64_t>()),
                    static_cast<long long>(o.at("kv_blocks_total").to_number<int64_t>()));
        std::string states;
        for (const auto& [name, count] : o.at("slot_states").as_object()) {
          states += fmt::format("{}{} {}", states.empty() ? "" : ", ", count.to_number<int64_t>(), std::string(name));
        }
        std::printf("    slots        %lld: %s\n", static_cast<long long>(o.at("slots").to_number<int64_t>()),
                    states.c_str());
        std::string fronts;
        for (const auto& f : o.at("frontends").as_array()) {
          fronts += fmt::format("{}pid {} ({})", fronts.empty() ? "" : ", ", f.at("pid").to_number<int64_t>(),
                                f.at("running").as_bool() ? "running" : "gone");
        }
        std::printf("    frontends    %s\n", fronts.empty() ? "none" : fronts.c_str());
      } else if (o.contains("group_epoch")) {
        std::printf("\n    group        %lld rank(s), epoch %lld, %s; formed %lld times, %lld restarts (last break: %s)\n",
                    static_cast<long long>(o.at("tp").to_number<int64_t>()),
                    static_cast<long long>(o.at("group_epoch").to_number<int64_t>()),
                    o.at("group_state").as_string().c_str(),
                    static_cast<long long>(o.at("groups_formed").to_number<int64_t>()),
                    static_cast<long long>(o.at("group_restarts").to_number<int64_t>()),
                    o.at("last_break").as_string().c_str());
        for (const auto& rv : o.at("ranks").as_array()) {
          const auto& r = rv.as_object();
          const std::string cpus(r.at("cpus").as_string());
          std::printf("    rank %lld       pid %lld (%s), %s epoch %lld, heartbeat %lld ms ago; %s; %lld steps, "
                      "%.2f ms mean, %.2f ms last; %lld threads%s%s\n",
                      static_cast<long long>(r.at("rank").to_number<int64_t>()),
                      static_cast<long long>(r.at("pid").to_number<int64_t>()),
                      r.at("running").as_bool() ? "running" : "not running", r.at("state").as_string().c_str(),
                      static_cast<long long>(r.at("epoch").to_number<int64_t>()),
                      static_cast<long long>(r.at("heartbeat_ms_ago").to_number<int64_t>()),
                      r.at("shard").as_string().c_str(), static_cast<long long>(r.at("steps").to_number<int64_t>()),
                      r.at("step_ms_mean").to_number<double>(), r.at("step_ms_last").to_number<double>(),
                      static_cast<long long>(r.at("threads").to_number<int64_t>()), cpus.empty() ? "" : " on CPUs ",
                      cpus.c_str());
        }
      } else if (o.contains("adapters")) {
        const auto& adapters = o.at("adapters").as_array();
        std::printf("\n    adapters     %zu of %lld slots loaded, ranks up to %lld\n", adapters.size(),
                    static_cast<long long>(o.at("max_loras").to_number<int64_t>()),
                    static_cast<long long>(o.at("max_lora_rank").to_number<int64_t>()));
        for (const auto& av : adapters) {
          const auto& a = av.as_object();
          std::printf("    slot %-7lld %s (%s): %lld matrices of rank up to %lld from %s, loaded %s\n",
                      static_cast<long long>(a.at("slot").to_number<int64_t>()), a.at("name").as_string().c_str(),
                      a.at("state").as_string().c_str(), static_cast<long long>(a.at("matrices").to_number<int64_t>()),
                      static_cast<long long>(a.at("max_rank").to_number<int64_t>()), a.at("source").as_string().c_str(),
                      a.at("loaded").as_string().c_str());
        }
      } else if (o.contains("slabs")) {
        std::printf("\n    loader       pid %lld serves %zu device slab(s)\n",
                    static_cast<long long>(o.at("loader_pid").to_number<int64_t>()), o.at("slabs").as_array().size());
        for (const auto& sv : o.at("slabs").as_array()) {
          const auto& slab = sv.as_object();
          std::string held, importers;
          for (const auto& h : slab.at("held_by").as_array()) held += (held.empty() ? "" : ", ") + std::string(h.as_string());
          for (const auto& p : slab.at("importers").as_array()) {
            importers += fmt::format("{}{}", importers.empty() ? "" : ", ", p.to_number<int64_t>());
          }
          const bool vmm = slab.at("handle").as_string() == "vmm";
          std::printf("    rank %lld       CUDA device %lld (%s, sm_%lld), %s %s, %s; %s; imported by %s\n",
                      static_cast<long long>(slab.at("rank").to_number<int64_t>()),
                      static_cast<long long>(slab.at("device").to_number<int64_t>()),
                      slab.at("device_uuid").as_string().c_str(),
                      static_cast<long long>(slab.at("compute_capability").to_number<int64_t>()),
                      human_bytes(slab.at("data_bytes").to_number<uint64_t>()).c_str(),
                      slab.at("handle").as_string().c_str(), slab.at("adopted").as_bool() ? "adopted" : "copied",
                      !vmm ? "dies with the loader (legacy CUDA IPC)"
                      : held.empty() ? "kept by no fd store: a restarted loader copies it again"
                                     : ("kept by " + held + ": survives a loader restart").c_str(),
                      importers.empty() ? "none" : ("pids " + importers).c_str());
        }
      } else if (o.contains("state")) {
        std::printf("  %s\n", o.at("state").as_string().c_str());
        const std::string quant(o.at("quant").as_string());
        std::printf("    model        %s (%s%s) from %s\n", o.at("model").as_string().c_str(),
                    o.at("format").as_string().c_str(), quant.empty() ? "" : (", " + quant).c_str(),
                    o.at("source").as_string().c_str());
        std::printf("    fingerprint  %s, tensor parallel %lld, layout %s\n", o.at("fingerprint").as_string().c_str(),
                    static_cast<long long>(o.at("tp").to_number<int64_t>()), o.at("layout").as_string().c_str());
        const uint64_t huge = o.at("huge_page_bytes").to_number<uint64_t>();
        std::printf("    memory       %s, %s\n", human_bytes(o.at("bytes").to_number<uint64_t>()).c_str(),
                    huge == 0 ? "on 4 KiB pages" : (human_bytes(huge) + " of it on 2 MiB pages").c_str());
        std::printf("    created      %s by pid %lld (%s)\n", o.at("created").as_string().c_str(),
                    static_cast<long long>(o.at("creator_pid").to_number<int64_t>()),
                    o.at("creator_running").as_bool() ? "running" : "exited");
        std::printf("    loader       pid %lld (%s)\n", static_cast<long long>(o.at("loader_pid").to_number<int64_t>()),
                    o.at("loader_running").as_bool() ? "running" : "not running");
      } else {
        std::printf("\n");
      }
      std::string attached;
      for (const auto& a : o.at("attached").as_array()) {
        attached += fmt::format("{}{} ({})", attached.empty() ? "" : ", ", a.at("pid").to_number<int64_t>(),
                                std::string(a.at("command").as_string()));
      }
      std::printf("    attached     %s\n", attached.empty() ? "none" : attached.c_str());
    }
  }
}

}  // namespace

int status_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv, {"instance", "shm-dir"}, {"json", "help"});
  if (!args.is_ok()) {
    std::fprintf(stderr, "hearth status: %s\n\n%s", args.status().message().c_str(), kUsage);
    return 2;
  }
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string only = args->get("instance").value_or("");
  if (!only.empty()) {
    if (Status st = instance_name_check(only); !st.is_ok()) {
      std::fprintf(stderr, "hearth status: %s\n", st.to_string().c_str());
      return 2;
    }
  }
  const std::filesystem::path dir = args->get("shm-dir").value_or(shm_dir_default().string());
  std::map<std::string, std::vector<boost::json::object>> instances;
  std::error_code ec;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) paths.push_back(entry.path());
  if (ec) {
    std::fprintf(stderr, "hearth status: cannot list %s: %s\n", dir.c_str(), ec.message().c_str());
    return 1;
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    const std::string name = path.filename().string();  // hearth.<instance>.<what>
    if (!name.starts_with("hearth.")) continue;
    const size_t dot = name.find('.', 7);
    if (dot == std::string::npos) continue;
    const std::string instance = name.substr(7, dot - 7), what = name.substr(dot + 1);
    if (!only.empty() && instance != only) continue;
    instances[instance].push_back(describe(path, what));
  }
  if (args->has("json")) {
    boost::json::object out;
    for (auto& [instance, segments] : instances) {
      boost::json::array a;
      for (auto& s : segments) a.push_back(std::move(s));
      out[instance] = std::move(a);
    }
    std::printf("%s\n", boost::json::serialize(out).c_str());
    return 0;
  }
  if (!only.empty() && instances.empty()) {
    std::printf("instance %s has no segments in %s (is hearth-loader running with --instance %s?)\n", only.c_str(),
                dir.c_str(), only.c_str());
    return 0;
  }
  print_text(instances);
  return 0;
}

}  // namespace hearth::cli
