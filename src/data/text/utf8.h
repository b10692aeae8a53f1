#pragma once
// The few UTF-8 facts the text pipeline needs: where a valid sequence ends, and how many characters a byte string
// holds. Validity is RFC 3629's: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace canonlab::utf8 {

// 10xxxxxx: the second, third or fourth byte of a multi-byte sequence.
inline bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The length (1..4) of the valid UTF-8 sequence that starts at text[i], or 0 when the bytes there are not one
// (a stray continuation byte, an invalid lead byte, a truncated or overlong sequence, a surrogate).
inline size_t sequence_length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const size_t left = text.size() - i;
  const unsigned char b = at(0);
  if (b < 0x80) return 1;
  // The range the second byte must lie in is the lead byte's: it excludes overlongs, surrogates and > U+10FFFF.
  unsigned char low = 0x80, high = 0xBF;
  size_t length = 0;
  if (b >= 0xC2 && b <= 0xDF) length = 2;
  else if (b >= 0xE0 && b <= 0xEF) length = 3, low = b == 0xE0 ? 0xA0 : 0x80, high = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) length = 4, low = b == 0xF0 ? 0x90 : 0x80, high = b == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (left < length || at(1) < low || at(1) > high) return 0;
  for (size_t k = 2; k < length; k++)
    if (!is_continuation(at(k))) return 0;
  return length;
}

// Characters of a byte string: the bytes that are not continuation bytes. For valid UTF-8 this is exactly the
// number of code points; in invalid UTF-8 every ASCII or lead byte counts one character and a stray continuation
// byte none. The count is additive (the characters of a concatenation are the sum of the parts'), so a token's
// character count does not depend on its neighbours and bits per character can be summed token by token.
inline uint64_t count_characters(std::string_view text) {
  uint64_t n = 0;
  for (char c : text) n += !is_continuation(static_cast<unsigned char>(c));
  return n;
}

}  // namespace canonlab::utf8
