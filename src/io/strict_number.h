#pragma once
// Numbers read from text that users or other programs wrote (config values, checkpoint metadata, sweep
// ranges) are parsed strictly: the whole text must be the number, so "1e5x", "12abc" or " 7" are rejected
// instead of silently read as their prefix (std::stoi / std::stoll accept "1e5x" as 1).
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>

namespace canonlab {

// A decimal integer of type Integer, optionally with a leading '+', and nothing else; nothing on overflow.
template <class Integer>
std::optional<Integer> parse_integer(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && std::isdigit(static_cast<unsigned char>(text[1]))) text.remove_prefix(1);
  Integer value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A finite decimal or scientific number, optionally with a leading '+', and nothing else.
inline std::optional<double> parse_finite_double(std::string_view text) {
  if (text.size() > 1 && text[0] == '+') text.remove_prefix(1);
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

}  // namespace canonlab
