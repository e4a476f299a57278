package doctor

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
)

// minBAR1 is the smallest BAR1 worth peer DMA: GPUs without Resizable BAR
// expose 256 MiB, shared with the driver's own mappings.
const minBAR1 = 256 << 20

var nvVersionRE = regexp.MustCompile(`\s(\d+\.\d+(?:\.\d+)?)\s`)

// gpu checks the NVIDIA driver and each NVIDIA GPU.
func (d *diagnosis) gpu(ctx context.Context, gpus []pciDev) error {
	if len(gpus) == 0 {
		d.add("gpu.device", "", Warn, "no NVIDIA GPU found", "check lspci -d 10de: and that the GPU is powered")
		return nil
	}
	d.nvidiaDriver()
	for _, g := range gpus {
		var info *GPU
		var cudaErr error
		switch {
		case d.cfg.CUDA == nil:
			cudaErr = d.cfg.CUDAErr
			if cudaErr == nil {
				cudaErr = errors.New("no CUDA driver")
			}
		default:
			gi, err := d.cfg.CUDA.GPU(ctx, g.BDF)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil {
				info = &gi
			}
			cudaErr = err
		}
		d.gpuDevice(g, info)
		d.gpuBAR1(g, info)
		d.gpuAttrs(g, info, cudaErr)
		d.gpuOrdering(g, info)
	}
	return nil
}

// nvidiaDriver reads the kernel driver's version, and whether it is the
// open kernel module, which alone lets CUDA export dma-bufs.
func (d *diagnosis) nvidiaDriver() {
	s, err := d.h.read("proc/driver/nvidia/version")
	if err != nil {
		d.add("gpu.driver", "nvidia", Warn, "nvidia kernel module not loaded", "install NVIDIA's driver, the open kernel module flavour (nvidia-open)")
		return
	}
	first, _, _ := strings.Cut(s, "\n")
	v := "unknown version"
	if m := nvVersionRE.FindStringSubmatch(first + " "); m != nil {
		v = m[1]
	}
	if strings.Contains(first, "Open Kernel Module") {
		d.add("gpu.driver", "nvidia", OK, v+", open kernel module", "")
		return
	}
	d.add("gpu.driver", "nvidia", Warn, v+", proprietary kernel module",
		"CUDA exports dma-bufs only from the open kernel module (nvidia-open); pins fall back to nvidia_p2p, which CUDA 13 deprecates")
}

func (d *diagnosis) gpuDevice(g pciDev, info *GPU) {
	kind := "display controller"
	switch g.Class >> 8 {
	case 0x0300:
		kind = "VGA controller"
	case 0x0302:
		kind = "3D controller"
	}
	summary := fmt.Sprintf("%04x:%04x %s", g.Vendor, g.Device, kind)
	if info != nil && info.Name != "" {
		summary = info.Name + ", " + summary
	}
	switch g.Driver {
	case "nvidia":
		d.add("gpu.device", g.BDF, OK, summary+", driver nvidia", "")
	case "":
		d.add("gpu.device", g.BDF, Fail, summary+", bound to no driver", "load nvidia (modprobe nvidia)")
	default:
		d.add("gpu.device", g.BDF, Fail, summary+", bound to "+g.Driver, "peer DMA needs NVIDIA's driver: blacklist "+g.Driver+" and load nvidia")
	}
}

func (d *diagnosis) gpuBAR1(g pciDev, info *GPU) {
	bars, err := d.h.bars(g)
	if err != nil {
		d.add("gpu.bar1", g.BDF, Warn, fmt.Sprintf("BAR1 not read: %v", err), "")
		return
	}
	// BAR1 is NVIDIA's name for the second memory BAR, whose register
	// index is 2 where BAR0 is 64-bit (as on H100 and H200) and 1 where
	// it is 32-bit.
	var size uint64
	if mem := memoryBARs(bars); len(mem) > 1 {
		size = mem[1].Size
	}
	ring := d.cfg.RingSize
	summary := fmt.Sprintf("BAR1 %s", units.Bytes(size))
	if info != nil && info.BAR1Free != 0 {
		summary += fmt.Sprintf(" (%s free)", units.Bytes(info.BAR1Free))
	}
	summary += fmt.Sprintf(", ring %s", units.Bytes(ring))
	const rebar = "enable Resizable BAR and Above 4G Decoding in the BIOS"
	switch {
	case size == 0:
		d.add("gpu.bar1", g.BDF, Fail, "BAR1 not assigned", rebar)
	case size < ring:
		d.add("gpu.bar1", g.BDF, Warn, summary+": the ring does not fit", rebar+", or ask for a smaller --ring-size")
	case size < minBAR1:
		d.add("gpu.bar1", g.BDF, Warn, summary+fmt.Sprintf(": under %s", units.Bytes(minBAR1)), rebar)
	case info != nil && info.BAR1Free != 0 && info.BAR1Free < ring:
		d.add("gpu.bar1", g.BDF, Warn, summary+": not enough BAR1 free for the ring", "other processes hold BAR1 mappings (nvidia-smi -q -d MEMORY), or "+rebar)
	default:
		d.add("gpu.bar1", g.BDF, OK, summary, "")
	}
}

// The WritesOrdering a GPU-resident consumer needs: its own kernels see a
// peer's writes into its memory in the order they were made, the slot's
// data before its result (kmod/gpufpga/uapi/gpufpga_resident.h).
const orderingOwner = 100

// gpuOrdering reports whether the GPU can consume a stream itself
// (GPU-resident streams): the order in which its kernels see a peer's
// writes, and the flushes it offers.
func (d *diagnosis) gpuOrdering(g pciDev, info *GPU) {
	if info == nil || (!info.RDMASupported && !info.DmaBuf) {
		return // gpu.rdma says why already
	}
	var flush []string
	if info.FlushOptions&1 != 0 {
		flush = append(flush, "host")
	}
	if info.FlushOptions&2 != 0 {
		flush = append(flush, "stream memory operations")
	}
	if len(flush) == 0 {
		flush = []string{"none"}
	}
	order := map[int]string{0: "none", 100: "owner", 200: "all devices"}[info.WritesOrdering]
	if order == "" {
		order = fmt.Sprint(info.WritesOrdering)
	}
	summary := fmt.Sprintf("peer writes ordering %s (%d), flushes: %s", order, info.WritesOrdering, strings.Join(flush, ", "))
	if info.WritesOrdering < orderingOwner {
		d.add("gpu.ordering", g.BDF, Warn, summary+": GPU-resident streams are refused on this GPU",
			"its kernels may see a slot's result before its data; consume streams from the CPU (the default)")
		return
	}
	d.add("gpu.ordering", g.BDF, OK, summary+": GPU-resident streams can run here", "")
}

func (d *diagnosis) gpuAttrs(g pciDev, info *GPU, cudaErr error) {
	if info == nil {
		d.add("gpu.rdma", g.BDF, Warn, fmt.Sprintf("RDMA and dma-buf support not read: %v", cudaErr),
			"install NVIDIA's user-space driver (libcuda.so.1) to read them")
		return
	}
	yes := map[bool]string{true: "yes", false: "no"}
	// What p2pctl and pkg/stream pick by default (stream.ChoosePinning).
	via := "nvidia_p2p"
	if info.DmaBuf {
		via = "a dma-buf"
	}
	summary := fmt.Sprintf("GPUDirect RDMA %s, dma-buf %s: GPU memory is pinned through %s", yes[info.RDMASupported], yes[info.DmaBuf], via)
	if !info.RDMASupported && !info.DmaBuf {
		summary = "GPUDirect RDMA no, dma-buf no"
	}
	switch {
	case !info.RDMASupported && !info.DmaBuf:
		d.add("gpu.rdma", g.BDF, Fail, summary, "this GPU lends its memory to no peer: GeForce parts refuse GPUDirect RDMA; use a workstation or data-center GPU")
	case !info.DmaBuf:
		d.add("gpu.rdma", g.BDF, Warn, summary, "dma-buf export needs the open kernel module and CUDA 12 or later; pins use nvidia_p2p meanwhile")
	case !info.RDMASupported:
		d.add("gpu.rdma", g.BDF, Warn, summary, "pins use dma-buf only")
	default:
		d.add("gpu.rdma", g.BDF, OK, summary, "")
	}
}
