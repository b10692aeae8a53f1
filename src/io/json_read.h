#pragma once
// The one way canonlab reads JSON (configs in checkpoints, sweep and run files, grammars, manifests, Hugging Face
// config / index / safetensors headers), and the one way a message shows a value that came from a file.
//
// Why: nlohmann's parser is iterative, but much of what one does with the value is recursive (dump(), copies,
// comparisons, destruction in older releases), so a file nested 80,000 levels deep parses and then overflows the
// stack. Every reader therefore limits the nesting at parse time, where it is cheap, and no message ever calls
// dump() on a value read from a file: brief() prints a bounded prefix without recursion (docs/engine.md, "Untrusted
// input"; tests/unit/test_json_read.cpp greps src/ for the rule).
//
// YAML has its own single entry point with the same limit idea: config/yaml_document.h.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace canonlab {

// Nesting levels any JSON canonlab reads may have. Its own files nest at most 5 (a resolved config in a checkpoint:
// model.attention.key_shift.layers[i]); foreign ones (config.json, index files) a few more.
inline constexpr int kMaxJsonDepth = 64;
// How many characters of an offending value a message shows.
inline constexpr size_t kBriefChars = 60;

// Parses `text` with at most `max_depth` nested arrays/objects (the top level counts as one). Throws
// canonlab::Error "<origin>: not valid JSON (...)" or "<origin>: JSON nests deeper than N levels ...". `extra`, if
// given, is called like nlohmann's parser callback after the depth check (io/safetensors.cpp rejects duplicate keys
// with it); what it throws passes through.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, std::string_view origin, int max_depth = kMaxJsonDepth,
                const typename Json::parser_callback_t& extra = nullptr);

// The same without exceptions, for files that may be half-written or damaged and are then treated as absent: a
// discarded value (is_discarded()) when `text` is not JSON or nests deeper than `max_depth`.
template <class Json = nlohmann::json>
Json parse_json_or_discarded(std::string_view text, int max_depth = kMaxJsonDepth);

// At most `max_chars` characters of `value` as compact JSON, then "..." when there is more; never recursive, so any
// value, however deep or large, is safe to show.
std::string brief(const nlohmann::json& value, size_t max_chars = kBriefChars);
std::string brief(const nlohmann::ordered_json& value, size_t max_chars = kBriefChars);

// At most `max_chars` bytes of `text` (not cutting a UTF-8 sequence), then "... (N bytes)" when there is more.
std::string brief_text(std::string_view text, size_t max_chars = kBriefChars);

}  // namespace canonlab
