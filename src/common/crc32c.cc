#include "common/crc32c.h"

#include <isa-l/crc.h>

namespace kvpool {
namespace {

// Polynomials over GF(2) modulo the CRC32C polynomial, in the reflected bit order the CRC
// uses (bit 31 is x^0).
constexpr uint32_t kPoly = 0x82F63B78u;

uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;  // b * x
  }
  return product;
}

// x^(8 n) mod P: the operator "append n zero bytes" on a CRC.
uint32_t ZeroBytesOperator(uint64_t n) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t power = 1u << 23;   // x^8
  for (; n != 0; n >>= 1) {
    if (n & 1) result = MultModP(power, result);
    power = MultModP(power, power);
  }
  return result;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  // ISA-L's crc32_iscsi works on the un-inverted register; the standard CRC32C inverts
  // on entry and exit.
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(n),
                      ~crc);
}

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // The pre- and post-inversion of the standard CRC cancel between the two parts.
  return MultModP(ZeroBytesOperator(len_b), crc_a) ^ crc_b;
}

}  // namespace kvpool
