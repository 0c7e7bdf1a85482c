/*
 * Text: names from a segment are untrusted bytes. Text_escape turns them into
 * something safe to show: valid printable UTF-8 is kept (only in a UTF-8
 * locale); ASCII controls, DEL and invalid bytes become "\xNN"; the other
 * characters of the Unicode categories Cc, Cf, Zl and Zp (C1 controls, bidi
 * overrides such as U+202E, zero-width characters, U+2028, U+2029) become
 * "\u202e" (or "\U000e0001"), as Python writes them. Text_fit cuts to a
 * display width on character boundaries (never in the middle of a UTF-8
 * sequence) and marks the cut with an ellipsis.
 */
#ifndef PT_TOP_TEXT_H
#define PT_TOP_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* 1 if code point cp is never printed raw (Cc, Cf, Zl, Zp). */
int Text_isHidden(uint32_t cp);

/* Escape `in` into out (always NUL-terminated). Returns the display width. */
int Text_escape(const char *in, char *out, size_t outcap);

/* Display width of an escaped string. */
int Text_width(const char *s);

/* Fit an escaped string into `width` columns: copied whole if it fits, else
 * cut with an ellipsis at the end (keep_tail = 0) or at the start
 * (keep_tail = 1). Returns the width used. */
int Text_fit(const char *s, int width, int keep_tail, char *out, size_t outcap);

/* The last component of a qualified name ("A.<locals>.f" -> "f"); points into s. */
const char *Text_lastComponent(const char *s);

/* "1.23 s", "456 ms", "12.3 µs"-style duration into out (ASCII "us" when the
 * locale is not UTF-8). */
void Text_duration(unsigned long long ns, char *out, size_t outcap);

/* "12.3M"-style count. */
void Text_count(double v, char *out, size_t outcap);

/* JSON string body (without quotes): escaped as JSON, the characters
 * Text_isHidden names as \uXXXX (the value is the same, the raw text safe to
 * print); invalid UTF-8 bytes as the text \xNN (so the output is always valid
 * UTF-8 JSON). */
void Text_json(const char *in, char *out, size_t outcap);

#endif
