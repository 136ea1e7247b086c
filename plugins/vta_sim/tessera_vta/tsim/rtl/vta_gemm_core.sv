`include "vta_config.svh"

// The GEMM core: one (BATCH x BLOCK) by (BLOCK x BLOCK)^T int8 product per cycle, added to an
// int32 accumulator row (16x16 = 256 multiply-accumulates with the default configuration).
//   result[b][o] = acc[b][o] + sum_k inp[b][k] * wgt[o][k]
// Weight blocks are stored [out][in]; lanes are little-endian bytes / 32-bit words.
module vta_gemm_core (
    input  logic [ `VTA_BATCH*`VTA_BLOCK*8-1:0] inp_row,
    input  logic [ `VTA_BLOCK*`VTA_BLOCK*8-1:0] wgt_block,
    input  logic [`VTA_BATCH*`VTA_BLOCK*32-1:0] acc_row,
    output logic [`VTA_BATCH*`VTA_BLOCK*32-1:0] result
);
  localparam int B = `VTA_BATCH;
  localparam int N = `VTA_BLOCK;

  always_comb begin
    logic signed [7:0] a, w;
    logic signed [31:0] dot;
    for (int b = 0; b < B; b++) begin
      for (int o = 0; o < N; o++) begin
        dot = '0;
        for (int k = 0; k < N; k++) begin
          a = inp_row[(b*N+k)*8+:8];
          w = wgt_block[(o*N+k)*8+:8];
          dot = dot + a * w;  // operands sign-extend to 32 bits
        end
        result[(b*N+o)*32+:32] = acc_row[(b*N+o)*32+:32] + dot;
      end
    end
  end
endmodule
