// Tessera's CUDA-on-the-host header: runs generated CUDA C kernels on the CPU for tests.
//
// Every thread of a block is an OS thread, so __syncthreads() is a real barrier
// (std::barrier): a kernel that reads shared memory another thread wrote without a barrier
// between them computes a wrong result here, as on a GPU (and ThreadSanitizer reports the
// race). Blocks run one after another on the same threads, with a barrier between blocks, so
// __shared__ arrays (static storage here) belong to one block at a time. One launch at a time
// per process: the emulation is for checking code, not for speed.
#pragma once
#define TESSERA_CUDA_HOST 1

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#include <math.h>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace tessera_host {
inline thread_local dim3 thread_index, block_index;
inline thread_local std::barrier<>* block_barrier = nullptr;
inline dim3 grid_dim, block_dim;

// Run kernel body `fn` (a call of the __global__ function) over `grid` x `block` threads.
template <typename F>
void launch(dim3 grid, dim3 block, F fn) {
  const unsigned nt = block.x * block.y * block.z;
  const unsigned nb = grid.x * grid.y * grid.z;
  grid_dim = grid;
  block_dim = block;
  std::barrier<> bar(nt);
  std::vector<std::thread> threads;
  threads.reserve(nt);
  for (unsigned t = 0; t < nt; ++t) {
    threads.emplace_back([&, t] {
      thread_index = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      block_barrier = &bar;
      for (unsigned b = 0; b < nb; ++b) {
        block_index = dim3(b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y));
        fn();
        bar.arrive_and_wait();  // the block's shared memory is free for the next block
      }
    });
  }
  for (auto& th : threads) th.join();
}
}  // namespace tessera_host

#define threadIdx (tessera_host::thread_index)
#define blockIdx (tessera_host::block_index)
#define blockDim (tessera_host::block_dim)
#define gridDim (tessera_host::grid_dim)
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

inline void __syncthreads() { tessera_host::block_barrier->arrive_and_wait(); }
inline float __int_as_float(int32_t bits) { float f; std::memcpy(&f, &bits, 4); return f; }
inline double __longlong_as_double(long long bits) {
  double d; std::memcpy(&d, &bits, 8); return d;
}
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
