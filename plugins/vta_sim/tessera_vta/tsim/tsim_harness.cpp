// Glue between Python and the Verilated VTA core (compiled into the pyverilator library).
//
// - The simulated DRAM is a host buffer (a numpy array) that the RTL reads and writes through
//   the DPI-C functions vta_dram_read8 / vta_dram_write8.
// - vta_harness_run clocks the core in C++ until FINISH, a deadlock or a cycle limit: ticking
//   from Python costs microseconds a cycle, from here nanoseconds.
#include <cstdint>

#include "Vvta_top.h"
#include "Vvta_top__Dpi.h"

namespace {
uint8_t* dram = nullptr;
uint64_t dram_size = 0;
uint64_t bad_accesses = 0;
uint64_t first_bad_address = 0;

void record_bad(uint64_t addr) {
  if (bad_accesses++ == 0) first_bad_address = addr;
}

void tick(Vvta_top* top) {
  top->clk = 0;
  top->eval();
  top->clk = 1;
  top->eval();
}
}  // namespace

extern "C" {

unsigned char vta_dram_read8(unsigned long long addr) {
  if (addr >= dram_size) {
    record_bad(addr);
    return 0;
  }
  return dram[addr];
}

void vta_dram_write8(unsigned long long addr, unsigned char data) {
  if (addr >= dram_size) {
    record_bad(addr);
    return;
  }
  dram[addr] = data;
}

// Point the DPI functions at a host buffer of `size` bytes and clear the error record.
void vta_harness_set_dram(uint8_t* buffer, uint64_t size) {
  dram = buffer;
  dram_size = size;
  bad_accesses = 0;
  first_bad_address = 0;
}

uint64_t vta_harness_bad_accesses(uint64_t* first_address) {
  *first_address = first_bad_address;
  return bad_accesses;
}

// Reset the core, launch the stream, and clock until done, `stall_limit` cycles in a row with
// nothing moving, or `max_cycles`. Returns 0 when done, 1 on a stall, 2 at the cycle limit.
int vta_harness_run(Vvta_top* top, uint32_t insn_addr, uint32_t insn_count, uint64_t max_cycles,
                    uint32_t stall_limit) {
  top->rst = 1;
  top->launch = 0;
  tick(top);
  tick(top);
  top->rst = 0;
  top->insn_addr = insn_addr;
  top->insn_count = insn_count;
  top->launch = 1;
  tick(top);
  top->launch = 0;
  uint32_t stalled_for = 0;
  for (uint64_t n = 0; n < max_cycles; ++n) {
    if (top->done) return 0;
    stalled_for = top->stalled ? stalled_for + 1 : 0;
    if (stalled_for >= stall_limit) return 1;
    tick(top);
  }
  return top->done ? 0 : 2;
}
}
