/* Table-driven CRC-32/IEEE, one table lookup per byte. */
#include "crc32.h"

/* The reflected form of the IEEE 802.3 polynomial 0x04C11DB7. */
#define CRC32_POLY_REFLECTED 0xEDB88320u

static uint32_t crc_table[256];
static int crc_table_ready = 0;

/* Built on first use rather than stored as a literal table: 1 KB of RAM on the smallest target,
 * and no hand-copied constants to get wrong. */
static void crc32_build_table(void)
{
    uint32_t i;
    for (i = 0; i < 256u; i++) {
        uint32_t c = i;
        int bit;
        for (bit = 0; bit < 8; bit++) {
            c = (c & 1u) ? (c >> 1) ^ CRC32_POLY_REFLECTED : c >> 1;
        }
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

uint32_t crc32_update(uint32_t crc, const uint8_t *data, size_t n)
{
    uint32_t c = crc ^ 0xFFFFFFFFu;
    size_t i;
    if (!crc_table_ready) {
        crc32_build_table();
    }
    for (i = 0; i < n; i++) {
        c = crc_table[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}
