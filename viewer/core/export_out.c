/*
 * pt_export's output: a buffer in front of the output file (opts.max_bytes
 * enforced here), JSON string escaping and UTF-8 cleaning for every format.
 * The hot path (ob_put, numbers) is static inline in export_internal.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "export_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* Write all n bytes at offset off, or at the file position (a pipe too)
 * when off < 0. 0 or -errno. */
int pt_ex_write_all(int fd, const char *p, size_t n, int64_t off)
{
    while (n) {
        ssize_t w = off < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        if (off >= 0)
            off += w;
    }
    return 0;
}

/* The size the user allowed (opts.max_bytes): nothing past it is written. */
static int ob_over(obuf_t *o, size_t n)
{
    if (!o->max_bytes || o->written + n <= o->max_bytes)
        return 0;
    o->limited = 1;
    o->err = -EFBIG;
    return 1;
}

void pt_ob_flush(obuf_t *o)
{
    if (o->err || !o->len || ob_over(o, o->len)) {
        o->len = 0; /* after an error the rest is dropped, never written past the buffer */
        return;
    }
    o->err = pt_ex_write_all(o->fd, o->buf, o->len, -1);
    o->written += o->len;
    o->len = 0;
}

void pt_ob_put_slow(obuf_t *o, const void *p, size_t n)
{
    pt_ob_flush(o);
    if (n > o->cap) {
        if (!o->err && !ob_over(o, n))
            o->err = pt_ex_write_all(o->fd, p, n, -1);
        o->written += n;
        return;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

size_t pt_utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void pt_ob_json(obuf_t *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    ob_putc(o, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            size_t j = i;
            while (j < n && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\')
                j++;
            ob_put(o, p + i, j - i);
            i = j;
            continue;
        }
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            ob_put(o, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            ob_put(o, e, 6);
            i++;
        } else {
            size_t l = pt_utf8_len(p + i, n - i);
            if (l) {
                ob_put(o, p + i, l);
                i += l;
            } else {
                ob_puts(o, "\\ufffd");
                i++;
            }
        }
    }
    ob_putc(o, '"');
}

char *pt_utf8_clean(const char *s, size_t *out_len)
{
    size_t n = strlen(s);
    char *d = malloc(n * 3 + 1);
    if (!d)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = pt_utf8_len((const unsigned char *)s + i, n - i);
        if (l) {
            memcpy(d + k, s + i, l);
            k += l;
            i += l;
        } else {
            memcpy(d + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    d[k] = 0;
    *out_len = k;
    return d;
}

char *pt_ex_dup_str(pt_fb_str_t s)
{
    size_t n = s.ptr ? s.len : 0;
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    if (n)
        memcpy(d, s.ptr, n);
    d[n] = 0;
    /* a NUL inside a name ends it: names are C strings from here on */
    return d;
}

char *pt_ex_dup_c(const char *s) { return pt_ex_dup_str((pt_fb_str_t){s, (uint32_t)strlen(s)}); }
