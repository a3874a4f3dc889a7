#include "frontend/adapters.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <system_error>
#include <thread>

#include "common/json.h"
#include "common/log.h"
#include "common/subprocess.h"

namespace hearth {

Status FrontendAdapters::attach(const std::filesystem::path& path, const Fingerprint& base) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(LoraSegment segment, LoraSegment::attach(path, /*writable=*/true));
  if (!(segment.header().base == base)) {
    return make_error(ErrorCode::kInvalidArgument, "{} holds adapters of another model; restart hearth-loader",
                      path.string());
  }
  segment_.emplace(std::move(segment));
  return Status::ok();
}

std::optional<AdapterRef> FrontendAdapters::find(std::string_view model) const {
  if (!segment_) return std::nullopt;
  {
    std::lock_guard names(unloading_mu_);
    if (std::find(unloading_.begin(), unloading_.end(), model) != unloading_.end()) return std::nullopt;
  }
  const auto info = segment_->find(model);
  if (!info) return std::nullopt;
  return AdapterRef{static_cast<int32_t>(info->slot), info->id, info->name};
}

bool FrontendAdapters::holds(const AdapterRef& ref) const {
  if (!segment_ || ref.slot < 0 || ref.slot >= static_cast<int32_t>(segment_->n_slots())) return false;
  const LoraSlotHeader& s = segment_->slot(static_cast<uint32_t>(ref.slot));
  const auto state = static_cast<LoraSlotState>(s.state.load(std::memory_order_acquire));
  return (state == LoraSlotState::kReady || state == LoraSlotState::kUnloading) &&
         s.id.load(std::memory_order_acquire) == ref.id;
}

std::vector<LoraSlotInfo> FrontendAdapters::list() const {
  return segment_ ? segment_->list() : std::vector<LoraSlotInfo>{};
}

void FrontendAdapters::list_models(boost::json::array& data, const std::string& parent, int32_t context) const {
  for (const LoraSlotInfo& a : list()) {
    if (a.unloading) continue;
    data.push_back(boost::json::object{{"id", a.name},
                                       {"object", "model"},
                                       {"created", static_cast<int64_t>(a.loaded_unix_ms / 1000)},
                                       {"owned_by", "hearth"},
                                       {"root", a.source},
                                       {"parent", parent},
                                       {"max_model_len", context}});
  }
}

namespace {

Status engine_without_segment() {
  return make_error(ErrorCode::kUnavailable, "the engine serving this instance started without its adapter segment "
                    "(or with one since replaced): restart hearth-engine");
}

Status no_segment() {
  return make_error(ErrorCode::kUnsupported,
                    "this instance keeps no adapters: start hearth-loader with --max-loras N (hearth serve --max-loras N)");
}

}  // namespace

Result<LoraSlotInfo> FrontendAdapters::load(const Loader& loader, const std::string& name, const std::string& path,
                                            const std::vector<std::string>& reserved) {
  if (!segment_) return no_segment();
  HEARTH_RETURN_IF_ERROR(lora_name_check(name).with_context("lora_name"));
  if (std::find(reserved.begin(), reserved.end(), name) != reserved.end()) {
    return make_error(ErrorCode::kInvalidArgument, "lora_name: \"{}\" is the base model's name", name);
  }
  std::unique_lock lock(admin_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return make_error(ErrorCode::kResourceExhausted, "another adapter is being loaded through this frontend; try again");
  }
  const ProcessResult run = run_process({loader.program, "--instance", loader.instance, "--shm-dir", loader.shm_dir,
                                         "--load-lora", name + "=" + path, "--log-level", "warn"});
  // Its one JSON line is the last of its output.
  std::string_view out = run.out;
  while (!out.empty() && out.back() == '\n') out.remove_suffix(1);
  out = out.substr(out.rfind('\n') == std::string_view::npos ? 0 : out.rfind('\n') + 1);
  auto doc = json_parse(out, "hearth-loader's answer", 4);
  if (!doc.is_ok() || !doc->is_object() || !doc->as_object().contains("event")) {
    if (run.exit_code == 128 + SIGALRM) {
      return make_error(ErrorCode::kUnavailable, "lora_path: reading the adapter took longer than 120 s (a path that "
                        "does not answer?); nothing was loaded");
    }
    return make_error(ErrorCode::kInternal, "{} --load-lora exited with status {}: {}", loader.program, run.exit_code,
                      run.err.substr(0, 2000));
  }
  const boost::json::object& o = doc->as_object();
  try {
    if (o.at("event").as_string() != "lora_loaded") {
      ErrorCode code = error_code_from_name(o.at("code").as_string());
      if (code == ErrorCode::kIo) code = ErrorCode::kInvalidArgument;  // the path the client gave cannot be read
      return make_error(code, "{}", std::string_view(o.at("message").as_string()));
    }
    LoraSlotInfo info;
    info.name = std::string(o.at("name").as_string());
    info.slot = static_cast<uint32_t>(o.at("slot").to_number<uint64_t>());
    info.id = o.at("id").to_number<uint64_t>();
    info.max_rank = o.at("max_rank").to_number<int32_t>();
    info.n_matrices = o.at("matrices").to_number<uint32_t>();
    info.source = std::string(o.at("source").as_string());
    return info;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, "hearth-loader's answer {} is malformed: {}", out, e.what());
  }
}

Result<LoraSlotInfo> FrontendAdapters::unload(const std::string& name, const UnloadHooks& hooks) {
  if (!segment_) return no_segment();
  std::optional<LoraSlotInfo> found;
  for (const LoraSlotInfo& a : segment_->list()) {
    if (a.name == name) found = a;
  }
  if (!found) return make_error(ErrorCode::kNotFound, "lora_name: no adapter named \"{}\" is loaded", name);
  const LoraSlotInfo info = *found;
  if (!hooks.engine_serves_segment()) return engine_without_segment();
  const AdapterRef ref{static_cast<int32_t>(info.slot), info.id, info.name};
  const auto deadline = std::chrono::steady_clock::now() + hooks.timeout;
  bool marked = info.unloading;  // UNLOADING in the segment (else READY: this frontend alone refuses it)
  auto wait = [&](const std::function<bool()>& done) -> Status {
    for (int64_t polls = 0; !done(); ++polls) {
      const std::string after = marked ? "it takes no new requests and is unloaded once those it runs have finished"
                                       : "it stays loaded";
      if (std::chrono::steady_clock::now() > deadline) {
        return make_error(ErrorCode::kUnavailable, "adapter \"{}\" is still in use after {} s: {} (asking again "
                          "waits for that)", name, std::chrono::duration_cast<std::chrono::seconds>(hooks.timeout).count(),
                          after);
      }
      if (hooks.stopping()) {
        return make_error(ErrorCode::kUnavailable, "adapter \"{}\" was not unloaded: this frontend is stopping", name);
      }
      if (hooks.engine_down()) {
        return make_error(ErrorCode::kUnavailable, "no engine serves this instance: adapter \"{}\" was not unloaded; "
                          "{}", name, marked ? "it takes no new requests and is unloaded once an engine runs again"
                                             : "it stays loaded");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(polls < 100 ? 2 : 20));
    }
    return Status::ok();
  };
  if (!info.unloading) {
    {
      std::lock_guard names(unloading_mu_);
      unloading_.push_back(name);
    }
    HEARTH_LOG_INFO("unloading adapter {} (slot {}): new requests for it are refused; those it runs finish first", name,
                    info.slot);
    Status drained = wait([&] { return !hooks.queued_here(info.slot, info.id); });
    if (drained.is_ok()) drained = segment_->begin_unload(info.slot, info.id);
    marked = drained.is_ok();
    {
      std::lock_guard names(unloading_mu_);
      unloading_.erase(std::find(unloading_.begin(), unloading_.end(), name));  // this unload's entry
    }
    HEARTH_RETURN_IF_ERROR(drained);
  }
  Status freed = wait([&] { return !holds(ref); });
  // Stopped before the engine freed it: READY again, unless the unload was another's.
  if (!freed.is_ok() && hooks.stopping() && !info.unloading) (void)segment_->cancel_unload(info.slot, info.id);
  HEARTH_RETURN_IF_ERROR(freed);
  LoraSlotInfo out = info;
  out.unloading = false;
  return out;
}

Result<LoraAdminRequest> lora_admin_parse(std::string_view body, bool load) {
  HEARTH_ASSIGN_OR_RETURN(boost::json::value doc, json_parse(body, "the request body", 8));
  if (!doc.is_object()) return make_error(ErrorCode::kInvalidArgument, "the body must be a JSON object");
  const boost::json::object& o = doc.as_object();
  for (const auto& kv : o) {
    if (kv.key() != "lora_name" && !(load && kv.key() == "lora_path")) {
      return make_error(ErrorCode::kInvalidArgument, "{}: unknown field (this request takes lora_name{})",
                        std::string_view(kv.key()), load ? " and lora_path" : "");
    }
  }
  LoraAdminRequest r;
  HEARTH_ASSIGN_OR_RETURN(auto name, json_opt_string(o, "lora_name"));
  if (!name) return make_error(ErrorCode::kInvalidArgument, "lora_name: a string is required");
  r.name = std::move(*name);
  HEARTH_RETURN_IF_ERROR(lora_name_check(r.name).with_context("lora_name"));
  if (load) {
    HEARTH_ASSIGN_OR_RETURN(auto path, json_opt_string(o, "lora_path"));
    if (!path || path->empty()) return make_error(ErrorCode::kInvalidArgument, "lora_path: a path is required");
    r.path = std::move(*path);
  }
  return r;
}

}  // namespace hearth
