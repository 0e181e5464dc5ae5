#include "model/unicode.h"

#include <algorithm>
#include <array>

namespace lctx::unicode {

std::vector<uint32_t> decode_utf8(std::string_view s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    const auto *p = reinterpret_cast<const uint8_t *>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
    while (i < n) {
        const uint8_t b = p[i];
        // Same acceptance rules as llama.cpp's unicode_cpt_from_utf8: the
        // lead byte decides the length, continuation bytes must be 10xxxxxx,
        // overlong forms and surrogates are not rejected.
        if (b < 0x80) {
            out.push_back(b);
            i += 1;
        } else if ((b & 0xE0) == 0xC0 && cont(1)) {
            out.push_back(((b & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu));
            i += 2;
        } else if ((b & 0xF0) == 0xE0 && cont(1) && cont(2)) {
            out.push_back(((b & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu));
            i += 3;
        } else if ((b & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
            const uint32_t c = ((b & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
                               (p[i + 3] & 0x3Fu);
            // Beyond U+10FFFF cannot be re-encoded; treat it as malformed.
            out.push_back(c <= kMaxCpt ? c : kReplacement);
            i += 4;
        } else {
            out.push_back(kReplacement);
            i += 1;
        }
    }
    return out;
}

void append_utf8(std::string &out, uint32_t c) {
    if (c > kMaxCpt) c = kReplacement;
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

static bool in_ranges(const CptRange *r, size_t n, uint32_t c) {
    const CptRange *end = r + n;
    const CptRange *it = std::upper_bound(r, end, c, [](uint32_t v, const CptRange &x) { return v < x.first; });
    return it != r && c <= (it - 1)->last;
}

// ASCII is by far the most common input; answer it from small tables.
namespace {
struct AsciiFlags {
    std::array<uint8_t, 128> f{};
    AsciiFlags() {
        for (uint32_t c = 0; c < 128; ++c) {
            f[c] = static_cast<uint8_t>(
                (in_ranges(unicode_data::k_letter, unicode_data::k_letter_count, c) ? 1 : 0) |
                (in_ranges(unicode_data::k_number, unicode_data::k_number_count, c) ? 2 : 0) |
                (in_ranges(unicode_data::k_punct, unicode_data::k_punct_count, c) ? 4 : 0) |
                (in_ranges(unicode_data::k_whitespace, unicode_data::k_whitespace_count, c) ? 8 : 0));
        }
    }
};
const AsciiFlags &ascii() {
    static const AsciiFlags a;
    return a;
}
} // namespace

bool is_letter(uint32_t c) {
    return c < 128 ? (ascii().f[c] & 1) : in_ranges(unicode_data::k_letter, unicode_data::k_letter_count, c);
}
bool is_number(uint32_t c) {
    return c < 128 ? (ascii().f[c] & 2) : in_ranges(unicode_data::k_number, unicode_data::k_number_count, c);
}
bool is_punct(uint32_t c) {
    return c < 128 ? (ascii().f[c] & 4) : in_ranges(unicode_data::k_punct, unicode_data::k_punct_count, c);
}
bool is_whitespace(uint32_t c) {
    return c < 128 ? (ascii().f[c] & 8)
                   : in_ranges(unicode_data::k_whitespace, unicode_data::k_whitespace_count, c);
}

namespace {
// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in byte order.
struct ByteMap {
    std::array<std::string, 256> enc;
    std::array<int, 512> dec{};
    ByteMap() {
        dec.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const uint32_t cpt = printable ? static_cast<uint32_t>(b) : next++;
            append_utf8(enc[static_cast<size_t>(b)], cpt);
            dec[cpt] = b;
        }
    }
};
const ByteMap &byte_map() {
    static const ByteMap m;
    return m;
}
} // namespace

const std::string &byte_to_unicode(uint8_t b) { return byte_map().enc[b]; }

int unicode_to_byte(uint32_t cpt) { return cpt < 512 ? byte_map().dec[cpt] : -1; }

} // namespace lctx::unicode
