package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/doctor"
	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// doctorEnv replaces what doctor asks beyond the file system, for tests.
type doctorEnv struct {
	device doctor.Device
	cuda   doctor.CUDA
}

func newDoctorCmd(g *globals) *cobra.Command {
	ring := sizeValue(256 << 20)
	var root string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the platform: driver, FPGA link, GPU BAR1, PCIe path, ACS, IOMMU, memlock",
		Long: `doctor checks what FPGA-GPU peer DMA needs of this host and prints each
check as OK, WARN or FAIL with a hint. It exits 3 when a check fails.
Run it as root to read MPS, MRRS and ACS from config space.

` + sizeHelp,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ring == 0 {
				return usageErr("--ring-size must be more than 0")
			}
			cfg := doctor.Config{
				Root: os.DirFS(root), RingSize: uint64(ring), ABI: p2p.ABIVersion,
				Device: p2pDevice{root},
			}
			if env := g.opts.doctor; env != nil {
				cfg.Device, cfg.CUDA = env.device, env.cuda
			} else if drv, err := cuda.Open(); err != nil {
				cfg.CUDAErr = err
			} else {
				cfg.CUDA = cudaGPUs{drv}
			}
			r, err := doctor.Diagnose(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if err := g.emit(r, func(w io.Writer) { r.WriteText(w) }); err != nil {
				return err
			}
			if r.Counts.Fail > 0 {
				return &exitError{ExitDevice, fmt.Errorf("doctor: %d of %d checks failed", r.Counts.Fail, len(r.Checks))}
			}
			return nil
		},
	}
	cmd.Flags().Var(&ring, "ring-size", "GPU memory the ring will pin, checked against BAR1 and the memlock limit")
	// Another root reads a copy of a host's /sys, /proc and /dev: tests'
	// fixtures, or a tree a user sent.
	cmd.Flags().StringVar(&root, "root", "/", "read sysfs, procfs and /dev below this directory")
	cmd.Flags().MarkHidden("root")
	return cmd
}

// p2pDevice reads the ABI of a node below root through the INFO ioctl.
type p2pDevice struct{ root string }

func (p p2pDevice) ABI(_ context.Context, node string) (uint32, error) {
	// INFO does not block: the context has nothing to cancel.
	d, err := p2p.Open(filepath.Join(p.root, node))
	var ae *p2p.ABIError
	if errors.As(err, &ae) && ae.Version != 0 {
		// A driver of another ABI: Open refuses it, doctor names it.
		return ae.Version, nil
	}
	if err != nil {
		return 0, err
	}
	defer d.Close()
	info, err := d.Info()
	if err != nil {
		return 0, err
	}
	return info.ABIVersion, nil
}

// cudaGPUs finds GPUs in the CUDA driver by PCI address, without creating
// a context on any of them.
type cudaGPUs struct{ drv *cuda.Driver }

func (c cudaGPUs) GPU(ctx context.Context, bdf string) (doctor.GPU, error) {
	if err := ctx.Err(); err != nil {
		return doctor.GPU{}, err
	}
	g, err := c.drv.DeviceAt(bdf)
	if errors.Is(err, cuda.ErrorInvalidDevice) || errors.Is(err, cuda.ErrorInvalidValue) {
		return doctor.GPU{}, fmt.Errorf("not among the CUDA driver's devices (CUDA_VISIBLE_DEVICES?): %w", err)
	}
	if err != nil {
		return doctor.GPU{}, err
	}
	defer g.Close()
	var gi doctor.GPU
	if gi.Name, err = g.Name(); err != nil {
		return gi, err
	}
	rdma, err := g.Attribute(cuda.AttrGPUDirectRDMASupported)
	if err != nil {
		return gi, err
	}
	if gi.DmaBuf, err = g.DmabufSupported(); err != nil {
		return gi, err
	}
	gi.RDMASupported = rdma != 0
	order, flush, err := g.RDMAOrdering()
	if err != nil {
		return gi, err
	}
	gi.WritesOrdering, gi.FlushOptions = int(order), int(flush)
	// BAR1's free space comes from NVML, which may be missing: then
	// doctor checks the size alone.
	if b, err := g.BAR1(); err == nil {
		gi.BAR1Free = b.Free
	}
	return gi, nil
}
