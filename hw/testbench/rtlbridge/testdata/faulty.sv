// A design that breaks the AXI-Stream rules the XDMA IP holds its user to,
// in the way MODE (written at AXI-Lite 0x0) picks: 0 never asserts tvalid,
// 1 leaves a tkeep hole in the middle of a packet, 2 never asserts tlast,
// 3 never answers an AXI-Lite read.
// The bridge's tests check that each gets its own clear error.
module faulty (
    input  logic        axi_aclk,
    input  logic        axi_aresetn,
    output logic [63:0] s_axis_c2h_tdata_0,
    output logic [7:0]  s_axis_c2h_tkeep_0,
    output logic        s_axis_c2h_tlast_0,
    output logic        s_axis_c2h_tvalid_0,
    input  logic        s_axis_c2h_tready_0,
    input  logic [63:0] m_axis_h2c_tdata_0,
    input  logic [7:0]  m_axis_h2c_tkeep_0,
    input  logic        m_axis_h2c_tlast_0,
    input  logic        m_axis_h2c_tvalid_0,
    output logic        m_axis_h2c_tready_0,
    input  logic [31:0] m_axil_awaddr,
    input  logic        m_axil_awvalid,
    output logic        m_axil_awready,
    input  logic [31:0] m_axil_wdata,
    input  logic [3:0]  m_axil_wstrb,
    input  logic        m_axil_wvalid,
    output logic        m_axil_wready,
    output logic [1:0]  m_axil_bresp,
    output logic        m_axil_bvalid,
    input  logic        m_axil_bready,
    input  logic [31:0] m_axil_araddr,
    input  logic        m_axil_arvalid,
    output logic        m_axil_arready,
    output logic [31:0] m_axil_rdata,
    output logic [1:0]  m_axil_rresp,
    output logic        m_axil_rvalid,
    input  logic        m_axil_rready,
    output logic [0:0]  usr_irq_req,
    input  logic [0:0]  usr_irq_ack
);
  logic [1:0] mode;
  logic [31:0] beat;
  logic armed;

  assign s_axis_c2h_tvalid_0 = armed && (mode == 1 || mode == 2);
  assign s_axis_c2h_tdata_0 = {32'd0, beat};
  assign s_axis_c2h_tkeep_0 = mode == 1 && beat == 1 ? 8'h0F : 8'hFF;
  assign s_axis_c2h_tlast_0 = mode == 1 && beat == 3;
  always_ff @(posedge axi_aclk)
    if (!axi_aresetn) beat <= 0;
    else if (s_axis_c2h_tvalid_0 && s_axis_c2h_tready_0) beat <= s_axis_c2h_tlast_0 ? 0 : beat + 1;

  assign m_axis_h2c_tready_0 = 1;
  assign usr_irq_req = 0;
  // Write-only AXI-Lite: address and data together.
  assign m_axil_awready = m_axil_awvalid && m_axil_wvalid && !m_axil_bvalid;
  assign m_axil_wready = m_axil_awready;
  assign m_axil_bresp = 0;
  assign m_axil_arready = !m_axil_rvalid && mode != 3;
  assign m_axil_rdata = {30'd0, mode};
  assign m_axil_rresp = 0;
  always_ff @(posedge axi_aclk)
    if (!axi_aresetn) begin
      mode <= 0; armed <= 0; m_axil_bvalid <= 0; m_axil_rvalid <= 0;
    end else begin
      if (m_axil_awready) begin mode <= m_axil_wdata[1:0]; armed <= 1; m_axil_bvalid <= 1; end
      else if (m_axil_bready) m_axil_bvalid <= 0;
      if (m_axil_arvalid && m_axil_arready) m_axil_rvalid <= 1;
      else if (m_axil_rready) m_axil_rvalid <= 0;
    end
endmodule
