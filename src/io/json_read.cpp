#include "io/json_read.h"

#include <memory>
#include <vector>

#include "engine/error.h"

namespace canonlab {

namespace {

// Thrown from the parser callback, caught below: never leaves this file. `at` is where the limit was crossed.
struct TooDeep {
  std::string at;
};

// The parser callback that enforces the depth limit, keeping the path to the current container (object keys, "[]"
// for arrays; each key cut short) so that the refusal can say where the nesting is.
template <class Json>
typename Json::parser_callback_t depth_limit(int max_depth, const typename Json::parser_callback_t& extra) {
  auto path = std::make_shared<std::vector<std::string>>();
  return [max_depth, &extra, path](int depth, typename Json::parse_event_t event, Json& parsed) {
    using E = typename Json::parse_event_t;
    // nlohmann passes the depth of the enclosing container: 0 when the top-level array or object starts, and the
    // object's own level (1 for the top level) with each key.
    if (event == E::object_start || event == E::array_start) {
      path->resize(size_t(depth));
      if (depth >= max_depth) {
        std::string at;
        for (const std::string& part : *path) at += part.empty() || part == "[]" || at.empty() ? part : "." + part;
        at += event == E::array_start ? "[" : "{";
        throw TooDeep{at.size() > kBriefChars ? at.substr(0, kBriefChars) + "..." : at};
      }
      path->push_back(event == E::array_start ? "[]" : "");
    } else if (event == E::key && depth >= 1 && size_t(depth) <= path->size()) {
      (*path)[size_t(depth) - 1] = brief_text(parsed.template get_ref<const std::string&>(), 40);
    }
    return extra ? extra(depth, event, parsed) : true;
  };
}

// Where a cut at `n` bytes keeps whole UTF-8 sequences: back off continuation bytes (10xxxxxx).
size_t utf8_cut(std::string_view text, size_t n) {
  if (n >= text.size()) return text.size();
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) n--;
  return n;
}

template <class Json>
std::string scalar_text(const Json& v, size_t max_chars) {
  if (!v.is_string()) return v.dump();  // numbers, booleans, null: short, and dump() does not recurse for them
  const std::string& s = v.template get_ref<const std::string&>();
  const size_t keep = utf8_cut(s, max_chars + 1);
  return Json(s.substr(0, keep)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

template <class Json>
std::string brief_of(const Json& root, size_t max_chars) {
  struct Open {
    typename Json::const_iterator next, end;
    bool object, first;
  };
  std::vector<Open> open;  // grows by one per character written at most, so it stays bounded by max_chars
  std::string out;
  const auto enter = [&](const Json& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      open.push_back({v.cbegin(), v.cend(), v.is_object(), true});
    } else {
      out += scalar_text(v, max_chars);
    }
  };
  enter(root);
  while (!open.empty() && out.size() <= max_chars) {
    Open& top = open.back();
    if (top.next == top.end) {
      out += top.object ? '}' : ']';
      open.pop_back();
      continue;
    }
    if (!top.first) out += ',';
    top.first = false;
    const auto item = top.next++;
    if (top.object) out += scalar_text(Json(item.key()), max_chars) + ':';
    enter(*item);  // may push onto `open`: `top` is not used after this
  }
  if (out.size() <= max_chars && open.empty()) return out;
  return out.substr(0, utf8_cut(out, max_chars)) + "...";
}

std::string not_json(std::string_view origin, const std::exception& e) {
  // nlohmann's message quotes the last token read, which may be a whole 80 KB string.
  return std::string(origin) + ": not valid JSON (" + brief_text(e.what(), 200) + ")";
}

}  // namespace

template <class Json>
Json parse_json(std::string_view text, std::string_view origin, int max_depth,
                const typename Json::parser_callback_t& extra) {
  try {
    return Json::parse(text, depth_limit<Json>(max_depth, extra));
  } catch (const TooDeep& e) {
    throw Error(std::string(origin) + ": JSON nests deeper than " + std::to_string(max_depth) + " levels at '" + e.at +
                "'; allowed: at most " + std::to_string(max_depth) + " nested arrays and objects");
  } catch (const typename Json::exception& e) {
    throw Error(not_json(origin, e));
  }
}

template <class Json>
Json parse_json_or_discarded(std::string_view text, int max_depth) {
  try {
    return Json::parse(text, depth_limit<Json>(max_depth, nullptr), /*allow_exceptions=*/false);
  } catch (const TooDeep&) {
    return Json(Json::value_t::discarded);
  }
}

template nlohmann::json parse_json<nlohmann::json>(std::string_view, std::string_view, int,
                                                   const nlohmann::json::parser_callback_t&);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view, std::string_view, int,
                                                                   const nlohmann::ordered_json::parser_callback_t&);
template nlohmann::json parse_json_or_discarded<nlohmann::json>(std::string_view, int);
template nlohmann::ordered_json parse_json_or_discarded<nlohmann::ordered_json>(std::string_view, int);

std::string brief(const nlohmann::json& value, size_t max_chars) { return brief_of(value, max_chars); }
std::string brief(const nlohmann::ordered_json& value, size_t max_chars) { return brief_of(value, max_chars); }

std::string brief_text(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  return std::string(text.substr(0, utf8_cut(text, max_chars))) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace canonlab
