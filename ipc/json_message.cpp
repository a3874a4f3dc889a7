#include "ipc/json_message.h"

#include "common/json.h"
#include "common/log.h"
#include "ipc/unix_socket.h"

namespace hearth {

namespace json = boost::json;

Result<JsonReply> json_call(int socket, const std::filesystem::path& path, const json::object& request,
                            std::span<const int> fds, std::chrono::milliseconds timeout) {
  HEARTH_RETURN_IF_ERROR(unix_send(socket, json::serialize(request), fds));
  auto answer = unix_receive(socket, timeout);
  if (!answer.is_ok()) return answer.status().with_context(fmt::format("no answer from {}", path.string()));
  HEARTH_ASSIGN_OR_RETURN(json::value v, json_parse(answer->bytes, path.string()));
  if (!v.is_object()) return make_error(ErrorCode::kFormat, "{} answered with something other than an object", path.string());
  json::object& o = v.as_object();
  HEARTH_ASSIGN_OR_RETURN(auto ok, json_opt_bool(o, "ok"));
  if (!ok.value_or(false)) {
    HEARTH_ASSIGN_OR_RETURN(auto error, json_opt_string(o, "error"));
    return make_error(ErrorCode::kUnavailable, "{}: {}", path.string(), error.value_or("refused without a reason"));
  }
  return JsonReply{std::move(o), std::move(answer->fds)};
}

void json_reply(int connection, const json::object& body, std::span<const int> fds) {
  if (Status st = unix_send(connection, json::serialize(body), fds); !st.is_ok()) {
    HEARTH_LOG_WARN("reply not sent: {}", st.to_string());
  }
}

void json_reply_error(int connection, std::string message) {
  json_reply(connection, json::object{{"ok", false}, {"error", std::move(message)}});
}

}  // namespace hearth
