package doctor

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// driverIDs reads the device IDs of the gpufpga_ids table in main.c's
// source: every entry must be XDMA_DEVICE(0xNNNN), a Xilinx ID, so that an
// entry of another form fails here rather than going unread.
func driverIDs(src string) ([]uint16, error) {
	macro := regexp.MustCompile(`(?m)^#define XDMA_DEVICE\(id\) \{ PCI_DEVICE\(PCI_VENDOR_ID_XILINX, id\) \}$`)
	if !macro.MatchString(src) {
		return nil, errors.New("XDMA_DEVICE is no longer PCI_DEVICE(PCI_VENDOR_ID_XILINX, id)")
	}
	_, rest, ok := strings.Cut(src, "static const struct pci_device_id gpufpga_ids[] = {")
	if !ok {
		return nil, errors.New("no gpufpga_ids table")
	}
	body, _, ok := strings.Cut(rest, "};")
	if !ok {
		return nil, errors.New("gpufpga_ids has no end")
	}
	entry := regexp.MustCompile(`XDMA_DEVICE\(0x([0-9a-fA-F]{4})\)`)
	var ids []uint16
	for _, m := range entry.FindAllStringSubmatch(body, -1) {
		v, err := strconv.ParseUint(m[1], 16, 16)
		if err != nil {
			return nil, err
		}
		ids = append(ids, uint16(v))
	}
	// What is left is separators and the terminating { }.
	for _, line := range strings.Split(strings.ReplaceAll(entry.ReplaceAllString(body, ""), "{ }", ""), "\n") {
		if left := strings.Trim(line, ", \t"); left != "" {
			return nil, errors.New("gpufpga_ids has an entry that is not XDMA_DEVICE(0xNNNN): " + left)
		}
	}
	return ids, nil
}

// The IDs doctor says gpufpga claims are the driver's own.
func TestDeviceIDsMatchDriver(t *testing.T) {
	src, err := os.ReadFile("../../../../kmod/gpufpga/main.c")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := driverIDs(string(src))
	if err != nil {
		t.Fatalf("kmod/gpufpga/main.c: %v", err)
	}
	if len(ids) == 0 {
		t.Fatal("kmod/gpufpga/main.c: gpufpga_ids is empty")
	}
	for _, id := range ids {
		if !slices.Contains(gpufpgaIDs[:], id) {
			t.Errorf("the driver claims 10ee:%04x, doctor does not know it", id)
		}
	}
	for _, id := range gpufpgaIDs {
		if !slices.Contains(ids, id) {
			t.Errorf("doctor says gpufpga claims 10ee:%04x, the driver does not", id)
		}
	}
	if !claims(vendorXilinx, 0x9038) || claims(vendorXilinx, 0x7777) || claims(vendorNVIDIA, 0x9038) {
		t.Error("claims matches the wrong functions")
	}
}

// The parser refuses a table it cannot read whole.
func TestDriverIDsParse(t *testing.T) {
	const macro = "#define XDMA_DEVICE(id) { PCI_DEVICE(PCI_VENDOR_ID_XILINX, id) }\n"
	for _, tc := range []struct {
		src string
		ids []uint16
		err string
	}{
		{macro + "static const struct pci_device_id gpufpga_ids[] = {\n\tXDMA_DEVICE(0x9038), XDMA_DEVICE(0x7011),\n\t{ }\n};\n",
			[]uint16{0x9038, 0x7011}, ""},
		{macro + "static const struct pci_device_id gpufpga_ids[] = {\n\tXDMA_DEVICE(0x9038), { PCI_DEVICE(0x1234, 0x5678) },\n\t{ }\n};\n",
			nil, "gpufpga_ids has an entry that is not XDMA_DEVICE(0xNNNN): { PCI_DEVICE(0x1234, 0x5678) }"},
		{"#define XDMA_DEVICE(id) { PCI_DEVICE(0x1234, id) }\nstatic const struct pci_device_id gpufpga_ids[] = {\n};\n",
			nil, "XDMA_DEVICE is no longer PCI_DEVICE(PCI_VENDOR_ID_XILINX, id)"},
		{macro, nil, "no gpufpga_ids table"},
	} {
		ids, err := driverIDs(tc.src)
		if msg := ""; err != nil {
			msg = err.Error()
			if msg != tc.err {
				t.Errorf("%q: error %q, want %q", tc.src, msg, tc.err)
			}
		} else if tc.err != "" || !slices.Equal(ids, tc.ids) {
			t.Errorf("%q: %04x, nil; want %04x, %q", tc.src, ids, tc.ids, tc.err)
		}
	}
}
