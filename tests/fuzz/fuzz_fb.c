/* libFuzzer target: the FlatBuffers verifier and decoder (schema/pt_fb.c) on
 * any bytes, as a size-prefixed Message. */
#include <stddef.h>
#include <stdint.h>

#include "schema/pt_fb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_fb_msg_t m;
    char why[128];
    (void)pt_fb_parse(data, size, &m, why, sizeof why);
    (void)pt_fb_message_size(data, size);
    return 0;
}
