// UTF-8 and code point helpers for the tokenizers, with llama.cpp's exact
// conventions: invalid UTF-8 decodes to U+FFFD one byte at a time, lengths
// come from the lead byte's high nibble, and categories come from the
// generated range tables (unicode_tables.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lctx {

struct CptRange {
    uint32_t first, last;
};

namespace unicode_data {
extern const CptRange k_letter[];
extern const size_t k_letter_count;
extern const CptRange k_number[];
extern const size_t k_number_count;
extern const CptRange k_punct[];
extern const size_t k_punct_count;
extern const CptRange k_whitespace[];
extern const size_t k_whitespace_count;
} // namespace unicode_data

namespace unicode {

constexpr uint32_t kReplacement = 0xFFFD;
constexpr uint32_t kMaxCpt = 0x10FFFF;

// Byte length of the UTF-8 sequence that starts with `lead` (1 for
// continuation bytes), as llama.cpp's unicode_len_utf8.
inline size_t utf8_len(char lead) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[static_cast<uint8_t>(lead) >> 4];
}

// Decodes all code points; malformed bytes become U+FFFD each.
std::vector<uint32_t> decode_utf8(std::string_view s);
// Appends the UTF-8 encoding of `cpt` (values above U+10FFFF become U+FFFD).
void append_utf8(std::string &out, uint32_t cpt);

bool is_letter(uint32_t cpt);
bool is_number(uint32_t cpt);
bool is_punct(uint32_t cpt);
bool is_whitespace(uint32_t cpt);

// GPT-2 byte-level mapping: each byte to the UTF-8 of its printable stand-in.
const std::string &byte_to_unicode(uint8_t b);
// Inverse; returns -1 when `cpt` is not one of the 256 stand-ins.
int unicode_to_byte(uint32_t cpt);

} // namespace unicode
} // namespace lctx
