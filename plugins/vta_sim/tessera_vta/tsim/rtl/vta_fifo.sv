// A synchronous first-in first-out queue with the head visible combinationally.
// One module's instruction queue: fetch pushes, the module pops when it accepts the head.
module vta_fifo #(
    parameter int WIDTH = 128,
    parameter int LOG_DEPTH = 8
) (
    input  logic             clk,
    input  logic             rst,
    input  logic             push,
    input  logic [WIDTH-1:0] push_data,
    input  logic             pop,
    output logic [WIDTH-1:0] head,
    output logic             empty,
    output logic             full
);
  localparam int DEPTH = 1 << LOG_DEPTH;

  logic [WIDTH-1:0] slots[DEPTH];
  logic [LOG_DEPTH-1:0] rd_ptr, wr_ptr;
  logic [LOG_DEPTH:0] count;

  assign head  = slots[rd_ptr];
  assign empty = count == 0;
  assign full  = count == DEPTH[LOG_DEPTH:0];

  always_ff @(posedge clk) begin
    if (rst) begin
      rd_ptr <= '0;
      wr_ptr <= '0;
      count  <= '0;
    end else begin
      if (push && !full) begin
        slots[wr_ptr] <= push_data;
        wr_ptr <= wr_ptr + 1'b1;
      end
      if (pop && !empty) rd_ptr <= rd_ptr + 1'b1;
      count <= count + {{LOG_DEPTH{1'b0}}, push && !full} - {{LOG_DEPTH{1'b0}}, pop && !empty};
    end
  end
endmodule
