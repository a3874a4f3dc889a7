#include "frontend/prompt.h"

#include <fstream>
#include <sstream>

#include "chat/builtin_templates.h"
#include "frontend/reasoning.h"

namespace hearth {

std::optional<FimTokens> fim_tokens_find(const Tokenizer& t) {
  const char* const kFamilies[][3] = {
      {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},  // Qwen2.5-Coder, DeepSeek-style
      {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},        // StarCoder
      {"▁<PRE>", "▁<SUF>", "▁<MID>"},                          // CodeLlama
      {"<PRE>", "<SUF>", "<MID>"},
  };
  for (const auto& f : kFamilies) {
    const auto p = t.find_piece(f[0]), s = t.find_piece(f[1]), m = t.find_piece(f[2]);
    if (p && s && m) return FimTokens{*p, *s, *m};
  }
  return std::nullopt;
}

Result<PromptBuilder> PromptBuilder::create(const Tokenizer& tokenizer, std::string_view model_template,
                                            const PromptOptions& o) {
  PromptBuilder b;
  b.tokenizer_ = &tokenizer;
  b.fim_ = fim_tokens_find(tokenizer);
  std::string source;
  if (!o.chat_template.empty()) {
    if (auto builtin = builtin_chat_template(o.chat_template)) {
      source = std::string(*builtin);
      b.origin_ = "built-in " + o.chat_template;
    } else {
      std::ifstream in(o.chat_template, std::ios::binary);
      if (!in) {
        std::string names;
        for (std::string_view n : builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + std::string(n);
        return make_error(ErrorCode::kNotFound, "--chat-template {}: no such file, and not a built-in name ({})",
                          o.chat_template, names);
      }
      std::ostringstream text;
      text << in.rdbuf();
      source = text.str();
      if (source.size() > kMaxChatTemplateBytes) {
        return make_error(ErrorCode::kInvalidArgument, "--chat-template {}: larger than {} bytes", o.chat_template,
                          kMaxChatTemplateBytes);
      }
      b.origin_ = o.chat_template;
    }
  } else if (!model_template.empty()) {
    source = std::string(model_template);
    b.origin_ = "the model's";
  }
  if (!source.empty()) {
    auto parsed = ChatTemplate::parse(source);
    if (!parsed.is_ok()) {
      return parsed.status().with_context(o.chat_template.empty() ? "the model's chat template"
                                                                  : "--chat-template " + o.chat_template);
    }
    b.chat_template_ = std::make_shared<const ChatTemplate>(std::move(parsed).value());
    b.tool_format_ = tool_call_format_detect(source);
  }
  if (!o.tool_call_parser.empty()) {
    HEARTH_ASSIGN_OR_RETURN(b.tool_format_, tool_call_format_from_name(o.tool_call_parser));
  }
  return b;
}

Result<Prompt> PromptBuilder::build(const ApiRequest& req) const {
  const Tokenizer& t = *tokenizer_;
  Prompt out;
  if (api_is_chat(req.endpoint)) {
    if (!chat_template_) {
      return make_error(ErrorCode::kInvalidArgument,
                        "messages: this model has no chat template; start the server with --chat-template NAME or "
                        "FILE (built in: chatml, llama2, llama3, mistral, zephyr), or use /v1/completions");
    }
    if (!req.tools.empty() && req.tool_choice != ApiToolChoice::kNone && tool_format_ == ToolCallFormat::kNone) {
      return make_error(ErrorCode::kUnsupported,
                        "tools: this model's chat template has no tool-call format; start the server with "
                        "--chat-template chatml, llama3 or mistral, or name the format with --tool-call-parser");
    }
    ChatTemplateInputs inputs;
    for (const ApiMessage& m : req.messages) inputs.messages.push_back({m.role, m.content, m.extra});
    inputs.add_generation_prompt = true;
    if (t.bos_id() >= 0) inputs.bos_token = std::string(t.piece(t.bos_id()));
    if (t.eos_id() >= 0) inputs.eos_token = std::string(t.piece(t.eos_id()));
    for (const auto& kv : req.template_kwargs) inputs.extra[kv.key()] = kv.value();
    if (!req.tools.empty()) {
      boost::json::array tools;
      for (const ApiTool& tool : req.tools) tools.push_back(tool.definition);
      inputs.extra["tools"] = std::move(tools);
    }
    auto text = chat_template_->render(inputs);
    if (!text.is_ok()) return text.status().with_context("messages");
    // A prefill continues what the template began (inside the reasoning it opened, if it
    // did), unless a think tag in the prefill says otherwise: its last one decides.
    const size_t open = req.prefill.rfind(kThinkOpen), close = req.prefill.rfind(kThinkClose);
    out.opens_reasoning = open == std::string::npos && close == std::string::npos
                              ? prompt_opens_reasoning(*text)
                              : open != std::string::npos && (close == std::string::npos || open > close);
    *text += req.prefill;
    // A template that writes the BOS itself gets no second one from the tokenizer.
    const bool template_has_bos = !inputs.bos_token.empty() && text->starts_with(inputs.bos_token);
    auto ids = t.encode(*text, EncodeOptions{!template_has_bos, true});
    if (!ids.is_ok()) return ids.status().with_context("messages");
    out.ids = std::move(ids).value();
    return out;
  }
  if (req.suffix) {
    if (!fim_) {
      return make_error(ErrorCode::kUnsupported,
                        "suffix is not supported by this model: its vocabulary has no fill-in-the-middle tokens");
    }
    if (!req.prompt) {
      return make_error(ErrorCode::kInvalidArgument, "suffix needs the prompt as text, not token ids");
    }
    // Prefix-suffix-middle: [BOS] <prefix> prompt <suffix> suffix <middle>.
    auto prefix = t.encode(*req.prompt, EncodeOptions{false, false});
    if (!prefix.is_ok()) return prefix.status().with_context("prompt");
    auto suffix = t.encode(*req.suffix, EncodeOptions{false, false});
    if (!suffix.is_ok()) return suffix.status().with_context("suffix");
    if (t.add_bos() && t.bos_id() >= 0) out.ids.push_back(t.bos_id());
    out.ids.push_back(fim_->prefix);
    out.ids.insert(out.ids.end(), prefix->begin(), prefix->end());
    out.ids.push_back(fim_->suffix);
    out.ids.insert(out.ids.end(), suffix->begin(), suffix->end());
    out.ids.push_back(fim_->middle);
    out.echo_text = *req.prompt;
    return out;
  }
  if (req.prompt) {
    auto ids = t.encode(*req.prompt, EncodeOptions{true, false});
    if (!ids.is_ok()) return ids.status().with_context("prompt");
    out.ids = std::move(ids).value();
    out.echo_text = *req.prompt;
    return out;
  }
  for (int32_t id : req.prompt_tokens) {
    if (id < 0 || id >= t.vocab_size()) {
      return make_error(ErrorCode::kInvalidArgument, "prompt: token id {} is outside the vocabulary", id);
    }
  }
  out.ids = req.prompt_tokens;
  out.echo_text = t.decode(out.ids);
  return out;
}

}  // namespace hearth
