#include "chat/builtin_templates.h"

#include <array>
#include <utility>

namespace hearth {
namespace {

// Every template writes its text with explicit strings and {%- -%}, so what it renders
// does not depend on trim_blocks / lstrip_blocks subtleties.

// ChatML; tools are listed in the system turn and called as Hermes-style
// <tool_call>{"name": ..., "arguments": ...}</tool_call>; results come back in a user
// turn as <tool_response>.
constexpr std::string_view kChatml = R"JINJA(
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if has_system -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}
  {{- 'Functions you may call:\n<tools>\n' -}}
  {%- for tool in tools -%}{{- tool | tojson -}}{{- '\n' -}}{%- endfor -%}
  {{- '</tools>\nTo call one, write <tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
  {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- if message.role == 'system' and loop.first -%}
  {%- elif message.role == 'assistant' and message.tool_calls -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if message.content -%}{{- message.content + '\n' -}}{%- endif -%}
    {%- for call in message.tool_calls -%}
      {{- '<tool_call>\n{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) + '}\n</tool_call>' -}}
      {%- if not loop.last -%}{{- '\n' -}}{%- endif -%}
    {%- endfor -%}
    {{- '<|im_end|>\n' -}}
  {%- elif message.role == 'tool' -%}
    {{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' -}}
  {%- else -%}
    {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)JINJA";

constexpr std::string_view kLlama2 = R"JINJA(
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content -%}{%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = '' -%}{%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if message.role == 'user' -%}
    {{- bos_token + '[INST] ' -}}
    {%- if loop.first and system -%}{{- '<<SYS>>\n' + system + '\n<</SYS>>\n\n' -}}{%- endif -%}
    {{- message.content | trim -}}{{- ' [/INST]' -}}
  {%- elif message.role == 'assistant' -%}
    {{- ' ' -}}{{- message.content | trim -}}{{- ' ' + eos_token -}}
  {%- else -%}
    {{- raise_exception('the llama2 chat template has no ' + message.role + ' messages') -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// Llama 3 headers; tools are described in the system turn and called with one JSON object
// {"name": ..., "parameters": ...} (several separated by "; "); results come back as
// ipython turns.
constexpr std::string_view kLlama3 = R"JINJA(
{{- bos_token -}}
{%- if messages and messages[0].role == 'system' -%}
  {%- set system = messages[0].content -%}{%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system = '' -%}{%- set turns = messages -%}
{%- endif -%}
{%- if system or tools -%}
  {{- '<|start_header_id|>system<|end_header_id|>\n\n' + system -}}
  {%- if tools -%}
    {%- if system -%}{{- '\n\n' -}}{%- endif -%}
    {{- 'You can call functions. To call one, answer with only a JSON object {"name": function name, "parameters": an object of its arguments}. The functions:\n\n' -}}
    {%- for tool in tools -%}{{- tool | tojson -}}{{- '\n\n' -}}{%- endfor -%}
  {%- endif -%}
  {{- '<|eot_id|>' -}}
{%- endif -%}
{%- for message in turns -%}
  {%- if message.role == 'assistant' and message.tool_calls -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
    {%- for call in message.tool_calls -%}
      {{- '{"name": "' + call.function.name + '", "parameters": ' + (call.function.arguments | tojson) + '}' -}}
      {%- if not loop.last -%}{{- '; ' -}}{%- endif -%}
    {%- endfor -%}
    {{- '<|eot_id|>' -}}
  {%- elif message.role == 'tool' -%}
    {{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + message.content + '<|eot_id|>' -}}
  {%- else -%}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' -}}{{- message.content | trim -}}{{- '<|eot_id|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
)JINJA";

// Mistral instruct; tools go before the last user turn in [AVAILABLE_TOOLS], calls are
// [TOOL_CALLS] [{"name": ..., "arguments": ..., "id": ...}], results [TOOL_RESULTS].
constexpr std::string_view kMistral = R"JINJA(
{{- bos_token -}}
{%- set ns = namespace(last_user=-1) -%}
{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for message in messages -%}
  {%- if message.role == 'system' -%}
  {%- elif message.role == 'user' -%}
    {%- if tools and loop.index0 == ns.last_user -%}
      {{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' -}}
    {%- endif -%}
    {{- '[INST] ' -}}
    {%- if loop.index0 > 0 and messages[loop.index0 - 1].role == 'system' -%}{{- messages[loop.index0 - 1].content + '\n\n' -}}{%- endif -%}
    {{- message.content + '[/INST]' -}}
  {%- elif message.role == 'assistant' and message.tool_calls -%}
    {{- '[TOOL_CALLS] [' -}}
    {%- for call in message.tool_calls -%}
      {{- '{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) + ', "id": "' + call.id + '"}' -}}
      {%- if not loop.last -%}{{- ', ' -}}{%- endif -%}
    {%- endfor -%}
    {{- ']' + eos_token -}}
  {%- elif message.role == 'assistant' -%}
    {{- message.content + eos_token -}}
  {%- elif message.role == 'tool' -%}
    {{- '[TOOL_RESULTS] {"content": ' + (message.content | tojson) + ', "call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

constexpr std::string_view kZephyr = R"JINJA(
{%- for message in messages -%}
  {{- '<|' + message.role + '|>\n' + message.content + eos_token + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}
)JINJA";

constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kTemplates = {{
    {"chatml", kChatml},
    {"llama2", kLlama2},
    {"llama3", kLlama3},
    {"mistral", kMistral},
    {"zephyr", kZephyr},
}};

}  // namespace

std::optional<std::string_view> builtin_chat_template(std::string_view name) {
  for (const auto& [n, source] : kTemplates) {
    if (n == name) return source;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& builtin_chat_template_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& [n, source] : kTemplates) v.push_back(n);
    return v;
  }();
  return names;
}

}  // namespace hearth
