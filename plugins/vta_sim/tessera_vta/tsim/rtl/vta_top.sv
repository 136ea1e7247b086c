`include "vta_config.svh"

// The VTA core: fetch, the load / compute / store modules with their instruction queues, and
// the four dependency token queues between the modules.
//
// Python (through pyverilator and tsim_harness.cpp) places the instruction stream in DRAM,
// pulses `launch` with its byte address and length, and clocks the core until `done` (the
// compute module executed FINISH). `cycles` counts the cycles from launch to FINISH; `stalled`
// is high in a cycle where nothing moves, which for many cycles in a row means a deadlock.
module vta_top (
    input  logic        clk,
    input  logic        rst,
    input  logic        launch,
    input  logic [31:0] insn_addr,
    input  logic [31:0] insn_count,
    output logic        done,
    output logic        stalled,
    output logic [63:0] cycles,
    output logic [31:0] fetched,
    output logic [31:0] load_executed,
    output logic [31:0] compute_executed,
    output logic [31:0] store_executed,
    output logic [15:0] tokens_load_compute,
    output logic [15:0] tokens_compute_load,
    output logic [15:0] tokens_compute_store,
    output logic [15:0] tokens_store_compute,
    output logic        queues_empty
);
  // ---- fetch and the three instruction queues ---------------------------------------------
  logic [127:0] fetch_insn, load_insn, compute_insn, store_insn;
  logic push_load, push_compute, push_store, fetch_active;
  logic load_full, compute_full, store_full;
  logic load_empty, compute_empty, store_empty;
  logic load_pop, compute_pop, store_pop;

  vta_fetch fetch (
      .clk, .rst, .launch, .insn_addr, .insn_count,
      .insn(fetch_insn),
      .push_load, .push_compute, .push_store,
      .load_full, .compute_full, .store_full,
      .active(fetch_active), .fetched
  );

  vta_fifo #(.LOG_DEPTH(`VTA_LOG_FIFO_DEPTH)) load_queue (
      .clk, .rst, .push(push_load), .push_data(fetch_insn), .pop(load_pop),
      .head(load_insn), .empty(load_empty), .full(load_full)
  );
  vta_fifo #(.LOG_DEPTH(`VTA_LOG_FIFO_DEPTH)) compute_queue (
      .clk, .rst, .push(push_compute), .push_data(fetch_insn), .pop(compute_pop),
      .head(compute_insn), .empty(compute_empty), .full(compute_full)
  );
  vta_fifo #(.LOG_DEPTH(`VTA_LOG_FIFO_DEPTH)) store_queue (
      .clk, .rst, .push(push_store), .push_data(fetch_insn), .pop(store_pop),
      .head(store_insn), .empty(store_empty), .full(store_full)
  );

  // ---- the four token queues ----------------------------------------------------------------
  logic l2c_push, l2c_pop, l2c_ok;  // load -> compute
  logic c2l_push, c2l_pop, c2l_ok;  // compute -> load
  logic c2s_push, c2s_pop, c2s_ok;  // compute -> store
  logic s2c_push, s2c_pop, s2c_ok;  // store -> compute

  vta_token_queue load_to_compute (
      .clk, .rst, .push(l2c_push), .pop(l2c_pop), .count(tokens_load_compute), .available(l2c_ok)
  );
  vta_token_queue compute_to_load (
      .clk, .rst, .push(c2l_push), .pop(c2l_pop), .count(tokens_compute_load), .available(c2l_ok)
  );
  vta_token_queue compute_to_store (
      .clk, .rst, .push(c2s_push), .pop(c2s_pop), .count(tokens_compute_store), .available(c2s_ok)
  );
  vta_token_queue store_to_compute (
      .clk, .rst, .push(s2c_push), .pop(s2c_pop), .count(tokens_store_compute), .available(s2c_ok)
  );

  // ---- the modules ----------------------------------------------------------------------------
  logic [`VTA_LOG_INP_DEPTH-1:0] inp_rd_addr;
  logic [`VTA_BATCH*`VTA_BLOCK*8-1:0] inp_rd_data;
  logic [`VTA_LOG_WGT_DEPTH-1:0] wgt_rd_addr;
  logic [`VTA_BLOCK*`VTA_BLOCK*8-1:0] wgt_rd_data;
  logic [`VTA_LOG_ACC_DEPTH-1:0] out_rd_addr;
  logic [`VTA_BATCH*`VTA_BLOCK*8-1:0] out_rd_data;
  logic load_active, compute_active, store_active, finished;

  vta_load load (
      .clk, .rst,
      .insn_valid(!load_empty), .insn(load_insn), .insn_pop(load_pop),
      .next_token(c2l_ok), .pop_next(c2l_pop), .push_next(l2c_push),
      .inp_rd_addr, .inp_rd_data, .wgt_rd_addr, .wgt_rd_data,
      .active(load_active), .executed(load_executed)
  );

  vta_compute compute (
      .clk, .rst,
      .insn_valid(!compute_empty), .insn(compute_insn), .insn_pop(compute_pop),
      .prev_token(l2c_ok), .next_token(s2c_ok),
      .pop_prev(l2c_pop), .pop_next(s2c_pop), .push_prev(c2l_push), .push_next(c2s_push),
      .inp_rd_addr, .inp_rd_data, .wgt_rd_addr, .wgt_rd_data,
      .out_rd_addr, .out_rd_data,
      .finished, .active(compute_active), .executed(compute_executed)
  );

  vta_store store (
      .clk, .rst,
      .insn_valid(!store_empty), .insn(store_insn), .insn_pop(store_pop),
      .prev_token(c2s_ok), .pop_prev(c2s_pop), .push_prev(s2c_push),
      .out_rd_addr, .out_rd_data,
      .active(store_active), .executed(store_executed)
  );

  // ---- status ---------------------------------------------------------------------------------
  logic running;
  assign done = finished;
  assign stalled = running && !fetch_active && !load_active && !compute_active && !store_active;
  assign queues_empty = load_empty && compute_empty && store_empty;

  always_ff @(posedge clk) begin
    if (rst) begin
      running <= 1'b0;
      cycles  <= '0;
    end else if (launch) begin
      running <= 1'b1;
      cycles  <= '0;
    end else if (running && !finished) begin
      cycles <= cycles + 1'b1;
    end
  end
endmodule
