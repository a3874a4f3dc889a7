// What frontend/dialects.cpp dispatches to: the Messages (anthropic.cpp) and Responses
// (responses.cpp) halves. Internal to frontend/.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "frontend/dialects.h"

namespace hearth::dialect_detail {

std::string messages_body(const ApiResponseHead& head, const DialectResult& result);
std::unique_ptr<EventStream> messages_stream(const ApiResponseHead& head);
std::string messages_error(int http, std::string_view message);

std::string responses_body(const ApiRequest& request, const ApiResponseHead& head, const DialectResult& result);
std::unique_ptr<EventStream> responses_stream(const ApiRequest& request, const ApiResponseHead& head);

}  // namespace hearth::dialect_detail
