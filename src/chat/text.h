// Python's str operations on UTF-8 text. Python indexes strings by code point, so slicing, len() and
// strip() work on decoded code points here too. Case mapping is the C library's Unicode (C.UTF-8) simple
// mapping, plus ß -> SS in upper(); other multi-character mappings of Python's are not made.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace df::chat::text {

std::u32string decode(std::string_view s);  // invalid bytes become U+FFFD
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t length(std::string_view s);  // code points

bool is_space(char32_t c);  // Python's str.isspace
char32_t to_lower(char32_t c);
char32_t to_upper(char32_t c);
bool is_cased(char32_t c);

std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()

// chars absent: whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// sep absent: runs of whitespace, empty pieces dropped. maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::string replace(std::string_view s, std::string_view from, std::string_view to, long count);
size_t count(std::string_view s, std::string_view sub);
// Code-point index of sub in s at or after code point `start`, or -1.
long find(std::string_view s, std::string_view sub, bool reverse);

// Python's repr(str): single quotes unless the text holds ' and no ".
std::string repr(std::string_view s);

}  // namespace df::chat::text
