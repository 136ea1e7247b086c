`include "vta_config.svh"

// The compute module: runs LOAD UOP, LOAD ACC, GEMM, ALU and FINISH, and owns the micro-op,
// accumulator and output buffers (the store module reads the output buffer through a port).
//
// GEMM and ALU walk the micro-op sequencer
//   for i < iter_out, j < iter_in, u in [uop_bgn, uop_end):
//     dst = uop.acc + i*dst_factor_out + j*dst_factor_in
//     src = uop.inp + i*src_factor_out + j*src_factor_in
//     wgt = uop.wgt + i*wgt_factor_out + j*wgt_factor_in        (GEMM only)
// GEMM does one iteration a cycle (acc[dst] = reset ? 0 : acc[dst] + inp[src] @ wgt[wgt]^T);
// the ALU two (read the operands, then write op(acc[dst], imm or acc[src])). Each result is
// also written, truncated to its low 8 bits per lane, to the output buffer row dst. Results are
// written at the end of their cycle, so the next iteration already reads them.
// Tokens: pops load->compute (pop_prev) and store->compute (pop_next); pushes compute->load
// (push_prev) and compute->store (push_next).
module vta_compute (
    input  logic                                clk,
    input  logic                                rst,
    input  logic                                insn_valid,
    input  logic [                       127:0] insn,
    output logic                                insn_pop,
    input  logic                                prev_token,
    input  logic                                next_token,
    output logic                                pop_prev,
    output logic                                pop_next,
    output logic                                push_prev,
    output logic                                push_next,
    // read ports into the load module's buffers
    output logic [      `VTA_LOG_INP_DEPTH-1:0] inp_rd_addr,
    input  logic [ `VTA_BATCH*`VTA_BLOCK*8-1:0] inp_rd_data,
    output logic [      `VTA_LOG_WGT_DEPTH-1:0] wgt_rd_addr,
    input  logic [ `VTA_BLOCK*`VTA_BLOCK*8-1:0] wgt_rd_data,
    // read port of the output buffer, for the store module
    input  logic [      `VTA_LOG_ACC_DEPTH-1:0] out_rd_addr,
    output logic [ `VTA_BATCH*`VTA_BLOCK*8-1:0] out_rd_data,
    output logic                                finished,
    output logic                                active,
    output logic [                        31:0] executed
);
  localparam int LANES = `VTA_BATCH * `VTA_BLOCK;
  localparam int ACC_BYTES = LANES * 4;
  localparam int LOG_UOP = `VTA_LOG_UOP_DEPTH;
  localparam int LOG_ACC = `VTA_LOG_ACC_DEPTH;
  localparam logic [2:0] OP_LOAD = 3'd0, OP_GEMM = 3'd2, OP_FINISH = 3'd3, OP_ALU = 3'd4;
  localparam logic [2:0] MEM_UOP = 3'd0;

  logic [31:0] uop_mem[1 << LOG_UOP];
  logic [LANES*32-1:0] acc_mem[1 << LOG_ACC];
  logic [LANES*8-1:0] out_mem[1 << LOG_ACC];
  assign out_rd_data = out_mem[out_rd_addr];

  typedef enum logic [2:0] {
    IDLE,
    LOAD,
    GEMM,
    ALU_READ,
    ALU_WRITE,
    DONE,
    HALTED
  } state_t;
  state_t state;
  logic [127:0] insn_r;

  // ---- accepting an instruction ----------------------------------------------------------
  wire [2:0] opcode = `INSN_OPCODE(insn);
  wire accept = state == IDLE && insn_valid
      && (!`INSN_POP_PREV(insn) || prev_token) && (!`INSN_POP_NEXT(insn) || next_token);
  assign insn_pop = accept;
  assign pop_prev = accept && `INSN_POP_PREV(insn);
  assign pop_next = accept && `INSN_POP_NEXT(insn);
  wire is_uop_load = `INSN_MEMORY_TYPE(insn) == MEM_UOP;
  wire load_noop = `INSN_X_SIZE(insn) == 16'd0 || `INSN_Y_SIZE(insn) == 16'd0;
  wire start_load = accept && opcode == OP_LOAD && !load_noop;
  // GEMM/ALU with no iterations only move tokens.
  wire loop_empty = `INSN_UOP_END(insn) <= {1'b0, `INSN_UOP_BGN(insn)}
      || `INSN_ITER_OUT(insn) == '0 || `INSN_ITER_IN(insn) == '0;

  // ---- LOAD UOP / LOAD ACC through two DRAM loaders ---------------------------------------
  logic uop_busy, acc_busy, uop_we, acc_we;
  logic [LOG_UOP-1:0] uop_wa;
  logic [LOG_ACC-1:0] acc_wa;
  logic [31:0] uop_wd;
  logic [LANES*32-1:0] acc_wd;

  vta_mem_loader #(
      .ELEM_BYTES(4),
      .ADDR_BITS (LOG_UOP),
      .BUS_BYTES (`VTA_BUS_BYTES)
  ) uop_loader (
      .clk, .rst,
      .start(start_load && is_uop_load),
      .sram_base(`INSN_SRAM_BASE(insn)), .dram_base(`INSN_DRAM_BASE(insn)),
      .y_size(`INSN_Y_SIZE(insn)), .x_size(`INSN_X_SIZE(insn)), .x_stride(`INSN_X_STRIDE(insn)),
      .y_pad_0(4'd0), .y_pad_1(4'd0), .x_pad_0(4'd0), .x_pad_1(4'd0),
      .busy(uop_busy), .wr_en(uop_we), .wr_addr(uop_wa), .wr_data(uop_wd)
  );

  vta_mem_loader #(
      .ELEM_BYTES(ACC_BYTES),
      .ADDR_BITS (LOG_ACC),
      .BUS_BYTES (`VTA_BUS_BYTES)
  ) acc_loader (
      .clk, .rst,
      .start(start_load && !is_uop_load),
      .sram_base(`INSN_SRAM_BASE(insn)), .dram_base(`INSN_DRAM_BASE(insn)),
      .y_size(`INSN_Y_SIZE(insn)), .x_size(`INSN_X_SIZE(insn)), .x_stride(`INSN_X_STRIDE(insn)),
      .y_pad_0(4'd0), .y_pad_1(4'd0), .x_pad_0(4'd0), .x_pad_1(4'd0),
      .busy(acc_busy), .wr_en(acc_we), .wr_addr(acc_wa), .wr_data(acc_wd)
  );

  // ---- the micro-op sequencer -------------------------------------------------------------
  logic [13:0] i, j;
  logic [LOG_UOP:0] u;
  wire [31:0] uop = uop_mem[u[LOG_UOP-1:0]];
  wire [31:0] dst_index = 32'(`UOP_ACC(uop)) + 32'(i) * 32'(`INSN_DST_FACTOR_OUT(insn_r))
      + 32'(j) * 32'(`INSN_DST_FACTOR_IN(insn_r));
  wire [31:0] src_index = 32'(`UOP_INP(uop)) + 32'(i) * 32'(`INSN_SRC_FACTOR_OUT(insn_r))
      + 32'(j) * 32'(`INSN_SRC_FACTOR_IN(insn_r));
  wire [31:0] wgt_index = 32'(`UOP_WGT(uop)) + 32'(i) * 32'(`INSN_WGT_FACTOR_OUT(insn_r))
      + 32'(j) * 32'(`INSN_WGT_FACTOR_IN(insn_r));
  wire [LOG_ACC-1:0] dst = dst_index[LOG_ACC-1:0];
  wire [LOG_ACC-1:0] alu_src = src_index[LOG_ACC-1:0];
  assign inp_rd_addr = src_index[`VTA_LOG_INP_DEPTH-1:0];
  assign wgt_rd_addr = wgt_index[`VTA_LOG_WGT_DEPTH-1:0];

  wire last_u = u == `INSN_UOP_END(insn_r) - 1'b1;
  wire last_j = j == `INSN_ITER_IN(insn_r) - 1'b1;
  wire last_i = i == `INSN_ITER_OUT(insn_r) - 1'b1;
  wire last_iteration = last_u && last_j && last_i;

  // ---- data paths -------------------------------------------------------------------------
  logic [LANES*32-1:0] gemm_result, alu_result, alu_dst, alu_src_row;
  vta_gemm_core gemm_core (
      .inp_row(inp_rd_data),
      .wgt_block(wgt_rd_data),
      .acc_row(acc_mem[dst]),
      .result(gemm_result)
  );
  vta_alu_core alu_core (
      .opcode(`INSN_ALU_OPCODE(insn_r)),
      .dst_row(alu_dst),
      .src_row(alu_src_row),
      .result(alu_result)
  );
  wire [15:0] imm = `INSN_IMM(insn_r);
  wire [LANES*32-1:0] imm_row = {LANES{{16{imm[15]}}, imm}};

  function automatic logic [LANES*8-1:0] low_bytes(input logic [LANES*32-1:0] row);
    for (int lane = 0; lane < LANES; lane++) low_bytes[lane*8+:8] = row[lane*32+:8];
  endfunction

  // ---- completion ---------------------------------------------------------------------------
  assign push_prev = state == DONE && `INSN_PUSH_PREV(insn_r);
  assign push_next = state == DONE && `INSN_PUSH_NEXT(insn_r);
  assign active = state != IDLE && state != HALTED;
  assign finished = state == HALTED;

  // Advance the sequencer by one iteration; the last one ends the instruction.
  task automatic advance();
    if (last_iteration) state <= DONE;
    if (last_u) begin
      u <= {1'b0, `INSN_UOP_BGN(insn_r)};
      j <= last_j ? '0 : j + 1'b1;
      if (last_j) i <= i + 1'b1;
    end else begin
      u <= u + 1'b1;
    end
  endtask

  always_ff @(posedge clk) begin
    if (uop_we) uop_mem[uop_wa] <= uop_wd;
    if (acc_we) acc_mem[acc_wa] <= acc_wd;
    if (rst) begin
      state <= IDLE;
      executed <= '0;
    end else begin
      case (state)
        IDLE:
        if (accept) begin
          insn_r <= insn;
          i <= '0;
          j <= '0;
          u <= {1'b0, `INSN_UOP_BGN(insn)};
          case (opcode)
            OP_LOAD: state <= load_noop ? DONE : LOAD;
            OP_GEMM: state <= loop_empty ? DONE : GEMM;
            OP_ALU: state <= loop_empty ? DONE : ALU_READ;
            default: state <= DONE;  // FINISH
          endcase
        end
        LOAD: if (!uop_busy && !acc_busy) state <= DONE;
        GEMM: begin
          acc_mem[dst] <= `INSN_RESET(insn_r) ? '0 : gemm_result;
          out_mem[dst] <= `INSN_RESET(insn_r) ? '0 : low_bytes(gemm_result);
          advance();
        end
        ALU_READ: begin  // one accumulator read port: the operands take a cycle
          alu_dst <= acc_mem[dst];
          alu_src_row <= `INSN_USE_IMM(insn_r) ? imm_row : acc_mem[alu_src];
          state <= ALU_WRITE;
        end
        ALU_WRITE: begin
          acc_mem[dst] <= `INSN_RESET(insn_r) ? '0 : alu_result;
          out_mem[dst] <= `INSN_RESET(insn_r) ? '0 : low_bytes(alu_result);
          state <= ALU_READ;
          advance();
        end
        DONE: begin
          executed <= executed + 1'b1;
          state <= `INSN_OPCODE(insn_r) == OP_FINISH ? HALTED : IDLE;
        end
        HALTED: ;
        default: state <= IDLE;
      endcase
    end
  end
endmodule
