`include "vta_config.svh"

// The load module: runs LOAD INP and LOAD WGT instructions and owns the input and weight
// buffers (the compute module reads them through the read ports below).
// Tokens: it pops compute->load (pop_next) and pushes load->compute (push_next).
module vta_load (
    input  logic                             clk,
    input  logic                             rst,
    // instruction queue
    input  logic                             insn_valid,
    input  logic [                    127:0] insn,
    output logic                             insn_pop,
    // token queues: compute->load (popped) and load->compute (pushed)
    input  logic                             next_token,
    output logic                             pop_next,
    output logic                             push_next,
    // read ports of the input and weight buffers (combinational)
    input  logic [  `VTA_LOG_INP_DEPTH-1:0] inp_rd_addr,
    output logic [`VTA_BATCH*`VTA_BLOCK*8-1:0] inp_rd_data,
    input  logic [  `VTA_LOG_WGT_DEPTH-1:0] wgt_rd_addr,
    output logic [`VTA_BLOCK*`VTA_BLOCK*8-1:0] wgt_rd_data,
    output logic                             active,
    output logic [                     31:0] executed
);
  localparam int INP_BYTES = `VTA_BATCH * `VTA_BLOCK;
  localparam int WGT_BYTES = `VTA_BLOCK * `VTA_BLOCK;
  localparam logic [2:0] MEM_WGT = 3'd1;

  logic [INP_BYTES*8-1:0] inp_mem[1 << `VTA_LOG_INP_DEPTH];
  logic [WGT_BYTES*8-1:0] wgt_mem[1 << `VTA_LOG_WGT_DEPTH];
  assign inp_rd_data = inp_mem[inp_rd_addr];
  assign wgt_rd_data = wgt_mem[wgt_rd_addr];

  typedef enum logic [1:0] {
    IDLE,
    RUN,
    DONE
  } state_t;
  state_t state;
  logic [127:0] insn_r;

  // Accept the head instruction once the token it pops (if any) is there.
  wire accept = state == IDLE && insn_valid && (!`INSN_POP_NEXT(insn) || next_token);
  wire is_wgt = `INSN_MEMORY_TYPE(insn) == MEM_WGT;
  // Nothing to copy: only the tokens move.
  wire is_noop = `INSN_X_SIZE(insn) == 16'd0
      || {1'b0, `INSN_Y_SIZE(insn)} + 17'(`INSN_Y_PAD_0(insn)) + 17'(`INSN_Y_PAD_1(insn)) == 17'd0;
  assign insn_pop = accept;
  assign pop_next = accept && `INSN_POP_NEXT(insn);

  logic inp_busy, wgt_busy, inp_we, wgt_we;
  logic [`VTA_LOG_INP_DEPTH-1:0] inp_wa;
  logic [`VTA_LOG_WGT_DEPTH-1:0] wgt_wa;
  logic [INP_BYTES*8-1:0] inp_wd;
  logic [WGT_BYTES*8-1:0] wgt_wd;

  vta_mem_loader #(
      .ELEM_BYTES(INP_BYTES),
      .ADDR_BITS (`VTA_LOG_INP_DEPTH),
      .BUS_BYTES (`VTA_BUS_BYTES)
  ) inp_loader (
      .clk, .rst,
      .start(accept && !is_wgt && !is_noop),
      .sram_base(`INSN_SRAM_BASE(insn)), .dram_base(`INSN_DRAM_BASE(insn)),
      .y_size(`INSN_Y_SIZE(insn)), .x_size(`INSN_X_SIZE(insn)), .x_stride(`INSN_X_STRIDE(insn)),
      .y_pad_0(`INSN_Y_PAD_0(insn)), .y_pad_1(`INSN_Y_PAD_1(insn)),
      .x_pad_0(`INSN_X_PAD_0(insn)), .x_pad_1(`INSN_X_PAD_1(insn)),
      .busy(inp_busy), .wr_en(inp_we), .wr_addr(inp_wa), .wr_data(inp_wd)
  );

  vta_mem_loader #(
      .ELEM_BYTES(WGT_BYTES),
      .ADDR_BITS (`VTA_LOG_WGT_DEPTH),
      .BUS_BYTES (`VTA_BUS_BYTES)
  ) wgt_loader (
      .clk, .rst,
      .start(accept && is_wgt && !is_noop),
      .sram_base(`INSN_SRAM_BASE(insn)), .dram_base(`INSN_DRAM_BASE(insn)),
      .y_size(`INSN_Y_SIZE(insn)), .x_size(`INSN_X_SIZE(insn)), .x_stride(`INSN_X_STRIDE(insn)),
      .y_pad_0(4'd0), .y_pad_1(4'd0), .x_pad_0(4'd0), .x_pad_1(4'd0),
      .busy(wgt_busy), .wr_en(wgt_we), .wr_addr(wgt_wa), .wr_data(wgt_wd)
  );

  // The instruction completes (and pushes its token) once its loader has finished.
  wire finishing = state == DONE || (state == RUN && !inp_busy && !wgt_busy);
  assign push_next = finishing && `INSN_PUSH_NEXT(insn_r);
  assign active = state != IDLE;

  always_ff @(posedge clk) begin
    if (inp_we) inp_mem[inp_wa] <= inp_wd;
    if (wgt_we) wgt_mem[wgt_wa] <= wgt_wd;
    if (rst) begin
      state <= IDLE;
      executed <= '0;
    end else if (accept) begin
      insn_r <= insn;
      state  <= is_noop ? DONE : RUN;
    end else if (finishing) begin
      state <= IDLE;
      executed <= executed + 1'b1;
    end
  end
endmodule
