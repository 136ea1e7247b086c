// A dependency token queue between two modules. Tokens carry no data, so the queue is a
// counter: the producer pushes when an instruction with a push flag completes, the consumer
// pops when it accepts an instruction with the matching pop flag (only while count > 0).
// A token pushed in one cycle can be popped from the next cycle on.
module vta_token_queue #(
    parameter int BITS = 16
) (
    input  logic            clk,
    input  logic            rst,
    input  logic            push,
    input  logic            pop,
    output logic [BITS-1:0] count,
    output logic            available
);
  assign available = count != 0;

  always_ff @(posedge clk) begin
    if (rst) count <= '0;
    else count <= count + {{(BITS - 1) {1'b0}}, push} - {{(BITS - 1) {1'b0}}, pop && available};
  end
endmodule
