package doctor

import "slices"

// gpufpgaIDs are the Xilinx device IDs gpufpga's module binds: the
// gpufpga_ids table in kmod/gpufpga/main.c, Xilinx's XDMA reference-design
// IDs. TestDeviceIDsMatchDriver reads that table and fails when the two
// differ.
var gpufpgaIDs = [...]uint16{
	0x9011, 0x9012, 0x9014, 0x9018, 0x901f, 0x9021, 0x9022, 0x9024,
	0x9028, 0x902f, 0x9031, 0x9032, 0x9034, 0x9038, 0x903f, 0x9041,
	0x9042, 0x9044, 0x9048, 0x8011, 0x8012, 0x8014, 0x8018, 0x8021,
	0x8022, 0x8024, 0x8028, 0x8031, 0x8032, 0x8034, 0x8038, 0x7011,
	0x7012, 0x7014, 0x7018, 0x7021, 0x7022, 0x7024, 0x7028, 0x7031,
	0x7032, 0x7034, 0x7038,
}

// claims reports whether gpufpga's ID table matches a function of this
// vendor and device ID, as the PCI core would match it.
func claims(vendor, device uint16) bool {
	return vendor == vendorXilinx && slices.Contains(gpufpgaIDs[:], device)
}
