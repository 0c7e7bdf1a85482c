#include "text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <wchar.h>

#include "crt.h"

/* Decode one UTF-8 sequence; returns its length (1..4) and the code point, or
 * 0 for an invalid / overlong / surrogate / truncated sequence. */
static int utf8_decode(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xe0) == 0xc0) { len = 2; v = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { len = 3; v = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0; /* also stops at the NUL terminator */
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

static int cp_width(uint32_t cp)
{
    int w = wcwidth((wchar_t)cp);
    return w < 0 ? -1 : w;
}

/* Code points never printed raw, whatever wcwidth says: the Unicode categories
 * Cc (C0, DEL, C1 controls), Cf (format: bidi overrides and isolates such as
 * U+202E, zero-width characters, U+FEFF, tags), Zl (U+2028) and Zp (U+2029).
 * A bidi override reorders what follows it on the terminal and a line
 * separator breaks the line, so a name could hide or fake what the screen
 * says. Ranges from Python's unicodedata (Unicode 14), plus 0x13439..0x1343F
 * (format controls added in Unicode 15). */
static const struct { uint32_t lo, hi; } Text_hidden[] = {
    {0x0, 0x1F}, {0x7F, 0x9F}, {0xAD, 0xAD}, {0x600, 0x605}, {0x61C, 0x61C}, {0x6DD, 0x6DD},
    {0x70F, 0x70F}, {0x890, 0x891}, {0x8E2, 0x8E2}, {0x180E, 0x180E}, {0x200B, 0x200F},
    {0x2028, 0x202E}, {0x2060, 0x2064}, {0x2066, 0x206F}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB},
    {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3},
    {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F},
};

int Text_isHidden(uint32_t cp)
{
    size_t lo = 0, hi = sizeof Text_hidden / sizeof Text_hidden[0];
    while (lo < hi) { /* binary search: the ranges are sorted and disjoint */
        size_t mid = (lo + hi) / 2;
        if (cp < Text_hidden[mid].lo)
            hi = mid;
        else if (cp > Text_hidden[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int Text_escape(const char *in, char *out, size_t outcap)
{
    const unsigned char *s = (const unsigned char *)(in ? in : "");
    size_t o = 0;
    int width = 0;
    if (!outcap)
        return 0;
    while (*s) {
        uint32_t cp;
        int len = utf8_decode(s, &cp);
        int w = len ? cp_width(cp) : -1;
        int hidden = len && (Text_isHidden(cp) || w < 0);
        int printable = len && !hidden && (cp < 0x80 || CRT_utf8);
        char esc[16];
        if (printable) {
            if (o + (size_t)len + 1 > outcap)
                break;
            memcpy(out + o, s, (size_t)len);
            o += (size_t)len;
            width += w;
            s += len;
        } else if (hidden && cp >= 0x80) {
            /* a valid character that is not to be printed: its code point, as Python writes it */
            int n = snprintf(esc, sizeof esc, cp > 0xffff ? "\\U%08x" : "\\u%04x", (unsigned)cp);
            if (o + (size_t)n + 1 > outcap)
                break;
            memcpy(out + o, esc, (size_t)n);
            o += (size_t)n;
            width += n;
            s += len;
        } else {
            /* the bytes of this sequence: invalid UTF-8, an ASCII control, or a
             * character the locale cannot show */
            int n = len ? len : 1;
            for (int i = 0; i < n; i++) {
                if (o + 5 > outcap)
                    goto done;
                snprintf(out + o, 5, "\\x%02X", s[i]);
                o += 4;
                width += 4;
            }
            s += n;
        }
    }
done:
    out[o] = 0;
    return width;
}

/* The character at s: returns its bytes and sets *cols to its columns; an
 * invalid byte is one byte of one column, an unprintable character one
 * column. */
static int char_cols(const unsigned char *s, int *cols)
{
    uint32_t cp;
    int len = utf8_decode(s, &cp);
    int w = len ? cp_width(cp) : 1;
    *cols = w < 0 ? 1 : w;
    return len ? len : 1;
}

int Text_width(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    int width = 0;
    while (*s) {
        int w;
        s += char_cols(s, &w);
        width += w;
    }
    return width;
}

int Text_fit(const char *str, int width, int keep_tail, char *out, size_t outcap)
{
    if (!outcap)
        return 0;
    out[0] = 0;
    if (width <= 0)
        return 0;
    int total = Text_width(str);
    size_t slen = strlen(str);
    if (total <= width) {
        size_t n = slen < outcap - 1 ? slen : outcap - 1;
        memcpy(out, str, n);
        out[n] = 0;
        return total;
    }
    const char *ell = CRT_utf8 ? "\xe2\x80\xa6" : "~";
    size_t ell_len = strlen(ell);
    int budget = width - 1;
    const unsigned char *s = (const unsigned char *)str;
    size_t o = 0;
    int used = 0;
    if (!keep_tail) {
        size_t i = 0;
        while (i < slen) {
            int w;
            int len = char_cols(s + i, &w);
            if (used + w > budget || o + (size_t)len + ell_len + 1 > outcap)
                break;
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len;
            used += w;
            i += (size_t)len;
        }
        memcpy(out + o, ell, ell_len);
        o += ell_len;
    } else {
        /* walk forward and find the first character boundary from which the
         * rest fits into budget */
        size_t i = 0;
        int rest = total;
        while (i < slen && rest > budget) {
            int w;
            int len = char_cols(s + i, &w);
            rest -= w;
            i += (size_t)len;
        }
        memcpy(out, ell, ell_len);
        o = ell_len;
        size_t n = slen - i;
        if (o + n + 1 > outcap)
            n = outcap - 1 - o;
        memcpy(out + o, s + i, n);
        o += n;
        used = rest;
    }
    out[o] = 0;
    return used + 1;
}

const char *Text_lastComponent(const char *s)
{
    /* a dot inside <...> (e.g. "<unknown #1.2>") does not split */
    const char *last = s;
    int angle = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '<')
            angle++;
        else if (*p == '>' && angle)
            angle--;
        else if (*p == '.' && !angle && p[1])
            last = p + 1;
    }
    return last;
}

void Text_duration(unsigned long long ns, char *out, size_t outcap)
{
    double v = (double)ns;
    if (ns >= 100000000000ull)
        snprintf(out, outcap, "%.0fs", v / 1e9);
    else if (ns >= 1000000000ull)
        snprintf(out, outcap, "%.2fs", v / 1e9);
    else if (ns >= 1000000ull)
        snprintf(out, outcap, "%.1fms", v / 1e6);
    else if (ns >= 1000ull)
        snprintf(out, outcap, "%.1f%s", v / 1e3, CRT_utf8 ? "\xc2\xb5s" : "us");
    else
        snprintf(out, outcap, "%lluns", ns);
}

void Text_count(double v, char *out, size_t outcap)
{
    if (v >= 1e9)
        snprintf(out, outcap, "%.1fG", v / 1e9);
    else if (v >= 1e6)
        snprintf(out, outcap, "%.1fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(out, outcap, "%.1fk", v / 1e3);
    else
        snprintf(out, outcap, "%.0f", v);
}

void Text_json(const char *in, char *out, size_t outcap)
{
    const unsigned char *s = (const unsigned char *)(in ? in : "");
    size_t o = 0;
    if (!outcap)
        return;
    while (*s) {
        uint32_t cp;
        int len = utf8_decode(s, &cp);
        char tmp[16];
        const char *piece;
        size_t plen;
        if (!len) {
            snprintf(tmp, sizeof tmp, "\\\\x%02X", *s);
            piece = tmp;
            plen = strlen(tmp);
            len = 1;
        } else if (cp == '"' || cp == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)cp;
            tmp[2] = 0;
            piece = tmp;
            plen = 2;
        } else if (Text_isHidden(cp)) {
            if (cp > 0xffff) /* a surrogate pair, as JSON spells a code point past the BMP */
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
                         (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
            else
                snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            piece = tmp;
            plen = strlen(tmp);
        } else {
            piece = (const char *)s;
            plen = (size_t)len;
        }
        if (o + plen + 1 > outcap)
            break;
        memcpy(out + o, piece, plen);
        o += plen;
        s += len;
    }
    out[o] = 0;
}
