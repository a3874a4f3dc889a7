#include "frontend/dialects.h"

#include "frontend/dialect_detail.h"

namespace hearth {

std::string dialect_response_body(const ApiRequest& request, const ApiResponseHead& head, const DialectResult& result) {
  if (request.endpoint == ApiEndpoint::kMessages) return dialect_detail::messages_body(head, result);
  return dialect_detail::responses_body(request, head, result);
}

std::unique_ptr<EventStream> EventStream::create(const ApiRequest& request, const ApiResponseHead& head) {
  if (request.endpoint == ApiEndpoint::kMessages) return dialect_detail::messages_stream(head);
  return dialect_detail::responses_stream(request, head);
}

std::string dialect_error_body(ApiEndpoint endpoint, const Status& status) {
  if (endpoint == ApiEndpoint::kMessages) return dialect_detail::messages_error(api_status_of(status), status.message());
  return api_error_body(status);
}

std::string dialect_unauthorized_body(ApiEndpoint endpoint, std::string_view message) {
  if (endpoint == ApiEndpoint::kMessages) return dialect_detail::messages_error(401, message);
  return boost::json::serialize(boost::json::object{{"error", {{"message", message},
                                                               {"type", "invalid_request_error"},
                                                               {"param", nullptr},
                                                               {"code", "invalid_api_key"}}}});
}

std::string_view dialect_id_prefix(ApiEndpoint endpoint) {
  switch (endpoint) {
    case ApiEndpoint::kCompletions:
      return "cmpl-";
    case ApiEndpoint::kChatCompletions:
      return "chatcmpl-";
    case ApiEndpoint::kMessages:
      return "msg_";
    case ApiEndpoint::kResponses:
      return "resp_";
    case ApiEndpoint::kEmbeddings:
      return "emb-";
  }
  return "";
}

}  // namespace hearth
