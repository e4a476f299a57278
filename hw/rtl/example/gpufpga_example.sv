// gpufpga_example: the user logic across from a Xilinx XDMA IP, as the rig
// co-simulates it (hw/testbench/rtlbridge). Port names are the IP's, seen
// from the user's side.
//
//  C2H: a generator of the FRM1 frames pkg/frame checks. A frame is due
//       every PERIOD cycles (register 0x0C; 0 stops it). A due frame is
//       built into a FIFO of whole frames (FIFO_FRAMES deep), its CRC
//       computed on the way, and sent once complete; a frame due while
//       the FIFO is full (the host holds tready low) or the builder is
//       busy is dropped whole and counted. Sequence numbers count every
//       frame due, so a consumer sees a dropped frame as a gap.
//       The header's timestamp is the free-running cycle counter when the
//       frame was due: consumer cycle minus timestamp is the
//       FPGA-to-consumer latency in cycles.
//  H2C: a sink that checks each packet is one FRM1 frame (magic, length,
//       CRC, consecutive sequence numbers) and counts good and bad ones.
//  IRQ: usr_irq_req[0] rises on an H2C error (when enabled) and falls on
//       usr_irq_ack[0], as PG195 describes.
//
// Registers (AXI-Lite, 32 bits):
//  0x00 ID 0x47465831 ("GFX1")   0x04 DATA_WIDTH | FRAME_BEATS << 16
//  0x08 CONTROL bit0 jitter      0x0C PERIOD (cycles per frame, 0 = off)
//  0x10 PAYLOAD_BYTES            0x14 SNAPSHOT (write: capture counters)
//  0x18 SEED (jitter LFSR; write reseeds)
//  0x20/0x24 GENERATED           0x28/0x2C SENT
//  0x30/0x34 DROPPED             0x38 QUEUED
//  0x3C/0x40 CYCLES              (all five as of the last SNAPSHOT write)
//  0x48 H2C_GOOD  0x4C H2C_BAD   0x54 IRQ_STATUS (write 1 to clear)
//  0x58 IRQ_ENABLE
// GENERATED = SENT + DROPPED + QUEUED holds in every snapshot.
module gpufpga_example #(
    parameter int DATA_WIDTH    = 256,  // 64, 128 or 256: the IP's stream width
    parameter int PAYLOAD_BYTES = 1000, // a multiple of 8
    parameter int FIFO_FRAMES   = 4
) (
    input  logic                    axi_aclk,
    input  logic                    axi_aresetn,
    // C2H: this design is the master
    output logic [DATA_WIDTH-1:0]   s_axis_c2h_tdata_0,
    output logic [DATA_WIDTH/8-1:0] s_axis_c2h_tkeep_0,
    output logic                    s_axis_c2h_tlast_0,
    output logic                    s_axis_c2h_tvalid_0,
    input  logic                    s_axis_c2h_tready_0,
    // H2C: this design is the slave
    input  logic [DATA_WIDTH-1:0]   m_axis_h2c_tdata_0,
    input  logic [DATA_WIDTH/8-1:0] m_axis_h2c_tkeep_0,
    input  logic                    m_axis_h2c_tlast_0,
    input  logic                    m_axis_h2c_tvalid_0,
    output logic                    m_axis_h2c_tready_0,
    // AXI-Lite: the IP is the master (the user BAR)
    input  logic [31:0]             m_axil_awaddr,
    input  logic                    m_axil_awvalid,
    output logic                    m_axil_awready,
    input  logic [31:0]             m_axil_wdata,
    /* verilator lint_off UNUSEDSIGNAL */ // whole words only; 8-bit decode
    input  logic [3:0]              m_axil_wstrb,
    input  logic                    m_axil_wvalid,
    output logic                    m_axil_wready,
    output logic [1:0]              m_axil_bresp,
    output logic                    m_axil_bvalid,
    input  logic                    m_axil_bready,
    input  logic [31:0]             m_axil_araddr,
    /* verilator lint_on UNUSEDSIGNAL */
    input  logic                    m_axil_arvalid,
    output logic                    m_axil_arready,
    output logic [31:0]             m_axil_rdata,
    output logic [1:0]              m_axil_rresp,
    output logic                    m_axil_rvalid,
    input  logic                    m_axil_rready,
    output logic [0:0]              usr_irq_req,
    input  logic [0:0]              usr_irq_ack
);
  `include "crc32c.svh"

  localparam int BYTES = DATA_WIDTH / 8;
  localparam int WORDS = DATA_WIDTH / 64;
  localparam int FRAME_BYTES = 32 + PAYLOAD_BYTES;
  localparam int FRAME_BEATS = (FRAME_BYTES + BYTES - 1) / BYTES;
  localparam int LAST_BYTES = FRAME_BYTES - (FRAME_BEATS - 1) * BYTES;
  localparam int CRC_BEAT = 28 / BYTES; // the beat holding the CRC field
  localparam logic [63:0] PHI = 64'h9E3779B97F4A7C15;
  localparam logic [BYTES-1:0] LAST_KEEP = {BYTES{1'b1}} >> (BYTES - LAST_BYTES);

  initial begin
    if (DATA_WIDTH != 64 && DATA_WIDTH != 128 && DATA_WIDTH != 256) $fatal(1, "DATA_WIDTH must be 64, 128 or 256");
    if (PAYLOAD_BYTES % 8 != 0) $fatal(1, "PAYLOAD_BYTES must be a multiple of 8");
  end

  logic [63:0] cycles;
  always_ff @(posedge axi_aclk)
    if (!axi_aresetn) cycles <= 0;
    else cycles <= cycles + 1;

  // splitmix64's finaliser: frame seq's payload key (pkg/frame).
  function automatic logic [63:0] payload_key(input logic [63:0] seq);
    logic [63:0] z;
    z = seq + PHI;
    z = (z ^ (z >> 30)) * 64'hBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) * 64'h94D049BB133111EB;
    return z ^ (z >> 31);
  endfunction

  // CRC over the lanes of a beat that hold covered bytes: header bytes
  // 0-27 and the payload (not the CRC field itself).
  function automatic logic [31:0] crc_beat(input logic [31:0] c, input logic [DATA_WIDTH-1:0] d,
                                           input int unsigned first, input int unsigned total);
    for (int unsigned i = 0; i < BYTES; i++) begin
      int unsigned o = first + i;
      if (o < total && (o < 28 || o >= 32)) c = crc32c_byte(c, d[8*i +: 8]);
    end
    return c;
  endfunction

  // Beat b of frame seq (the CRC field as zero), little-endian.
  function automatic logic [DATA_WIDTH-1:0] frame_beat(input int unsigned b, input logic [63:0] seq,
                                                      input logic [63:0] ts, input logic [63:0] key);
    logic [255:0] hdr;
    logic [DATA_WIDTH-1:0] d;
    hdr = {32'd0, 32'(PAYLOAD_BYTES), ts, seq, 16'd32, 16'd1, 32'h314D5246};
    for (int unsigned w = 0; w < WORDS; w++) begin
      int unsigned o = b * BYTES + w * 8; // byte offset of this word in the frame
      logic [63:0] i = {32'd0, o >> 3} - 64'd3;   // payload word i is (i+1)*PHI ^ key
      if (o < 32) d[64*w +: 64] = hdr[8*o +: 64];
      else if (o < FRAME_BYTES) d[64*w +: 64] = (i * PHI) ^ key;
      else d[64*w +: 64] = 0;
    end
    return d;
  endfunction

  // ---- registers
  logic [31:0] period, seed, control, irq_enable;
  logic [0:0] irq_status;
  logic snap_seed_write; // SEED written this cycle
  logic [63:0] generated, sent, dropped, snap_generated, snap_sent, snap_dropped, snap_cycles;
  logic [31:0] snap_queued, h2c_good, h2c_bad;

  // ---- C2H generator and FIFO of whole frames
  localparam int SLOTW = $clog2(FIFO_FRAMES) + 1;
  logic [DATA_WIDTH-1:0] fifo [FIFO_FRAMES * FRAME_BEATS];
  logic [SLOTW-1:0] committed, wr_slot, rd_slot;
  int unsigned rd_beat, gen_beat;
  logic gen_busy;
  logic [63:0] gen_seq, gen_ts, gen_key;
  logic [31:0] gen_crc, timer;
  logic [15:0] lfsr;
  logic due, room, deliver;

  // A frame is due when the timer reaches the period (plus up to 15
  // cycles of jitter from the LFSR when CONTROL bit 0 is set).
  assign due = period != 0 && timer >= period + (control[0] ? 32'(lfsr[3:0]) : 32'd0);
  assign room = !gen_busy && 32'(committed) < FIFO_FRAMES;
  assign deliver = s_axis_c2h_tvalid_0 && s_axis_c2h_tready_0 && s_axis_c2h_tlast_0;

  always_ff @(posedge axi_aclk) begin
    if (!axi_aresetn) begin
      generated <= 0; dropped <= 0; sent <= 0; timer <= 0; gen_busy <= 0;
      committed <= 0; wr_slot <= 0; rd_slot <= 0; rd_beat <= 0; lfsr <= 16'hACE1;
    end else begin
      logic commit;
      commit = 0;
      timer <= due ? 0 : timer + 1;
      if (snap_seed_write) lfsr <= seed[15:0] == 0 ? 16'hACE1 : seed[15:0];
      else if (due) lfsr <= {lfsr[14:0], lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]};
      if (due) begin
        generated <= generated + 1;
        if (room) begin
          gen_busy <= 1;
          gen_beat <= 0;
          gen_seq <= generated;
          gen_ts <= cycles;
          gen_key <= payload_key(generated);
          gen_crc <= 32'hFFFFFFFF;
        end else dropped <= dropped + 1;
      end
      if (gen_busy) begin
        int unsigned a;
        a = 32'(wr_slot) * FRAME_BEATS;
        if (gen_beat < FRAME_BEATS) begin
          fifo[a + gen_beat] <= frame_beat(gen_beat, gen_seq, gen_ts, gen_key);
          gen_crc <= crc_beat(gen_crc, frame_beat(gen_beat, gen_seq, gen_ts, gen_key), gen_beat * BYTES, FRAME_BYTES);
          gen_beat <= gen_beat + 1;
        end else begin
          // Every byte is in: patch the CRC into its beat and commit.
          logic [DATA_WIDTH-1:0] h;
          h = frame_beat(CRC_BEAT, gen_seq, gen_ts, gen_key);
          h[8*(28 % BYTES) +: 32] = ~gen_crc;
          fifo[a + CRC_BEAT] <= h;
          wr_slot <= 32'(wr_slot) == FIFO_FRAMES - 1 ? 0 : wr_slot + 1;
          gen_busy <= 0;
          commit = 1;
        end
      end
      if (s_axis_c2h_tvalid_0 && s_axis_c2h_tready_0) begin
        if (s_axis_c2h_tlast_0) begin
          rd_beat <= 0;
          rd_slot <= 32'(rd_slot) == FIFO_FRAMES - 1 ? 0 : rd_slot + 1;
          sent <= sent + 1;
        end else rd_beat <= rd_beat + 1;
      end
      committed <= committed + SLOTW'(commit) - SLOTW'(deliver);
    end
  end

  assign s_axis_c2h_tvalid_0 = committed != 0;
  assign s_axis_c2h_tdata_0 = fifo[32'(rd_slot) * FRAME_BEATS + rd_beat];
  assign s_axis_c2h_tlast_0 = rd_beat == FRAME_BEATS - 1;
  assign s_axis_c2h_tkeep_0 = s_axis_c2h_tlast_0 ? LAST_KEEP : {BYTES{1'b1}};

  // ---- H2C checker: one frame per packet
  logic [255:0] rx_hdr;
  logic [31:0] rx_crc;
  int unsigned rx_bytes;
  logic [63:0] rx_expect;
  logic rx_started, rx_error;
  assign m_axis_h2c_tready_0 = 1'b1;

  always_ff @(posedge axi_aclk) begin
    rx_error <= 0;
    if (!axi_aresetn) begin
      rx_bytes <= 0; rx_crc <= 32'hFFFFFFFF; rx_started <= 0; h2c_good <= 0; h2c_bad <= 0;
    end else if (m_axis_h2c_tvalid_0) begin
      logic [255:0] h;
      int unsigned n, total;
      logic [31:0] c;
      h = rx_hdr;
      n = 0;
      for (int unsigned i = 0; i < BYTES; i++) begin
        if (m_axis_h2c_tkeep_0[i]) begin
          if (rx_bytes + i < 32) h[8*(rx_bytes+i) +: 8] = m_axis_h2c_tdata_0[8*i +: 8];
          n = i + 1;
        end
      end
      total = rx_bytes + n;
      c = crc_beat(rx_crc, m_axis_h2c_tdata_0 & {DATA_WIDTH{1'b1}} >> (DATA_WIDTH - 8 * n), rx_bytes, total);
      if (m_axis_h2c_tlast_0) begin
        logic ok;
        ok = total >= 32 && h[31:0] == 32'h314D5246 && total == 32 + h[223:192] && ~c == h[255:224]
             && (!rx_started || h[127:64] == rx_expect);
        if (ok) h2c_good <= h2c_good + 1;
        else begin
          h2c_bad <= h2c_bad + 1;
          rx_error <= 1;
        end
        rx_expect <= h[127:64] + 1;
        rx_started <= 1;
        rx_bytes <= 0;
        rx_crc <= 32'hFFFFFFFF;
      end else begin
        rx_hdr <= h;
        rx_bytes <= total;
        rx_crc <= c;
      end
    end
  end

  // ---- user interrupt: held until the IP acknowledges it
  always_ff @(posedge axi_aclk)
    if (!axi_aresetn) usr_irq_req <= 0;
    else if (rx_error && irq_enable[0]) usr_irq_req <= 1;
    else if (usr_irq_ack[0]) usr_irq_req <= 0;

  // ---- AXI-Lite slave: one transaction at a time
  /* verilator lint_off UNUSEDSIGNAL */
  logic [31:0] wr_addr;
  /* verilator lint_on UNUSEDSIGNAL */
  logic have_aw, have_w;
  logic [31:0] wr_data;
  assign m_axil_awready = !have_aw && !m_axil_bvalid;
  assign m_axil_wready = !have_w && !m_axil_bvalid;
  assign m_axil_bresp = 2'b00;
  assign m_axil_rresp = 2'b00;
  assign m_axil_arready = !m_axil_rvalid;

  always_ff @(posedge axi_aclk) begin
    snap_seed_write <= 0;
    if (!axi_aresetn) begin
      have_aw <= 0; have_w <= 0; m_axil_bvalid <= 0; m_axil_rvalid <= 0;
      period <= 0; seed <= 0; control <= 0; irq_enable <= 0; irq_status <= 0;
      snap_generated <= 0; snap_sent <= 0; snap_dropped <= 0; snap_queued <= 0; snap_cycles <= 0;
    end else begin
      logic aw, w;
      aw = have_aw;
      w = have_w;
      if (m_axil_awvalid && m_axil_awready) begin wr_addr <= m_axil_awaddr; aw = 1; end
      if (m_axil_wvalid && m_axil_wready) begin wr_data <= m_axil_wdata; w = 1; end
      have_aw <= aw;
      have_w <= w;
      if (have_aw && have_w) begin
        case (wr_addr[7:0])
          8'h08: control <= wr_data;
          8'h0C: period <= wr_data;
          8'h14: begin
            snap_generated <= generated; snap_sent <= sent; snap_dropped <= dropped;
            snap_queued <= 32'(committed) + 32'(gen_busy); snap_cycles <= cycles;
          end
          8'h18: begin seed <= wr_data; snap_seed_write <= 1; end
          8'h54: irq_status <= irq_status & ~wr_data[0:0];
          8'h58: irq_enable <= wr_data;
          default: ;
        endcase
        have_aw <= 0;
        have_w <= 0;
        m_axil_bvalid <= 1;
      end else if (m_axil_bvalid && m_axil_bready) m_axil_bvalid <= 0;
      if (rx_error) irq_status <= 1;
      if (m_axil_arvalid && m_axil_arready) begin
        m_axil_rvalid <= 1;
        case (m_axil_araddr[7:0])
          8'h00: m_axil_rdata <= 32'h47465831;
          8'h04: m_axil_rdata <= 32'(DATA_WIDTH) | 32'(FRAME_BEATS) << 16;
          8'h08: m_axil_rdata <= control;
          8'h0C: m_axil_rdata <= period;
          8'h10: m_axil_rdata <= 32'(PAYLOAD_BYTES);
          8'h18: m_axil_rdata <= seed;
          8'h20: m_axil_rdata <= snap_generated[31:0];
          8'h24: m_axil_rdata <= snap_generated[63:32];
          8'h28: m_axil_rdata <= snap_sent[31:0];
          8'h2C: m_axil_rdata <= snap_sent[63:32];
          8'h30: m_axil_rdata <= snap_dropped[31:0];
          8'h34: m_axil_rdata <= snap_dropped[63:32];
          8'h38: m_axil_rdata <= snap_queued;
          8'h3C: m_axil_rdata <= snap_cycles[31:0];
          8'h40: m_axil_rdata <= snap_cycles[63:32];
          8'h48: m_axil_rdata <= h2c_good;
          8'h4C: m_axil_rdata <= h2c_bad;
          8'h54: m_axil_rdata <= 32'(irq_status);
          8'h58: m_axil_rdata <= irq_enable;
          default: m_axil_rdata <= 32'hDEADBEEF;
        endcase
      end else if (m_axil_rvalid && m_axil_rready) m_axil_rvalid <= 0;
    end
  end
endmodule
