#include "ipc/slab_channel.h"

#include <unistd.h>

#include <charconv>

#include "common/json.h"
#include "common/log.h"
#include "common/process.h"
#include "ipc/json_message.h"
#include "ipc/segment.h"

namespace hearth {
namespace {

namespace json = boost::json;

bool is_hex(std::string_view s) { return s.find_first_not_of("0123456789abcdef") == std::string_view::npos; }

Result<Fingerprint> fingerprint_from_hex(std::string_view hex) {
  if (hex.size() != 32 || !is_hex(hex)) {
    return make_error(ErrorCode::kFormat, "fingerprint \"{}\" is not 32 lowercase hex digits", hex);
  }
  Fingerprint f;
  std::from_chars(hex.data(), hex.data() + 16, f.hi, 16);
  std::from_chars(hex.data() + 16, hex.data() + 32, f.lo, 16);
  return f;
}

Status check_record(const SlabRecord& r) {
  if (r.rank < 0 || r.rank >= kMaxTensorParallel) return make_error(ErrorCode::kFormat, "slab rank {} is out of range", r.rank);
  if (r.device < 0 || r.device > 1023) return make_error(ErrorCode::kFormat, "slab device {} is out of range", r.device);
  const bool uuid_ok = r.device_uuid.size() == 40 && r.device_uuid.starts_with("GPU-") &&
                       r.device_uuid.find_first_not_of("0123456789abcdef-", 4) == std::string::npos;
  if (!uuid_ok) return make_error(ErrorCode::kFormat, "slab device uuid \"{}\" is malformed", r.device_uuid);
  if (r.compute_capability < 10 || r.compute_capability > 999) {
    return make_error(ErrorCode::kFormat, "slab compute capability {} is out of range", r.compute_capability);
  }
  if (r.data_bytes == 0 || r.bytes < r.data_bytes) {
    return make_error(ErrorCode::kFormat, "slab of {} bytes cannot hold {} bytes of data", r.bytes, r.data_bytes);
  }
  if (r.handle == kSlabHandleVmm) {
    if (!r.ipc_handle.empty()) return make_error(ErrorCode::kFormat, "a \"vmm\" slab carries no IPC handle");
  } else if (r.handle == kSlabHandleCudaIpc) {
    if (r.ipc_handle.size() != 128 || !is_hex(r.ipc_handle)) {
      return make_error(ErrorCode::kFormat, "a \"cuda-ipc\" slab's handle is not 128 hex digits");
    }
  } else {
    return make_error(ErrorCode::kFormat, "slab handle kind \"{}\" is neither \"vmm\" nor \"cuda-ipc\"", r.handle);
  }
  return Status::ok();
}

Result<uint64_t> parse_u64(std::string_view s, std::string_view what) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
    return make_error(ErrorCode::kFormat, "{} \"{}\" is not a number", what, s);
  }
  return v;
}

}  // namespace

json::object slab_record_json(const SlabRecord& r) {
  json::object o{{"rank", r.rank},
                 {"device", r.device},
                 {"device_uuid", r.device_uuid},
                 {"compute_capability", r.compute_capability},
                 {"bytes", r.bytes},
                 {"data_bytes", r.data_bytes},
                 {"handle", r.handle},
                 {"weights", r.weights.hex()}};
  if (!r.ipc_handle.empty()) o["ipc_handle"] = r.ipc_handle;
  return o;
}

Result<SlabRecord> slab_record_from_json(const json::value& v) {
  if (!v.is_object()) return make_error(ErrorCode::kFormat, "a slab record is not an object");
  const json::object& o = v.as_object();
  SlabRecord r;
  HEARTH_ASSIGN_OR_RETURN(int64_t rank, json_int(o, "rank"));
  HEARTH_ASSIGN_OR_RETURN(int64_t device, json_int(o, "device"));
  HEARTH_ASSIGN_OR_RETURN(int64_t cc, json_int(o, "compute_capability"));
  HEARTH_ASSIGN_OR_RETURN(int64_t bytes, json_int(o, "bytes"));
  HEARTH_ASSIGN_OR_RETURN(int64_t data_bytes, json_int(o, "data_bytes"));
  HEARTH_ASSIGN_OR_RETURN(auto uuid, json_opt_string(o, "device_uuid"));
  HEARTH_ASSIGN_OR_RETURN(auto handle, json_opt_string(o, "handle"));
  HEARTH_ASSIGN_OR_RETURN(auto weights, json_opt_string(o, "weights"));
  HEARTH_ASSIGN_OR_RETURN(auto ipc_handle, json_opt_string(o, "ipc_handle"));
  if (rank < 0 || rank > 1 << 20 || device < 0 || device > 1 << 20 || cc < 0 || cc > 1 << 20 || bytes < 0 ||
      data_bytes < 0) {
    return make_error(ErrorCode::kFormat, "a slab record's numbers are out of range");
  }
  r.rank = static_cast<int>(rank);
  r.device = static_cast<int>(device);
  r.compute_capability = static_cast<int>(cc);
  r.bytes = static_cast<uint64_t>(bytes);
  r.data_bytes = static_cast<uint64_t>(data_bytes);
  r.device_uuid = uuid.value_or("");
  r.handle = handle.value_or("");
  r.ipc_handle = ipc_handle.value_or("");
  HEARTH_ASSIGN_OR_RETURN(r.weights, fingerprint_from_hex(weights.value_or("")));
  HEARTH_RETURN_IF_ERROR(check_record(r));
  return r;
}

std::string slab_store_name(const SlabRecord& r) {
  return fmt::format("{}r{}.d{}.{}.sm{}.{}.{}.{}", kSlabNamePrefix, r.rank, r.device, r.device_uuid,
                     r.compute_capability, r.bytes, r.data_bytes, r.weights.hex());
}

Result<SlabRecord> slab_record_from_store_name(std::string_view name) {
  const Status malformed = make_error(ErrorCode::kFormat, "fd store name \"{}\" is not a slab's", name.substr(0, 255));
  if (!name.starts_with(kSlabNamePrefix) || name.size() > 255) return malformed;
  name.remove_prefix(kSlabNamePrefix.size());
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (parts.size() != 7 || !parts[0].starts_with('r') || !parts[1].starts_with('d') || !parts[3].starts_with("sm")) {
    return malformed;
  }
  SlabRecord r;
  HEARTH_ASSIGN_OR_RETURN(uint64_t rank, parse_u64(parts[0].substr(1), "rank"));
  HEARTH_ASSIGN_OR_RETURN(uint64_t device, parse_u64(parts[1].substr(1), "device"));
  HEARTH_ASSIGN_OR_RETURN(uint64_t cc, parse_u64(parts[3].substr(2), "compute capability"));
  HEARTH_ASSIGN_OR_RETURN(r.bytes, parse_u64(parts[4], "bytes"));
  HEARTH_ASSIGN_OR_RETURN(r.data_bytes, parse_u64(parts[5], "data bytes"));
  HEARTH_ASSIGN_OR_RETURN(r.weights, fingerprint_from_hex(parts[6]));
  if (rank > 1 << 20 || device > 1 << 20 || cc > 1 << 20) return malformed;
  r.rank = static_cast<int>(rank);
  r.device = static_cast<int>(device);
  r.compute_capability = static_cast<int>(cc);
  r.device_uuid = std::string(parts[2]);
  HEARTH_RETURN_IF_ERROR(check_record(r));
  return r;
}

std::filesystem::path slab_socket_path(const std::filesystem::path& shm_dir, std::string_view instance) {
  return segment_path(shm_dir, instance, "slabs.sock");
}

Result<std::unique_ptr<SlabServer>> SlabServer::start(const std::filesystem::path& path,
                                                      std::vector<ServedSlab> slabs) {
  for (const ServedSlab& s : slabs) HEARTH_RETURN_IF_ERROR(check_record(s.record));
  std::unique_ptr<SlabServer> server(new SlabServer());
  server->importers_.resize(slabs.size());
  server->slabs_ = std::move(slabs);
  SlabServer* self = server.get();
  HEARTH_ASSIGN_OR_RETURN(server->server_,
                          UnixServer::start(path, [self](int connection, FdMessage& request, const PeerCredentials& peer) {
                            self->handle(connection, request, peer);
                          }));
  return server;
}

json::array SlabServer::describe() const {
  std::lock_guard lock(mu_);
  json::array out;
  for (size_t i = 0; i < slabs_.size(); ++i) {
    json::object o = slab_record_json(slabs_[i].record);
    o["adopted"] = slabs_[i].adopted;
    json::array held, importers;
    for (const std::string& h : slabs_[i].held_by) held.emplace_back(h);
    for (const Importer& imp : importers_[i]) {
      if (process_alive(imp.pid, imp.start_time)) importers.emplace_back(imp.pid);
    }
    o["held_by"] = std::move(held);
    o["importers"] = std::move(importers);
    out.push_back(std::move(o));
  }
  return out;
}

void SlabServer::handle(int connection, FdMessage& request, const PeerCredentials& peer) {
  if (!request.fds.empty()) return json_reply_error(connection, "a request carries no descriptors");
  auto parsed = json_parse(request.bytes, "slab request", 4);
  if (!parsed.is_ok() || !parsed->is_object()) return json_reply_error(connection, "a request is one JSON object");
  const json::object& o = parsed->as_object();
  auto op = json_opt_string(o, "op");
  if (!op.is_ok() || !op->has_value()) return json_reply_error(connection, "a request names its \"op\"");
  if (**op == "status") {
    json::object body{{"ok", true}, {"pid", ::getpid()}, {"slabs", describe()}};
    return json_reply(connection, body);
  }
  if (**op != "get") return json_reply_error(connection, fmt::format("unknown op \"{}\" (get, status)", **op));
  auto rank = json_int(o, "rank");
  if (!rank.is_ok()) return json_reply_error(connection, rank.status().message());
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const ServedSlab& s = slabs_[i];
    if (s.record.rank != *rank) continue;
    std::vector<int> fds;
    if (s.fd) fds.push_back(s.fd.get());
    auto& imps = importers_[i];
    std::erase_if(imps, [](const Importer& imp) { return !process_alive(imp.pid, imp.start_time); });
    if (peer.pid > 0 && imps.size() < 64) imps.push_back({peer.pid, process_start_time(peer.pid)});
    return json_reply(connection, json::object{{"ok", true}, {"slab", slab_record_json(s.record)}}, fds);
  }
  return json_reply_error(connection, fmt::format("this loader has no device slab for rank {} ({} slab{})", *rank,
                                             slabs_.size(), slabs_.size() == 1 ? "" : "s"));
}

Result<std::optional<FetchedSlab>> slab_fetch(const std::filesystem::path& path, int rank,
                                              std::chrono::milliseconds timeout) {
  auto socket = unix_connect(path);
  if (!socket.is_ok()) {
    if (socket.status().code() == ErrorCode::kNotFound) return std::optional<FetchedSlab>();
    return socket.status();
  }
  HEARTH_ASSIGN_OR_RETURN(JsonReply answer,
                          json_call(socket->get(), path, json::object{{"op", "get"}, {"rank", rank}}, {}, timeout));
  auto& [body, fds] = answer;
  const json::value* slab = body.if_contains("slab");
  if (slab == nullptr) return make_error(ErrorCode::kFormat, "{} answered without a slab", path.string());
  FetchedSlab out;
  HEARTH_ASSIGN_OR_RETURN(out.record, slab_record_from_json(*slab));
  const size_t expected = out.record.handle == kSlabHandleVmm ? 1 : 0;
  if (fds.size() != expected) {
    return make_error(ErrorCode::kFormat, "{} sent {} descriptors with a \"{}\" slab (expected {})", path.string(),
                      fds.size(), out.record.handle, expected);
  }
  if (out.record.rank != rank) {
    return make_error(ErrorCode::kFormat, "{} answered with rank {}'s slab for rank {}", path.string(), out.record.rank,
                      rank);
  }
  if (expected == 1) out.fd = std::move(fds[0]);
  return std::optional<FetchedSlab>(std::move(out));
}

Result<json::object> slab_status(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  HEARTH_ASSIGN_OR_RETURN(UniqueFd socket, unix_connect(path));
  HEARTH_ASSIGN_OR_RETURN(JsonReply answer, json_call(socket.get(), path, json::object{{"op", "status"}}, {}, timeout));
  return std::move(answer.body);
}

}  // namespace hearth
