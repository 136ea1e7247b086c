`include "vta_config.svh"
`include "vta_dpi.svh"

// Fetch: reads insn_count 128-bit instructions from DRAM at byte address insn_addr, in order,
// and dispatches each to the queue of the module that runs it:
//   LOAD of INP or WGT -> load; LOAD of UOP or ACC, GEMM, ALU, FINISH -> compute;
//   STORE -> store.
// A full queue stalls fetch, so a stream must never need a later instruction to unblock an
// earlier one (every pop's token is pushed by an instruction earlier in the stream).
module vta_fetch (
    input  logic         clk,
    input  logic         rst,
    input  logic         launch,
    input  logic [ 31:0] insn_addr,
    input  logic [ 31:0] insn_count,
    output logic [127:0] insn,
    output logic         push_load,
    output logic         push_compute,
    output logic         push_store,
    input  logic         load_full,
    input  logic         compute_full,
    input  logic         store_full,
    output logic         active,
    output logic [ 31:0] fetched
);
  localparam int BUS = `VTA_BUS_BYTES;
  localparam int BEATS = (16 + BUS - 1) / BUS;
  localparam logic [2:0] OP_LOAD = 3'd0, OP_STORE = 3'd1;
  localparam logic [2:0] MEM_WGT = 3'd1, MEM_INP = 3'd2;

  typedef enum logic [1:0] {
    IDLE,
    READ,
    DISPATCH
  } state_t;
  state_t state;

  logic [31:0] addr_r, count_r;
  logic [ 4:0] beat;

  wire  [ 2:0] opcode = `INSN_OPCODE(insn);
  wire  [ 2:0] memory_type = `INSN_MEMORY_TYPE(insn);
  wire to_load = opcode == OP_LOAD && (memory_type == MEM_INP || memory_type == MEM_WGT);
  wire to_store = opcode == OP_STORE;
  wire to_compute = !to_load && !to_store;
  wire dest_full = to_load ? load_full : to_store ? store_full : compute_full;

  assign push_load = state == DISPATCH && to_load && !load_full;
  assign push_store = state == DISPATCH && to_store && !store_full;
  assign push_compute = state == DISPATCH && to_compute && !compute_full;
  assign active = state == READ || (state == DISPATCH && !dest_full);

  always_ff @(posedge clk) begin
    logic [63:0] base;
    if (rst) begin
      state   <= IDLE;
      fetched <= '0;
    end else begin
      case (state)
        IDLE:
        if (launch && insn_count != 0) begin
          addr_r <= insn_addr;
          count_r <= insn_count;
          fetched <= '0;
          beat <= '0;
          state <= READ;
        end
        READ: begin
          base = {32'd0, addr_r} + 64'(fetched) * 16 + 64'(beat) * BUS;
          for (int k = 0; k < BUS; k++) begin
            if (int'(beat) * BUS + k < 16) insn[(int'(beat)*BUS+k)*8+:8] <= vta_dram_read8(base + 64'(k));
          end
          if (int'(beat) == BEATS - 1) begin
            beat  <= '0;
            state <= DISPATCH;
          end else begin
            beat <= beat + 1'b1;
          end
        end
        DISPATCH:
        if (!dest_full) begin
          fetched <= fetched + 1'b1;
          state   <= fetched + 1'b1 == count_r ? IDLE : READ;
        end
        default: state <= IDLE;
      endcase
    end
  end
endmodule
