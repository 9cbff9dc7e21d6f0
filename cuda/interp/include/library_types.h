// Interpret mode (cuda/interp/): the data types of CUDA's libraries, with the real values.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
};
typedef cudaDataType_t cudaDataType;
