`include "vta_config.svh"
`include "vta_dpi.svh"

// The store module: runs STORE instructions, copying output-buffer rows (read through the
// compute module's port) to DRAM: row sram_base + y * x_size + x goes to DRAM element
// dram_base + y * x_stride + x. One cycle per DRAM beat.
// Tokens: it pops compute->store (pop_prev) and pushes store->compute (push_prev).
module vta_store (
    input  logic                               clk,
    input  logic                               rst,
    input  logic                               insn_valid,
    input  logic [                      127:0] insn,
    output logic                               insn_pop,
    input  logic                               prev_token,
    output logic                               pop_prev,
    output logic                               push_prev,
    output logic [     `VTA_LOG_ACC_DEPTH-1:0] out_rd_addr,
    input  logic [`VTA_BATCH*`VTA_BLOCK*8-1:0] out_rd_data,
    output logic                               active,
    output logic [                       31:0] executed
);
  localparam int OUT_BYTES = `VTA_BATCH * `VTA_BLOCK;
  localparam int BUS = `VTA_BUS_BYTES;
  localparam int BEATS = (OUT_BYTES + BUS - 1) / BUS;

  typedef enum logic [1:0] {
    IDLE,
    RUN,
    DONE
  } state_t;
  state_t state;
  logic [127:0] insn_r;
  logic [15:0] y, x;
  logic [7:0] beat;
  logic [`VTA_LOG_ACC_DEPTH-1:0] sram_ptr;

  wire [15:0] insn_sram_base = `INSN_SRAM_BASE(insn);
  wire accept = state == IDLE && insn_valid && (!`INSN_POP_PREV(insn) || prev_token);
  assign insn_pop = accept;
  assign pop_prev = accept && `INSN_POP_PREV(insn);
  assign push_prev = state == DONE && `INSN_PUSH_PREV(insn_r);
  assign active = state != IDLE;
  assign out_rd_addr = sram_ptr;

  wire last_beat = int'(beat) == BEATS - 1;
  wire last_x = x == `INSN_X_SIZE(insn_r) - 1'b1;
  wire last_element = last_x && y == `INSN_Y_SIZE(insn_r) - 1'b1;
  wire [63:0] dram_element = {32'd0, `INSN_DRAM_BASE(insn_r)}
      + {48'd0, y} * {48'd0, `INSN_X_STRIDE(insn_r)} + {48'd0, x};
  wire [63:0] beat_addr = dram_element * OUT_BYTES + 64'(beat) * BUS;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= IDLE;
      executed <= '0;
    end else begin
      case (state)
        IDLE:
        if (accept) begin
          insn_r <= insn;
          y <= '0;
          x <= '0;
          beat <= '0;
          sram_ptr <= insn_sram_base[`VTA_LOG_ACC_DEPTH-1:0];
          state <= `INSN_X_SIZE(insn) == 16'd0 || `INSN_Y_SIZE(insn) == 16'd0 ? DONE : RUN;
        end
        RUN: begin
          for (int k = 0; k < BUS; k++) begin
            if (int'(beat) * BUS + k < OUT_BYTES)
              vta_dram_write8(beat_addr + 64'(k), out_rd_data[(int'(beat)*BUS+k)*8+:8]);
          end
          if (last_beat) begin
            beat <= '0;
            sram_ptr <= sram_ptr + 1'b1;
            x <= last_x ? '0 : x + 1'b1;
            if (last_x) y <= y + 1'b1;
            if (last_element) state <= DONE;
          end else begin
            beat <= beat + 1'b1;
          end
        end
        DONE: begin
          state <= IDLE;
          executed <= executed + 1'b1;
        end
        default: state <= IDLE;
      endcase
    end
  end
endmodule
