/*
 * pytrace-top's escaping of untrusted names (viewer/top/text.c): printable
 * UTF-8 kept, the Unicode categories Cc, Cf, Zl and Zp as \uXXXX (bidi
 * overrides and isolates, zero-width characters, line and paragraph
 * separators, tags), ASCII controls and every invalid sequence (truncated,
 * overlong, surrogate, past U+10FFFF) as \xNN bytes; JSON the same characters
 * as JSON escapes. Every code point of those categories (from Python's
 * unicodedata, Unicode 14 and the format controls Unicode 15 added) is checked
 * against Text_isHidden, and their neighbours are not hidden.
 */
#include <locale.h>
#include <string.h>

#include "tests/unit/check.h"
#include "viewer/top/text.h"

int CRT_utf8 = 1;        /* crt.c's, without curses */
volatile int CRT_quit;

static void check_escape(const char *in, const char *want)
{
    char out[256];
    int w = Text_escape(in, out, sizeof out);
    CHECKF(!strcmp(out, want), "Text_escape gave \"%s\", expected \"%s\"", out, want);
    CHECK_EQ(w, Text_width(out));
}

static void check_json(const char *in, const char *want)
{
    char out[256];
    Text_json(in, out, sizeof out);
    CHECKF(!strcmp(out, want), "Text_json gave \"%s\", expected \"%s\"", out, want);
}

static const struct { unsigned lo, hi; } hidden[] = {
    {0x0, 0x1F}, {0x7F, 0x9F}, {0xAD, 0xAD}, {0x600, 0x605}, {0x61C, 0x61C}, {0x6DD, 0x6DD},
    {0x70F, 0x70F}, {0x890, 0x891}, {0x8E2, 0x8E2}, {0x180E, 0x180E}, {0x200B, 0x200F},
    {0x2028, 0x202E}, {0x2060, 0x2064}, {0x2066, 0x206F}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB},
    {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3},
    {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F},
};

static void test_categories(void)
{
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++) {
        for (unsigned cp = hidden[i].lo; cp <= hidden[i].hi; cp++)
            CHECKF(Text_isHidden(cp), "U+%04X is Cc/Cf/Zl/Zp", cp);
        if (hidden[i].lo > 0 && (i == 0 || hidden[i - 1].hi + 1 < hidden[i].lo))
            CHECKF(!Text_isHidden(hidden[i].lo - 1), "U+%04X is printable", hidden[i].lo - 1);
        CHECKF(!Text_isHidden(hidden[i].hi + 1) || (i + 1 < sizeof hidden / sizeof hidden[0] &&
                                                    hidden[i + 1].lo == hidden[i].hi + 1),
               "U+%04X is printable", hidden[i].hi + 1);
    }
    CHECK(!Text_isHidden('a'));
    CHECK(!Text_isHidden(0xE9));    /* é */
    CHECK(!Text_isHidden(0x4E2D));  /* 中 */
    CHECK(!Text_isHidden(0x1F600)); /* an emoji */
}

static void test_escape(void)
{
    check_escape("plain_name", "plain_name");
    check_escape("caf\xc3\xa9 \xe4\xb8\xad", "caf\xc3\xa9 \xe4\xb8\xad");
    check_escape("ev\xe2\x80\xaeil", "ev\\u202eil");           /* U+202E right-to-left override */
    check_escape("a\xe2\x80\xa8" "b", "a\\u2028b");             /* U+2028 line separator */
    check_escape("a\xe2\x80\xa9" "b", "a\\u2029b");             /* U+2029 paragraph separator */
    check_escape("\xe2\x81\xa6x\xe2\x81\xa9", "\\u2066x\\u2069"); /* isolates */
    check_escape("z\xe2\x80\x8bw", "z\\u200bw");                /* zero width space */
    check_escape("\xef\xbb\xbfx", "\\ufeffx");                  /* BOM */
    check_escape("\xc2\x85", "\\u0085");                        /* C1 next line */
    check_escape("\xc2\xad", "\\u00ad");                        /* soft hyphen */
    check_escape("\xf3\xa0\x80\x81", "\\U000e0001");            /* language tag */
    check_escape("a\nb\tc\x1b[31m\x7f", "a\\x0Ab\\x09c\\x1B[31m\\x7F");
    /* invalid UTF-8: the bytes */
    check_escape("\xff", "\\xFF");
    check_escape("\xe2\x80", "\\xE2\\x80");                     /* truncated */
    check_escape("\xc0\xaf", "\\xC0\\xAF");                     /* overlong '/' */
    check_escape("\xed\xa0\x80", "\\xED\\xA0\\x80");            /* a surrogate */
    check_escape("\xf4\x90\x80\x80", "\\xF4\\x90\\x80\\x80");   /* past U+10FFFF */
    /* cut short by the output's room: never half an escape */
    char small[8];
    Text_escape("\xe2\x80\xae\xe2\x80\xae", small, sizeof small);
    CHECKF(!strcmp(small, "\\u202e"), "gave \"%s\"", small);
}

static void test_json(void)
{
    check_json("ev\xe2\x80\xaeil", "ev\\u202eil");
    check_json("a\xe2\x80\xa8" "b\n", "a\\u2028b\\u000a");
    check_json("\xf3\xa0\x80\x81", "\\udb40\\udc01");
    check_json("q\"\\", "q\\\"\\\\");
    check_json("caf\xc3\xa9", "caf\xc3\xa9");
}

int main(void)
{
    setlocale(LC_ALL, "C.UTF-8"); /* wcwidth of the printable ones */
    test_categories();
    test_escape();
    test_json();
    return failures != 0;
}
