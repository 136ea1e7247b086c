// Tessera's CUDA-on-the-host header: runs generated CUDA C kernels on the CPU for tests.
//
// Every thread of a block is a fiber (ucontext) of one OS thread, and __syncthreads() is a
// real barrier: a fiber that reaches it yields, and the block's fibers resume only when all
// of them have reached it. Between barriers a fiber runs alone, to its next barrier, in thread
// order, so a kernel that reads shared memory another thread writes without a barrier between
// them reads what was there before (a wrong result, deterministically, as a race gives on a
// GPU), and a barrier that some threads of a block skip is reported and aborts. Blocks are
// spread over a few OS threads, each running one block's fibers at a time, with __shared__
// arrays per OS thread (static thread_local), so they belong to one block at a time.
//
// Built with -DTESSERA_HOST_OS_THREADS (the ThreadSanitizer build) every thread of a block is
// an OS thread instead and __syncthreads() a std::barrier, so that races are reported.
// One launch at a time per process: the emulation is for checking code, not for speed.
#pragma once
#define TESSERA_CUDA_HOST 1

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <math.h>
#ifndef TESSERA_HOST_OS_THREADS
#include <ucontext.h>
#endif

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

// CUDA's vector types for the kernels' vector loads and stores (the GPU's are 8- and
// 16-byte aligned; these are not, so an access the code generator wrongly thinks aligned is
// not caught here, only on the GPU).
#define TESSERA_HOST_VECTOR(T, N)                                       \
  struct N##2 { T x, y; };                                              \
  struct N##4 { T x, y, z, w; };                                        \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }              \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
TESSERA_HOST_VECTOR(float, float)
TESSERA_HOST_VECTOR(int, int)
TESSERA_HOST_VECTOR(unsigned, uint)
#undef TESSERA_HOST_VECTOR

namespace tessera_host {
inline thread_local dim3 thread_index, block_index;
inline dim3 grid_dim, block_dim;

inline dim3 unflatten(unsigned i, dim3 d) {
  return dim3(i % d.x, (i / d.x) % d.y, i / (d.x * d.y));
}

#ifdef TESSERA_HOST_OS_THREADS
inline thread_local std::barrier<>* block_barrier = nullptr;

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
      thread_index = unflatten(t, block);
      block_barrier = &bar;
      for (unsigned b = 0; b < nb; ++b) {
        block_index = unflatten(b, grid);
        fn();
        bar.arrive_and_wait();  // the block's shared memory is free for the next block
      }
    });
  }
  for (auto& th : threads) th.join();
}

inline void syncthreads() { block_barrier->arrive_and_wait(); }
#else
// The fibers of the block an OS thread is running.
struct Block {
  ucontext_t scheduler;
  std::vector<ucontext_t> fibers;
  std::vector<char*> stacks;
  std::vector<unsigned char> state;  // 0 running, 1 at a barrier, 2 finished
  unsigned current = 0;
};
inline thread_local Block* block_now = nullptr;
inline constexpr size_t kFiberStack = 256 * 1024;

template <typename F>
struct FiberStart {
  static void entry(unsigned hi, unsigned lo) {
    F* fn = reinterpret_cast<F*>((static_cast<uintptr_t>(hi) << 32) | lo);
    (*fn)();
    Block* blk = block_now;
    blk->state[blk->current] = 2;
    swapcontext(&blk->fibers[blk->current], &blk->scheduler);
  }
};

template <typename F>
void run_block(Block& blk, unsigned nt, F& fn) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(&fn);
  for (unsigned t = 0; t < nt; ++t) {
    getcontext(&blk.fibers[t]);
    blk.fibers[t].uc_stack.ss_sp = blk.stacks[t];
    blk.fibers[t].uc_stack.ss_size = kFiberStack;
    blk.fibers[t].uc_link = nullptr;
    makecontext(&blk.fibers[t], reinterpret_cast<void (*)()>(&FiberStart<F>::entry), 2,
                static_cast<unsigned>(p >> 32), static_cast<unsigned>(p & 0xffffffffu));
    blk.state[t] = 0;
  }
  for (;;) {  // one phase: every fiber runs to its next barrier or its end
    unsigned waiting = 0, finished = 0;
    for (unsigned t = 0; t < nt; ++t) {
      if (blk.state[t] == 2) { ++finished; continue; }
      blk.state[t] = 0;
      blk.current = t;
      thread_index = unflatten(t, block_dim);
      swapcontext(&blk.scheduler, &blk.fibers[t]);
      if (blk.state[t] == 2) ++finished; else ++waiting;
    }
    if (finished == nt) return;
    if (waiting != nt && finished) {
      std::fprintf(stderr, "tessera cuda host: block (%u,%u,%u): %u of %u threads reached a "
                   "__syncthreads() the others skipped\n", block_index.x, block_index.y,
                   block_index.z, waiting, nt);
      std::abort();
    }
  }
}

// Run kernel body `fn` (a call of the __global__ function) over `grid` x `block` threads.
template <typename F>
void launch(dim3 grid, dim3 block, F fn) {
  const unsigned nt = block.x * block.y * block.z;
  const unsigned nb = grid.x * grid.y * grid.z;
  grid_dim = grid;
  block_dim = block;
  unsigned workers = std::thread::hardware_concurrency();
  workers = workers < 1 ? 1 : workers > 4 ? 4 : workers;
  if (workers > nb) workers = nb ? nb : 1;
  std::atomic<unsigned> next{0};
  auto work = [&] {
    Block blk;
    blk.fibers.resize(nt);
    blk.state.resize(nt);
    for (unsigned t = 0; t < nt; ++t) {
      blk.stacks.push_back(static_cast<char*>(std::malloc(kFiberStack)));
    }
    block_now = &blk;
    for (unsigned b; (b = next.fetch_add(1)) < nb;) {
      block_index = unflatten(b, grid);
      run_block(blk, nt, fn);
    }
    block_now = nullptr;
    for (char* s : blk.stacks) std::free(s);
  };
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) threads.emplace_back(work);
  for (auto& th : threads) th.join();
}

inline void syncthreads() {
  Block* blk = block_now;
  blk->state[blk->current] = 1;
  swapcontext(&blk->fibers[blk->current], &blk->scheduler);
}
#endif
}  // namespace tessera_host

#define threadIdx (tessera_host::thread_index)
#define blockIdx (tessera_host::block_index)
#define blockDim (tessera_host::block_dim)
#define gridDim (tessera_host::grid_dim)
#define __global__
#define __device__
#define __forceinline__ inline
#ifdef TESSERA_HOST_OS_THREADS
#define __shared__ static
#else
#define __shared__ static thread_local
#endif
#define __launch_bounds__(...)
#define __restrict__ __restrict

inline void __syncthreads() { tessera_host::syncthreads(); }
inline float __int_as_float(int32_t bits) { float f; std::memcpy(&f, &bits, 4); return f; }
inline double __longlong_as_double(long long bits) {
  double d; std::memcpy(&d, &bits, 8); return d;
}
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
