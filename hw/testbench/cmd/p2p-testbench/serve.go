package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/devmodel"
)

func newServeCmd() *cobra.Command {
	cfg := devmodel.Config{}
	var ramMiB, vramMiB, cardMiB, payload int
	var rate float64
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the simulated FPGA and GPU for a QEMU started by hand",
		Long: `serve runs the XDMA device model and creates the backing files of guest RAM
and the simulated GPU's VRAM in --dir, then prints the QEMU options that attach
them. Start QEMU with those options (and -accel tcg); stop serve with Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.GuestRAM = int64(ramMiB) << 20
			cfg.VRAM = int64(vramMiB) << 20
			cfg.CardMem = cardMiB << 20
			cfg.Source = acq.SourceConfig{PayloadLen: payload, Rate: rate}
			if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
				return err
			}
			rig, err := devmodel.New(cfg)
			if err != nil {
				return err
			}
			defer rig.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "qemu-system-x86_64 -accel tcg -cpu max %s ...\n", strings.Join(rig.QEMUArgs(), " "))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := rig.Serve(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "QEMU connected; serving until interrupted")
			<-ctx.Done()
			late, _ := rig.LateWrites()
			fmt.Fprintf(cmd.OutOrStdout(), "late DMA writes into free VRAM: %d\n", late)
			return rig.Err()
		},
	}
	cmd.Flags().StringVar(&cfg.Dir, "dir", "/dev/shm/gpufpga-rig", "directory for sockets and backing files")
	cmd.Flags().IntVar(&ramMiB, "ram", 1024, "guest RAM in MiB (at most 2048)")
	cmd.Flags().IntVar(&vramMiB, "vram", 256, "simulated VRAM in MiB (a power of two)")
	cmd.Flags().IntVar(&cardMiB, "card", 64, "card memory in MiB")
	cmd.Flags().IntVar(&payload, "payload", 4064, "stream frame payload in bytes")
	cmd.Flags().Float64Var(&rate, "rate", 0, "stream frames per second (0: as fast as read)")
	return cmd
}
