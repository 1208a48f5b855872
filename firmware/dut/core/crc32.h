/* CRC-32/IEEE (poly 0x04C11DB7 reflected, init and final XOR 0xFFFFFFFF): the checksum of the
 * DUT protocol's binary download, identical to zlib's crc32() and Python's zlib.crc32(). */
#ifndef NEUROBENCH_CRC32_H
#define NEUROBENCH_CRC32_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Continue a CRC over `n` more bytes; start with crc = 0. Chaining gives the CRC of the
 * concatenation, as with zlib: crc32_update(crc32_update(0, a), b) == CRC(a + b). */
uint32_t crc32_update(uint32_t crc, const uint8_t *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif
