// The simulated DRAM lives on the host (a numpy array); the RTL reaches it through DPI-C
// functions implemented in tsim_harness.cpp. Addresses are byte addresses; an access outside
// the array reads 0, is ignored on write, and is reported to Python after the run.
`ifndef VTA_DPI_SVH
`define VTA_DPI_SVH
import "DPI-C" function byte unsigned vta_dram_read8(input longint unsigned addr);
import "DPI-C" function void vta_dram_write8(input longint unsigned addr, input byte unsigned data);
`endif
