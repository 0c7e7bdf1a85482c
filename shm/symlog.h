/*
 * pt_symlog: the segment's append-only symbol log.
 *
 * Each record is a size-prefixed FlatBuffer Message{Symbol} (built with
 * schema/pt_fb.h), padded to 8 bytes. Producer threads append under an
 * in-process mutex; after copying a record the appender release-stores
 * header.symlog_published (bytes). The id is handed out before the record is
 * written and is given to the caller only after it is published, so an id
 * never reaches a ring before its name reaches the log.
 *
 * The reader reads from its cursor up to an acquire load of symlog_published,
 * treating every byte as untrusted (each record is verified with
 * pt_fb_parse before it is used).
 */
#ifndef PT_SHM_SYMLOG_H
#define PT_SHM_SYMLOG_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Producer: append a symbol, return its id (1..) in *id_out. Thread-safe.
 * Strings may be NULL; they are cut to fit PT_MAX_SYMBOL_RECORD_BYTES.
 * -ENOSPC when the log is full (header.symbols_dropped counts it; the caller
 * then uses id 0, which readers show as "<unknown>"). */
int pt_symlog_append(pt_segment_t *seg, uint32_t kind, const char *name, const char *file,
                     uint32_t line, uint32_t *id_out);

/* The same with the Symbol's profile_name (the name cProfile gives the function;
 * NULL = absent, as pt_symlog_append writes it). Strings are cut so that the
 * three fit together, the longest first. */
int pt_symlog_append_named(pt_segment_t *seg, uint32_t kind, const char *name, const char *file,
                           uint32_t line, const char *profile_name, uint32_t *id_out);

/* Reader: visit records in [*cursor, published) and advance *cursor. The
 * callback gets one size-prefixed Message (verified) and its length; a non-zero
 * return stops the walk and is returned. -EBADMSG (with the offset in err) if a
 * record is malformed; *cursor then points at it. */
/* Registers the symbol lock's fork handlers now (once; an append does it too). A
 * caller that holds a lock of its own around an append registers its own handlers
 * after this one: prepare handlers run in reverse order of registration, so its
 * lock is then taken before the symbol lock, in the order its appends take them. */
void pt_symlog_register_atfork(void);

typedef int (*pt_symlog_visit_fn)(void *ctx, const uint8_t *msg, size_t len);
int pt_symlog_read(const pt_segment_t *seg, uint64_t *cursor, uint64_t published,
                   pt_symlog_visit_fn fn, void *ctx, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* PT_SHM_SYMLOG_H */
