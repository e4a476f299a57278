// CRC32C (Castagnoli, reflected 0x82F63B78) over the bytes of a beat that a
// mask selects, one table lookup per byte: what pkg/frame computes.
function automatic logic [31:0] crc32c_byte(input logic [31:0] c, input logic [7:0] b);
  logic [31:0] r;
  r = c ^ {24'd0, b};
  for (int k = 0; k < 8; k++)
    r = r[0] ? (r >> 1) ^ 32'h82F63B78 : r >> 1;
  return r;
endfunction
