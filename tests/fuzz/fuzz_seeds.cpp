// Writes the seed inputs of the fuzz targets whose formats are made by hearth itself or
// sit inside other files, into DIR:
//   broker.seed     a broker segment (4 slots of 32 tokens) with requests in every state
//   weights.seed    the stories260K weights segment as hearth-loader publishes it
//   lora.seed       an adapter segment for it, with a rank-4 adapter loaded
//   templates/N.jinja  every chat template of ../shared/tokenizers/chat_templates
// CTest runs it before the replays; for a libFuzzer run, run it once and give the
// fuzzer DIR (or a copy) as its corpus. Seeds whose sources are absent are left out.
//
//   fuzz_seeds DIR
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <boost/json.hpp>

#include "common/mapped_file.h"
#include "ipc/broker.h"
#include "loader/lora.h"
#include "loader/lora_resident.h"
#include "loader/resident.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

namespace json = boost::json;

bool copy_segment(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  return !ec;
}

int write_broker(const std::filesystem::path& dir) {
  testing::TempDir tmp;
  auto b = Broker::open_or_create(tmp.path() / "b", {4, 32});
  if (!b.is_ok()) return 0;
  b->engine_start();
  auto registered = b->frontend_register();
  const int f = registered.is_ok() ? *registered : 0;
  const SlotState states[] = {SlotState::kQueued, SlotState::kRunning, SlotState::kDone};
  for (SlotState st : states) {
    const auto i = b->slot_claim(f);
    if (!i) break;
    SlotHeader& s = b->slot(*i);
    s.sampling = {0.8f, 0.9f, 0.05f, 1.1f, 0.0f, 0.0f, 40, 0, 7};
    s.max_tokens = 8;
    s.n_prompt = 5;
    s.n_stop_ids = 1;
    s.stop_ids[0] = 2;
    s.top_logprobs = 2;
    for (int k = 0; k < 5; ++k) b->prompt(*i)[k] = 1 + k;
    b->slot_submit(*i);
    if (st != SlotState::kQueued) {
      s.state.store(static_cast<uint32_t>(SlotState::kRunning));
      b->produced(*i)[0].id = 9;
      b->slot_publish(*i, 1);
    }
    if (st == SlotState::kDone) b->slot_finish(*i, SlotState::kDone, FinishReason::kLength);
  }
  return copy_segment(tmp.path() / "b", dir / "broker.seed") ? 1 : 0;
}

std::filesystem::path seed_model() { return testing::shared_path("models/stories260K/stories260K.gguf"); }

// Publishes stories260K as instance "seed" in `shm`; false when it is absent or fails.
bool publish_seed(const std::filesystem::path& shm) {
  if (!std::filesystem::exists(seed_model())) return false;
  ResidentOptions o;
  o.model = seed_model();
  o.shm_dir = shm;
  o.instance = "seed";
  return resident_publish(o).is_ok();
}

int write_weights(const std::filesystem::path& dir) {
  testing::TempDir tmp;
  if (!publish_seed(tmp.path())) return 0;
  return copy_segment(segment_path(tmp.path(), "seed", "weights"), dir / "weights.seed") ? 1 : 0;
}

int write_lora(const std::filesystem::path& dir) {
  testing::TempDir tmp;
  if (!publish_seed(tmp.path())) return 0;
  auto base_model = model_open(seed_model());
  if (!base_model.is_ok()) return 0;
  auto base = weights_attach(segment_path(tmp.path(), "seed", "weights"));
  if (!base.is_ok() || !lora_synth_write(*base_model, {.rank = 4}, tmp.path() / "adapter").is_ok()) return 0;
  const auto path = segment_path(tmp.path(), "seed", "lora");
  auto segment = lora_segment_open(*base, {.path = path, .max_loras = 2, .max_rank = 4});
  if (!segment.is_ok() || !lora_segment_load(segment->segment, *base, "seed", tmp.path() / "adapter").is_ok()) return 0;
  return copy_segment(path, dir / "lora.seed") ? 1 : 0;
}

int write_templates(const std::filesystem::path& dir) {
  const auto from = testing::shared_path("tokenizers/chat_templates");
  std::error_code ec;
  if (!std::filesystem::is_directory(from, ec)) return 0;
  int n = 0;
  std::filesystem::create_directories(dir / "templates");
  auto put = [&](std::string_view source) {
    std::ofstream(dir / "templates" / (std::to_string(n++) + ".jinja"), std::ios::binary) << source;
  };
  for (const auto& entry : std::filesystem::directory_iterator(from, ec)) {
    const auto name = entry.path().filename().string();
    auto text = read_small_file(entry.path(), 16u << 20);
    if (!text.is_ok()) continue;
    if (name.ends_with(".jinja")) {
      put(*text);
      continue;
    }
    if (!name.ends_with(".json")) continue;
    boost::system::error_code jec;
    const json::value v = json::parse(*text, jec);
    if (jec || !v.is_object()) continue;
    const auto& o = v.as_object();
    if (const auto* t = o.if_contains("chat_template")) {
      if (t->is_string()) put(t->as_string());
      if (t->is_array()) {
        for (const auto& e : t->as_array()) {
          if (e.is_object() && e.as_object().contains("template") && e.at("template").is_string()) {
            put(e.at("template").as_string());
          }
        }
      }
    }
    if (const auto* cases = o.if_contains("cases"); cases && cases->is_array()) {
      for (const auto& c : cases->as_array()) {
        if (c.is_object() && c.as_object().contains("template_str") && c.at("template_str").is_string()) {
          put(c.at("template_str").as_string());
        }
      }
    }
  }
  return n;
}

}  // namespace
}  // namespace hearth

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  const int broker = hearth::write_broker(dir);
  const int weights = hearth::write_weights(dir);
  const int lora = hearth::write_lora(dir);
  const int templates = hearth::write_templates(dir);
  std::printf("fuzz_seeds: %d broker, %d weights, %d adapter, %d chat template seeds in %s\n", broker, weights, lora,
              templates, dir.string().c_str());
  return broker == 1 ? 0 : 1;
}
