// CRC-32C (Castagnoli polynomial, reflected, as iSCSI and ext4 use it): the checksum of every
// checkpoint section and journal record. SSE4.2's crc32 instruction where the CPU has it (about
// 8 bytes per 3 cycles), else an 8-table software path with the same results.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streamknn::detail {

/// CRC-32C of data, continuing from crc (the CRC of the bytes before): crc32c("123456789") is
/// 0xE3069283, and crc32c(b, crc32c(a)) == crc32c(a followed by b).
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

}  // namespace streamknn::detail
