// Measured ceilings of the card a benchmark runs on (see bandwidth.cu).
#pragma once

#include <string>

namespace bench {

struct Ceilings {
  std::string device;
  int sms = 0;
  double read_gbps = 0;    ///< streaming device-memory read bandwidth, GB/s
  double fp32_tflops = 0;  ///< FP32 FMA rate, TFLOP/s (2 flops per FMA)
};

Ceilings measure_ceilings();

}  // namespace bench
