#include "tools/serve_flags.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

namespace hearth::cli {
namespace {

constexpr unsigned kAll = kToServe | kToLoader | kToEngine | kToFrontend;

// clang-format off
constexpr ServeFlag kFlags[] = {
  // The model and the instance.
  {"model", FlagKind::kPath, "PATH", kToServe, "GGUF file, Hugging Face directory or llama2.c checkpoint (also the first argument, or -m)", "Model"},
  {"tokenizer", FlagKind::kPath, "PATH", kToLoader, "tokenizer for containers that keep it apart", "Model"},
  {"quant", FlagKind::kChoice, "int8|int4", kToLoader, "quantize the weight matrices when loading them (group-wise, 32 values per scale)", "Model", 0, 0, "int8|int4"},
  {"layout", FlagKind::kChoice, "cpu-r16|plain", kToLoader, "tensor layout the loader writes", "Model", 0, 0, "cpu-r16|plain", false, {}, "cpu-r16"},
  {"hugepages", FlagKind::kBool, "", kToLoader, "require the weights on 2 MiB pages (they go there by default where the kernel allows) and start each rank's data on a 2 MiB boundary", "Model"},
  {"served-model-name", FlagKind::kText, "NAME", kToFrontend, "the model's id in /v1/models and responses; repeat for aliases clients may name (default: the model's own name and the instance's)", "Model", 0, 0, {}, true},
  {"chat-template", FlagKind::kText, "NAME|FILE", kToFrontend, "chat template for /v1/chat/completions: a built-in (chatml, llama2, llama3, mistral, zephyr) or a Jinja file (default: the model's own; without one, chat requests get 400)", "Model"},
  {"tool-call-parser", FlagKind::kChoice, "hermes|llama3_json|mistral", kToFrontend, "how the model writes tool calls (default: read from the template)", "Model", 0, 0, "hermes|llama3_json|mistral"},
  {"reasoning-parser", FlagKind::kChoice, "deepseek_r1|qwen3|none", kToFrontend, "return a thinking model's reasoning (between think tags) apart from its answer: reasoning_content, thinking blocks, reasoning items", "Model", 0, 0, "deepseek_r1|qwen3|none", false, {}, "none"},
  {"pooling", FlagKind::kChoice, "last|mean|cls", kToFrontend, "how /v1/embeddings pools a text's final hidden states into one vector", "Model", 0, 0, "last|mean|cls", false, {}, "the model's own (GGUF pooling_type, sentence-transformers 1_Pooling), else last"},
  {"reasoning-budget", FlagKind::kInt, "N", kToFrontend, "reasoning tokens a choice may spend: then </think> is put in and the answer follows (the choice is ended where the think tags are not single tokens; 0: ask the template not to think)", "Model", -1, 1 << 30, {}, false, {}, "-1, no limit"},
  {"instance", FlagKind::kText, "NAME", kAll, "instance name; instances run side by side", "Instance", 0, 0, {}, false, {}, "default"},
  {"shm-dir", FlagKind::kPath, "DIR", kAll, "shared-memory directory", "Instance", 0, 0, {}, false, {}, "$HEARTH_SHM_DIR or /dev/shm"},
  {"remove-on-exit", FlagKind::kBool, "", kToServe, "remove the instance's segments when serve stops (default: weights stay resident for the next start)", "Instance"},
  // Devices and parallelism.
  {"device", FlagKind::kText, "cuda|cuda:N[,N...]", kToServe, "run on GPUs: the loader keeps each rank's weights in device memory (rank r on device r, or on the listed devices) and every engine rank runs the CUDA backend; hearth serve holds the device memory of the weights and of each rank's KV cache, so loader and engine restarts keep both", "Devices"},
  {"device-sharing", FlagKind::kChoice, "auto|vmm|cuda-ipc", kToLoader, "how device slabs are shared: the CUDA VMM API with fds (survives the loader), legacy CUDA IPC (dies with it), or auto", "Devices", 0, 0, "auto|vmm|cuda-ipc", false, {}, "auto"},
  {"tp", FlagKind::kInt, "N", kToServe, "tensor parallel: the loader splits the weights for N ranks and N engine processes serve them as one, each pinned to its share of the CPUs", "Devices", 1, 16, {}, false, {}, "1"},
  {"threads", FlagKind::kInt, "N", kToEngine, "CPU threads per engine rank", "Devices", 1, 1024, {}, false, {}, "every core (its share, with --tp)"},
  {"collective-timeout", FlagKind::kInt, "MS", kToEngine, "a collective that waits longer ends the group's epoch", "Devices", 100, 3600000, {}, false, {}, "30000"},
  {"rank-timeout", FlagKind::kInt, "MS", kToEngine, "a rank whose heartbeat is older is taken as hung", "Devices", 100, 3600000, {}, false, {}, "30000"},
  // The engine.
  {"slots", FlagKind::kInt, "N", kToEngine, "requests in flight at once", "Engine", 1, 65536, {}, false, {}, "128"},
  {"ctx", FlagKind::kInt, "N", kToEngine, "tokens per sequence, prompt and output", "Engine", 16, 1 << 24, {}, false, {}, "the model's, at most 4096"},
  {"kv-blocks", FlagKind::kInt, "N", kToEngine, "KV-cache blocks of 16 tokens", "Engine", 1, 1 << 24, {}, false, {}, "slots/4 full contexts"},
  {"kv-dtype", FlagKind::kChoice, "f32|f16|bf16", kToEngine, "how the KV cache stores keys and values", "Engine", 0, 0, "f32|f16|bf16", false, {}, "f16"},
  {"max-batch-size", FlagKind::kInt, "N", kToEngine, "sequences per step", "Engine", 1, 4096, {}, false, {}, "32"},
  {"max-batched-tokens", FlagKind::kInt, "N", kToEngine, "tokens per step, prefill chunks included", "Engine", 1, 1 << 20, {}, false, {}, "512"},
  {"prefetch", FlagKind::kInt, "N", kToEngine, "queued requests taken per step", "Engine", 1, 65536, {}, false, {}, "64"},
  {"no-prefix-cache", FlagKind::kBool, "", kToEngine, "turn off automatic prefix caching (later requests reusing the KV blocks of earlier ones with the same leading tokens)", "Engine"},
  {"no-kv-adopt", FlagKind::kBool, "", kToEngine, "a restarted engine computes the requests it resumes again instead of adopting the resident KV cache (hearth.<instance>.kv) its predecessor left", "Engine"},
  {"static-batching", FlagKind::kInt, "MS", kToEngine, "batch statically instead (a full batch or MS of waiting), for comparisons", "Engine", 1, 600000},
  {"spec", FlagKind::kChoice, "ngram|draft|none", kToEngine, "speculative decoding: each decoding sequence drafts tokens, by prompt lookup (ngram: what followed its last few tokens where they occurred before; faster where text repeats its input: edits, quotes, code) or with a smaller model of the same tokenizer (draft, with --draft-model), and one step checks them all; the output is the same; drafting adapts to acceptance, batch size and the draft's cost", "Engine", 0, 0, "ngram|draft|none", false, {}, "none"},
  {"draft-model", FlagKind::kPath, "PATH", kToLoader, "the draft model of --spec draft (GGUF, Hugging Face directory or llama2.c checkpoint): the loader keeps it resident beside the target (hearth.<instance>.draft-weights), quantized and laid out as the target, and rank 0 runs it whole", "Engine"},
  {"spec-tokens", FlagKind::kInt, "K", kToEngine, "drafted tokens per sequence and step at most (--spec)", "Engine", 1, 16, {}, false, {}, "4"},
  {"max-grammar-bytes", FlagKind::kInt, "N", kToEngine, "largest grammar a request's structured output or forced tool call may compile to (each slot holds this much)", "Engine", 0, 16 << 20, {}, false, {}, "65536"},
  // LoRA adapters.
  {"lora", FlagKind::kText, "NAME=PATH", kToLoader, "keep this LoRA adapter (a PEFT directory or GGUF LoRA file, checked against the model) resident in hearth.<instance>.lora; requests select it by naming NAME as their model, /v1/models lists it with its parent; repeatable", "LoRA", 0, 0, {}, true},
  {"max-loras", FlagKind::kInt, "N", kToLoader, "adapter slots: adapters resident at once (loaded at start or at run time), each held by every engine rank, all of them usable in one step", "LoRA", 1, 64, {}, false, {}, "4 with --lora"},
  {"max-lora-rank", FlagKind::kInt, "R", kToLoader, "the largest adapter rank a slot holds", "LoRA", 1, 1024, {}, false, {}, "16"},
  {"allow-runtime-lora", FlagKind::kBool, "", kToFrontend, "POST /v1/load_lora_adapter {\"lora_name\",\"lora_path\"} loads an adapter into a free slot and /v1/unload_lora_adapter {\"lora_name\"} unloads one once the requests using it finish (guarded by the API key)", "LoRA"},
  // HTTP.
  {"host", FlagKind::kText, "HOST", kToServe, "listen address (a non-loopback one without an API key is warned about)", "HTTP", 0, 0, {}, false, {}, "127.0.0.1"},
  {"port", FlagKind::kInt, "PORT", kToServe, "port (0 picks a free one, printed in the serving line)", "HTTP", 0, 65535, {}, false, {}, "8080"},
  {"http-threads", FlagKind::kInt, "N", kToFrontend, "HTTP threads of the frontend", "HTTP", 1, 256, {}, false, "threads", "2"},
  {"max-body", FlagKind::kInt, "BYTES", kToFrontend, "largest request body", "HTTP", 1024, 1 << 30, {}, false, {}, "1048576"},
  {"max-connections", FlagKind::kInt, "N", kToFrontend, "open connections at most; more are answered 503", "HTTP", 1, 1 << 20, {}, false, {}, "4096"},
  {"read-timeout", FlagKind::kInt, "MS", kToFrontend, "how long a client may take to send a request, or to start the next one on a kept-alive connection", "HTTP", 100, 3600000, {}, false, {}, "30000"},
  {"no-webui", FlagKind::kBool, "", kToFrontend, "no chat page at / (by default the frontend serves one, built into it, without a key; it calls the API with the key the user gives it)", "HTTP"},
  {"lenient-fields", FlagKind::kBool, "", kToFrontend, "accept and ignore request fields no OpenAI schema has (logged once per name) instead of answering 400", "HTTP"},
  {"drain-timeout", FlagKind::kInt, "MS", kToServe | kToFrontend, "how long a replaced or stopped frontend may finish its requests", "HTTP", 0, 3600000, {}, false, {}, "30000"},
  // Access.
  {"api-key", FlagKind::kText, "KEY", kToServe, "accept only requests with Authorization: Bearer KEY on /v1/* and the tokenizer routes (repeatable; also $HEARTH_API_KEY, comma-separated); handed to the frontend in its environment, never on its command line", "Access", 0, 0, {}, true},
  {"api-key-file", FlagKind::kPath, "FILE", kToServe, "API keys, one per line (# comments; repeatable)", "Access", 0, 0, {}, true},
  {"metrics-auth", FlagKind::kBool, "", kToFrontend, "/metrics wants a key too (/health and /ready stay open)", "Access"},
  {"cors-origin", FlagKind::kText, "ORIGIN", kToFrontend, "browsers on ORIGIN (scheme://host[:port], or * for any) may call the API; repeatable", "Access", 0, 0, {}, true},
  // Overload.
  {"max-queue", FlagKind::kInt, "N", kToFrontend, "requests that wait for a slot when every slot is busy; past it, 429 with Retry-After (0: 429 at once)", "Overload", 0, 1 << 20, {}, false, {}, "256"},
  {"queue-timeout", FlagKind::kInt, "MS", kToFrontend, "how long a request may wait in that queue before 429", "Overload", 0, 3600000, {}, false, {}, "30000"},
  {"engine-wait", FlagKind::kInt, "MS", kToFrontend, "how long requests wait for an engine that went away (a restart) before 503; once none has served for longer, new requests get 503 at once", "Overload", 0, 3600000, {}, false, {}, "10000"},
  // Logs.
  {"log-level", FlagKind::kChoice, "LEVEL", kAll, "trace, debug, info, warn, error or off (also $HEARTH_LOG_LEVEL)", "Logs", 0, 0, "trace|debug|info|warn|error|off", false, {}, "info"},
  {"log-format", FlagKind::kChoice, "text|json", kAll, "text lines prefixed by process, or one JSON object per line (also $HEARTH_LOG_FORMAT)", "Logs", 0, 0, "text|json", false, {}, "text"},
  {"log-prompts", FlagKind::kBool, "", kToFrontend, "the access log shows each request's body (never otherwise)", "Logs"},
  // This command.
  {"config", FlagKind::kPath, "FILE", kToServe, "flags from a YAML or TOML file, one key per flag (flags given here win)", "Command"},
  {"version", FlagKind::kBool, "", kToServe, "print the version and exit", "Command"},
  {"help", FlagKind::kBool, "", kToServe, "print this help and exit", "Command"},
  {"flag-reference", FlagKind::kBool, "", kToServe, "print the flag reference in Markdown (docs/configuration.md) and exit", "Command"},
};
// clang-format on

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// A scalar as written in YAML or TOML: quoted ('...' or "..." with \" and \\), or bare
// (a trailing # comment cut).
Result<std::string> scalar(std::string text, const std::string& where) {
  text = trim(text);
  if (!text.empty() && (text.front() == '"' || text.front() == '\'')) {
    const char q = text.front();
    std::string out;
    size_t i = 1;
    for (; i < text.size() && text[i] != q; ++i) {
      if (q == '"' && text[i] == '\\' && i + 1 < text.size()) ++i;
      out += text[i];
    }
    if (i >= text.size()) return make_error(ErrorCode::kInvalidArgument, "{}: an unterminated string", where);
    const std::string rest = trim(text.substr(i + 1));
    if (!rest.empty() && rest.front() != '#') {
      return make_error(ErrorCode::kInvalidArgument, "{}: unexpected \"{}\" after a string", where, rest);
    }
    return out;
  }
  if (const size_t hash = text.find(" #"); hash != std::string::npos) text = trim(text.substr(0, hash));
  return text;
}

// "[a, "b", c]" as scalars.
Result<std::vector<std::string>> inline_list(const std::string& text, const std::string& where) {
  std::vector<std::string> out;
  std::string inner = trim(text.substr(1, text.rfind(']') - 1));
  std::string item;
  char quote = 0;
  for (size_t i = 0; i <= inner.size(); ++i) {
    const char c = i < inner.size() ? inner[i] : ',';
    if (quote == 0 && c == ',') {
      if (!trim(item).empty()) {
        HEARTH_ASSIGN_OR_RETURN(std::string v, scalar(item, where));
        out.push_back(std::move(v));
      }
      item.clear();
      continue;
    }
    if (quote == 0 && (c == '"' || c == '\'')) {
      quote = c;
    } else if (quote != 0 && c == quote && (i == 0 || inner[i - 1] != '\\')) {
      quote = 0;
    }
    item += c;
  }
  return out;
}

Status append_setting(std::vector<std::string>& out, std::string key, const std::vector<std::string>& values,
                      const std::string& where) {
  std::replace(key.begin(), key.end(), '_', '-');
  const ServeFlag* f = find_serve_flag(key);
  if (f == nullptr || key == "config" || key == "help" || key == "version" || key == "flag-reference") {
    return make_error(ErrorCode::kInvalidArgument, "{}: \"{}\" is not a setting of hearth serve", where, key);
  }
  if (values.size() > 1 && !f->repeatable) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} takes one value, not a list", where, key);
  }
  for (const std::string& v : values) {
    if (f->kind == FlagKind::kBool) {
      if (v == "true") {
        out.push_back("--" + key);
      } else if (v != "false") {
        return make_error(ErrorCode::kInvalidArgument, "{}: {} is true or false, not \"{}\"", where, key, v);
      }
      continue;
    }
    out.push_back("--" + key);
    out.push_back(v);
  }
  return Status::ok();
}

}  // namespace

std::span<const ServeFlag> serve_flags() { return kFlags; }

const ServeFlag* find_serve_flag(std::string_view name) {
  for (const ServeFlag& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Result<std::vector<std::string>> read_config_file(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  const bool toml = ext == ".toml";
  if (!toml && ext != ".yaml" && ext != ".yml") {
    return make_error(ErrorCode::kInvalidArgument, "--config {}: a .yaml, .yml or .toml file", path);
  }
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::kNotFound, "--config {}: cannot be read", path);
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::string list_key;  // YAML: the key whose "- item" lines follow
  std::vector<std::string> list_items;
  std::string list_where;
  auto end_list = [&]() -> Status {
    if (list_key.empty()) return Status::ok();
    std::string key = std::move(list_key);
    list_key.clear();
    if (list_items.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} has no value", list_where, key);
    }
    return append_setting(out, key, list_items, list_where);
  };
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string where = fmt::format("{} line {}", path, line_no);
    const std::string t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    if (!toml && t.starts_with("- ") && !list_key.empty()) {
      HEARTH_ASSIGN_OR_RETURN(std::string v, scalar(t.substr(2), where));
      list_items.push_back(std::move(v));
      continue;
    }
    HEARTH_RETURN_IF_ERROR(end_list());
    if (toml && t.front() == '[') {
      return make_error(ErrorCode::kInvalidArgument, "{}: tables are not settings; write every key at the top", where);
    }
    const size_t sep = t.find(toml ? '=' : ':');
    if (sep == std::string::npos) {
      return make_error(ErrorCode::kInvalidArgument, "{}: expected \"key{}value\"", where, toml ? " = " : ": ");
    }
    std::string key = trim(t.substr(0, sep));
    if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'')) key = key.substr(1, key.size() - 2);
    if (!seen.insert(key).second) return make_error(ErrorCode::kInvalidArgument, "{}: {} is set twice", where, key);
    if (line.find_first_not_of(" \t") != 0) {
      return make_error(ErrorCode::kInvalidArgument, "{}: settings are not nested; write {} at the start of the line",
                        where, key);
    }
    const std::string rest = trim(t.substr(sep + 1));
    if (rest.empty() || rest.front() == '#') {
      if (toml) return make_error(ErrorCode::kInvalidArgument, "{}: {} has no value", where, key);
      list_key = key;  // a block list follows
      list_items.clear();
      list_where = where;
      continue;
    }
    std::vector<std::string> values;
    if (rest.front() == '[') {
      if (rest.find(']') == std::string::npos) {
        return make_error(ErrorCode::kInvalidArgument, "{}: a list must close on its line", where);
      }
      HEARTH_ASSIGN_OR_RETURN(values, inline_list(rest, where));
    } else {
      HEARTH_ASSIGN_OR_RETURN(std::string v, scalar(rest, where));
      values.push_back(std::move(v));
    }
    HEARTH_RETURN_IF_ERROR(append_setting(out, key, values, where));
  }
  HEARTH_RETURN_IF_ERROR(end_list());
  return out;
}

Result<Args> parse_serve_args(const std::vector<std::string>& argv_in) {
  std::set<std::string> value_flags, bool_flags;
  for (const ServeFlag& f : kFlags) (f.kind == FlagKind::kBool ? bool_flags : value_flags).insert(std::string(f.name));
  std::vector<std::string> argv;
  for (size_t i = 0; i < argv_in.size(); ++i) {
    argv.push_back(argv_in[i] == "-m" ? "--model" : argv_in[i]);
  }
  HEARTH_ASSIGN_OR_RETURN(Args cli, Args::parse(argv, value_flags, bool_flags, /*allow_positionals=*/true));
  if (cli.positionals().size() > 1) {
    return make_error(ErrorCode::kInvalidArgument, "one model at most; also got \"{}\"", cli.positionals()[1]);
  }
  if (!cli.positionals().empty()) {
    if (cli.has("model")) {
      return make_error(ErrorCode::kInvalidArgument, "the model is given twice: \"{}\" and --model {}",
                        cli.positionals()[0], *cli.get("model"));
    }
    // As --model too; the positional itself stays (and is passed over below): erasing it by
    // value could take a flag's value that happens to be the same text.
    argv.insert(argv.end(), {"--model", cli.positionals()[0]});
  }
  if (auto config = cli.get("config")) {
    HEARTH_ASSIGN_OR_RETURN(std::vector<std::string> settings, read_config_file(*config));
    std::vector<std::string> from_file;
    for (size_t i = 0; i < settings.size(); ++i) {
      const std::string name = settings[i].substr(2);
      const bool has_value = find_serve_flag(name)->kind != FlagKind::kBool;
      if (!cli.has(name) && !(name == "model" && !cli.positionals().empty())) {
        from_file.push_back(settings[i]);
        if (has_value) from_file.push_back(settings[i + 1]);
      }
      if (has_value) ++i;
    }
    argv.insert(argv.begin(), from_file.begin(), from_file.end());
  }
  HEARTH_ASSIGN_OR_RETURN(Args args, Args::parse(argv, value_flags, bool_flags, /*allow_positionals=*/true));
  // Every value against the table, before anything starts.
  for (const ServeFlag& f : kFlags) {
    const std::vector<std::string> values = args.get_all(std::string(f.name));
    if (values.size() > 1 && !f.repeatable) {
      return make_error(ErrorCode::kInvalidArgument, "--{} is given {} times; it takes one value", f.name,
                        values.size());
    }
    for (const std::string& v : values) {
      switch (f.kind) {
        case FlagKind::kBool:
        case FlagKind::kText:
          if (v.empty()) return make_error(ErrorCode::kInvalidArgument, "--{} needs a value", f.name);
          break;
        case FlagKind::kInt: {
          auto n = args.get_int(std::string(f.name), f.min, f.max);
          if (!n.is_ok()) return n.status();
          break;
        }
        case FlagKind::kChoice: {
          bool ok = false;
          for (size_t a = 0; a <= f.choices.size();) {
            const size_t b = std::min(f.choices.find('|', a), f.choices.size());
            ok = ok || f.choices.substr(a, b - a) == v;
            a = b + 1;
          }
          if (!ok) return make_error(ErrorCode::kInvalidArgument, "--{} is one of {}, not \"{}\"", f.name, f.choices, v);
          break;
        }
        case FlagKind::kPath: {
          std::error_code ec;
          if (!std::filesystem::exists(v, ec)) {
            return make_error(ErrorCode::kNotFound, "--{} {}: no such file or directory", f.name, v);
          }
          break;
        }
      }
    }
  }
  const bool draft = args.get("spec").value_or("") == "draft";
  if (draft != args.has("draft-model")) {
    return make_error(ErrorCode::kInvalidArgument, "{}",
                      draft ? "--spec draft needs --draft-model PATH" : "--draft-model is for --spec draft");
  }
  return args;
}

std::string serve_usage() {
  std::string out =
      "usage: hearth serve MODEL [options]   (or --model PATH, -m PATH)\n\n"
      "Runs hearth-loader, hearth-engine (one per --tp rank) and hearth-frontend for one instance\n"
      "and keeps them running; the OpenAI API is then at http://HOST:PORT/v1. Every flag is checked\n"
      "before anything starts. The children's logs go to this process's stderr, each line\n"
      "naming its process.\n";
  std::string_view section;
  for (const ServeFlag& f : kFlags) {
    if (f.section != section) {
      section = f.section;
      out += fmt::format("\n{}:\n", section);
    }
    std::string head = fmt::format("  --{}{}{}", f.name, f.value.empty() ? "" : " ", f.value);
    std::string help(f.help);
    if (!f.default_text.empty()) help += fmt::format(" (default {})", f.default_text);
    // Help from column 28 (on the next line after a long flag), words wrapped at 100.
    constexpr size_t kHelpColumn = 28, kWidth = 100;
    const std::string indent(kHelpColumn, ' ');
    std::string line = head.size() < kHelpColumn ? head + std::string(kHelpColumn - head.size(), ' ') : head + "\n" + indent;
    size_t col = kHelpColumn;
    for (size_t a = 0; a < help.size();) {
      const size_t b = std::min(help.find(' ', a), help.size());
      const std::string_view word = std::string_view(help).substr(a, b - a);
      if (col > kHelpColumn && col + 1 + word.size() > kWidth) {
        line += "\n" + indent;
        col = kHelpColumn;
      }
      if (col > kHelpColumn) {
        line += ' ';
        ++col;
      }
      line += word;
      col += word.size();
      a = b + 1;
    }
    out += line + "\n";
  }
  out +=
      "\nUnder systemd socket activation (one socket passed), that socket is served instead of\n"
      "--host/--port. SIGHUP starts a new frontend and drains the old one; SIGTERM / SIGINT stop\n"
      "everything (frontend first, so requests in flight finish).\n";
  return out;
}

std::string serve_flag_reference() {
  std::string out =
      "# hearth serve: flags and configuration\n\n"
      "Generated by `hearth serve --flag-reference` from the table the parser uses "
      "(`tools/serve_flags.cpp`); a test checks that this file matches it.\n\n"
      "Every flag is also a key of the file given with `--config FILE` (YAML, or TOML by the\n"
      "`.toml` extension): one key per flag, `-` or `_` in names, lists for repeatable flags,\n"
      "`true` / `false` for switches. Flags given on the command line win over the file.\n\n"
      "```yaml\n"
      "model: /models/llama-3.2-1b-instruct-q4_0.gguf\n"
      "host: 0.0.0.0\n"
      "port: 8080\n"
      "api-key-file: /etc/hearth/api-keys\n"
      "served-model-name: [llama-3.2-1b, default]\n"
      "max-queue: 512\n"
      "log-format: json\n"
      "```\n\n"
      "Values are checked before any process starts: integers within their range, choices\n"
      "among theirs, paths that exist. \"Goes to\" names the processes that receive a flag.\n";
  std::string_view section;
  for (const ServeFlag& f : kFlags) {
    if (f.section != section) {
      section = f.section;
      out += fmt::format("\n## {}\n\n| flag | value | default | goes to | what |\n| --- | --- | --- | --- | --- |\n",
                         section);
    }
    std::vector<std::string> to;
    if (f.targets & kToServe) to.emplace_back("serve");
    if (f.targets & kToLoader) to.emplace_back("loader");
    if (f.targets & kToEngine) to.emplace_back("engine");
    if (f.targets & kToFrontend) {
      to.push_back(f.child_name.empty() ? "frontend" : fmt::format("frontend (as `--{}`)", f.child_name));
    }
    std::string value(f.value);
    if (f.kind == FlagKind::kInt) value = fmt::format("{} ({}..{})", f.value, f.min, f.max);
    if (f.repeatable) value += ", repeatable";
    std::string help(f.help);
    std::replace(help.begin(), help.end(), '|', '/');
    std::replace(value.begin(), value.end(), '|', '/');
    out += fmt::format("| `--{}` | {} | {} | {} | {} |\n", f.name, value.empty() ? "switch" : value,
                       f.default_text.empty() ? "" : fmt::format("`{}`", f.default_text), fmt::join(to, ", "), help);
  }
  return out;
}

}  // namespace hearth::cli
