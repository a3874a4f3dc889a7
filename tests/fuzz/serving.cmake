# Segments other processes write (the broker: frontends; the weights and adapters: the
# loader), and
# what clients send the frontend (HTTP requests, chat templates shipped with models).
# The broker, weights, adapter and template seeds are written by fuzz_seeds, a CTest fixture.
set(hearth_fuzz_seed_dir ${CMAKE_BINARY_DIR}/fuzz-seeds)
if(NOT HEARTH_FUZZ)
  add_executable(fuzz_seeds fuzz_seeds.cpp)
  target_link_libraries(fuzz_seeds PRIVATE hearth_ipc hearth_loader hearth_test_util hearth_warnings)
  add_test(NAME fuzz_seeds COMMAND fuzz_seeds ${hearth_fuzz_seed_dir})
  set_tests_properties(fuzz_seeds PROPERTIES FIXTURES_SETUP fuzz_seeds LABELS fuzz ENVIRONMENT "HEARTH_LOG_LEVEL=off")
endif()
hearth_add_fuzz(fuzz_broker SOURCE fuzz_broker.cpp LIBS hearth_ipc
  SEEDS ${hearth_fuzz_seed_dir}/broker.seed)
hearth_add_fuzz(fuzz_weights SOURCE fuzz_weights.cpp LIBS hearth_ipc
  SEEDS ${hearth_fuzz_seed_dir}/weights.seed)
hearth_add_fuzz(fuzz_lora SOURCE fuzz_lora.cpp LIBS hearth_ipc
  SEEDS ${hearth_fuzz_seed_dir}/lora.seed)
hearth_add_fuzz(fuzz_http_request SOURCE fuzz_http_request.cpp LIBS hearth_frontend
  SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/completion.txt ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/chat_chunked.txt
        ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/token_prompt.txt ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/get.txt
        ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/messages.txt ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/responses.txt
        ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/embeddings.txt ${CMAKE_CURRENT_SOURCE_DIR}/corpus/http/embeddings_text.txt)
hearth_add_fuzz(fuzz_chat_template SOURCE fuzz_chat_template.cpp LIBS hearth_chat
  SEEDS --rounds 200 ${hearth_fuzz_seed_dir}/templates)
if(NOT HEARTH_FUZZ)
  foreach(t fuzz_broker fuzz_weights fuzz_lora fuzz_chat_template)
    set_tests_properties(${t}_replay PROPERTIES FIXTURES_REQUIRED fuzz_seeds)
  endforeach()
endif()
# What clients send as constraints (GBNF, JSON schemas, regexes) and models write as tool calls.
hearth_add_fuzz(fuzz_grammar SOURCE fuzz_grammar.cpp LIBS hearth_grammar hearth_chat
  SEEDS --rounds 300 ${CMAKE_CURRENT_SOURCE_DIR}/corpus/grammar/gbnf.txt ${CMAKE_CURRENT_SOURCE_DIR}/corpus/grammar/schema.txt
        ${CMAKE_CURRENT_SOURCE_DIR}/corpus/grammar/regex.txt ${CMAKE_CURRENT_SOURCE_DIR}/corpus/grammar/tools.txt)
