`include "vta_config.svh"

// The ALU: one operation on every int32 lane of an accumulator row.
//   MIN, MAX (signed), ADD (wrapping), SHR (arithmetic; a negative amount shifts left;
//   amounts are clamped to -31..31). MUL exists only in the functional simulator, as in VTA;
//   here it leaves the destination unchanged (the Python driver rejects such streams).
module vta_alu_core (
    input  logic [                          2:0] opcode,
    input  logic [`VTA_BATCH*`VTA_BLOCK*32-1:0] dst_row,
    input  logic [`VTA_BATCH*`VTA_BLOCK*32-1:0] src_row,
    output logic [`VTA_BATCH*`VTA_BLOCK*32-1:0] result
);
  localparam int LANES = `VTA_BATCH * `VTA_BLOCK;
  localparam logic [2:0] MIN = 3'd0, MAX = 3'd1, ADD = 3'd2, SHR = 3'd3;

  always_comb begin
    logic signed [31:0] a, b, r;
    logic [4:0] amount;
    for (int lane = 0; lane < LANES; lane++) begin
      a = dst_row[lane*32+:32];
      b = src_row[lane*32+:32];
      amount = b > 31 ? 5'd31 : b < -31 ? 5'd31 : b >= 0 ? b[4:0] : 5'(-b);
      case (opcode)
        MIN: r = a < b ? a : b;
        MAX: r = a > b ? a : b;
        ADD: r = a + b;
        SHR: r = b >= 0 ? a >>> amount : a << amount;
        default: r = a;
      endcase
      result[lane*32+:32] = r;
    end
  end
endmodule
