// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected; the checksum of
// iSCSI, ext4 and LevelDB): what Flashroll writes into its own binary files
// to detect corrupted or torn data on reading.
//
// On x86-64 CPUs with SSE4.2 it runs on the crc32 instruction (about 8 bytes
// per cycle-latency step, several GB/s), so checking a multi-hundred-megabyte
// KV file costs milliseconds; elsewhere on a byte table.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashroll {

// The CRC-32C of `n` bytes at `data`, continuing from `crc` (the result over
// the bytes before; 0 to start): Crc32c(b, nb, Crc32c(a, na)) is the CRC of
// a followed by b. Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The same on the portable table whatever the CPU (for tests that compare
// the two paths).
uint32_t TEST_Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace flashroll
