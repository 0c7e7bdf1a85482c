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
        int printable = len && cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0) && w >= 0 &&
                        (cp < 0x80 || CRT_utf8);
        if (printable) {
            if (o + (size_t)len + 1 > outcap)
                break;
            memcpy(out + o, s, (size_t)len);
            o += (size_t)len;
            width += w;
            s += len;
        } else {
            /* escape the bytes of this (invalid or unprintable) sequence */
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
        } else if (cp < 0x20 || cp == 0x7f) {
            snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            piece = tmp;
            plen = 6;
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
