`include "vta_dpi.svh"

// Copies a 2-D block of elements from DRAM into an SRAM (the data path of VTA's LOAD).
//
// The SRAM receives (y_pad_0 + y_size + y_pad_1) x (x_pad_0 + x_size + x_pad_1) elements from
// sram_base on, row by row; padding elements are zeros. Element (y, x) of the data comes from
// DRAM element dram_base + y * x_stride + x (addresses count elements of ELEM_BYTES bytes).
// Timing: one cycle per DRAM beat of BUS_BYTES (at least one beat per element), one cycle per
// padding element, then one cycle for the last write to land. `busy` is high from the cycle
// after `start` until the last element is in the SRAM.
module vta_mem_loader #(
    parameter int ELEM_BYTES = 16,
    parameter int ADDR_BITS  = 11,
    parameter int BUS_BYTES  = 8
) (
    input  logic                    clk,
    input  logic                    rst,
    input  logic                    start,
    input  logic [            15:0] sram_base,
    input  logic [            31:0] dram_base,
    input  logic [            15:0] y_size,
    input  logic [            15:0] x_size,
    input  logic [            15:0] x_stride,
    input  logic [             3:0] y_pad_0,
    input  logic [             3:0] y_pad_1,
    input  logic [             3:0] x_pad_0,
    input  logic [             3:0] x_pad_1,
    output logic                    busy,
    // SRAM write port (registered: the owner writes its memory on the next clock edge)
    output logic                    wr_en,
    output logic [   ADDR_BITS-1:0] wr_addr,
    output logic [ELEM_BYTES*8-1:0] wr_data
);
  localparam int BEATS = (ELEM_BYTES + BUS_BYTES - 1) / BUS_BYTES;

  typedef enum logic [1:0] {
    IDLE,
    RUN,
    DRAIN
  } state_t;
  state_t state;

  // The latched instruction fields.
  logic [31:0] dram_base_r;
  logic [15:0] y_size_r, x_size_r, x_stride_r;
  logic [3:0] y_pad_0_r, x_pad_0_r;
  logic [16:0] y_total, x_total;

  // Position in the padded block, the beat within the element, and the SRAM write pointer.
  logic [16:0] y, x;
  logic [$clog2(BEATS + 1)-1:0] beat;
  logic [ADDR_BITS-1:0] sram_ptr;
  logic [ELEM_BYTES*8-1:0] element;  // bytes of the current element gathered so far

  wire in_rows = y >= {13'd0, y_pad_0_r} && y < {13'd0, y_pad_0_r} + {1'b0, y_size_r};
  wire in_cols = x >= {13'd0, x_pad_0_r} && x < {13'd0, x_pad_0_r} + {1'b0, x_size_r};
  wire is_pad = !(in_rows && in_cols);
  wire last_beat = beat == BEATS[$bits(beat)-1:0] - 1'b1;
  wire last_x = x == x_total - 1'b1;
  wire last_element = last_x && y == y_total - 1'b1;

  // Byte address of the current beat in DRAM.
  wire [63:0] dram_element = {32'd0, dram_base_r}
      + {47'd0, y - {13'd0, y_pad_0_r}} * {48'd0, x_stride_r}
      + {47'd0, x - {13'd0, x_pad_0_r}};
  wire [63:0] beat_addr = dram_element * ELEM_BYTES + {32'd0, 32'(beat) * BUS_BYTES};

  assign busy = state != IDLE;

  always_ff @(posedge clk) begin
    logic [ELEM_BYTES*8-1:0] gathered;
    int offset;
    wr_en <= 1'b0;
    if (rst) begin
      state <= IDLE;
    end else begin
      case (state)
        IDLE:
        if (start) begin
          dram_base_r <= dram_base;
          y_size_r <= y_size;
          x_size_r <= x_size;
          x_stride_r <= x_stride;
          y_pad_0_r <= y_pad_0;
          x_pad_0_r <= x_pad_0;
          y_total <= {1'b0, y_size} + {13'd0, y_pad_0} + {13'd0, y_pad_1};
          x_total <= {1'b0, x_size} + {13'd0, x_pad_0} + {13'd0, x_pad_1};
          y <= '0;
          x <= '0;
          beat <= '0;
          sram_ptr <= sram_base[ADDR_BITS-1:0];
          state <= RUN;
        end
        RUN: begin
          // Either write a zero padding element or read one beat of a data element.
          gathered = is_pad ? '0 : element;
          if (!is_pad) begin
            for (int k = 0; k < BUS_BYTES; k++) begin
              offset = int'(beat) * BUS_BYTES + k;
              if (offset < ELEM_BYTES) gathered[offset*8+:8] = vta_dram_read8(beat_addr + 64'(k));
            end
          end
          element <= gathered;
          if (is_pad || last_beat) begin
            wr_en <= 1'b1;
            wr_addr <= sram_ptr;
            wr_data <= gathered;
            sram_ptr <= sram_ptr + 1'b1;
            beat <= '0;
            x <= last_x ? '0 : x + 1'b1;
            if (last_x) y <= y + 1'b1;
            if (last_element) state <= DRAIN;
          end else begin
            beat <= beat + 1'b1;
          end
        end
        DRAIN: state <= IDLE;  // the last write lands at this edge
        default: state <= IDLE;
      endcase
    end
  end
endmodule
