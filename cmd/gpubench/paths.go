package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/gpucheck"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

type checkRun struct {
	FrameSize   int         `json:"frame_size"`
	Bytes       uint64      `json:"bytes"`
	Reps        int         `json:"reps"`
	GBps        float64     `json:"gb_per_s"`
	DtoDGBps    float64     `json:"dtod_gb_per_s"`
	RatioToDtoD float64     `json:"ratio_to_dtod"`
	Frames      frame.Stats `json:"frames"`
}

// encodeFrames fills b with consecutive frames, on every CPU.
func encodeFrames(b []byte, frameSize int) {
	n := len(b) / frameSize
	var wg sync.WaitGroup
	per := (n + runtime.NumCPU() - 1) / runtime.NumCPU()
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				frame.Encode(b[i*frameSize:], uint64(i), uint64(i), frameSize-frame.HeaderSize)
			}
		}(lo, min(lo+per, n))
	}
	wg.Wait()
}

// benchChecker times the frame checker over size bytes of frames already
// in device memory, against the device-to-device copy rate of the same
// run, and verifies that it found every frame intact.
func benchChecker(g *cuda.Device, s *cuda.Stream, hb *cuda.HostBuffer, dst *cuda.Buffer, size uint64, frameSize int, d2d float64) (checkRun, error) {
	const reps = 8
	r := checkRun{FrameSize: frameSize, Bytes: size, Reps: reps, DtoDGBps: d2d}
	encodeFrames(hb.Bytes[:size], frameSize)
	if err := s.CopyHtoD(dst.Ptr, hb.Bytes[:size]); err != nil {
		return r, err
	}
	frames := int(size) / frameSize
	c, err := gpucheck.New(g, frameSize, frames)
	if err != nil {
		return r, err
	}
	defer c.Close()
	start, _ := g.NewEvent()
	end, _ := g.NewEvent()
	defer start.Close()
	defer end.Close()
	var total float64
	for i := range reps + 1 {
		start.Record(s)
		if err := c.Launch(s, dst.Ptr, size); err != nil {
			return r, err
		}
		end.Record(s)
		ms, err := end.Since(start)
		if err != nil {
			return r, err
		}
		if err := c.Collect(s); err != nil {
			return r, err
		}
		if i == 0 {
			// The first run is a warm-up; it alone sees the frames in order.
			r.Frames = c.Stats()
			continue
		}
		total += float64(ms)
	}
	if r.Frames.Frames != uint64(frames) || r.Frames.CRCFailures != 0 || r.Frames.Gaps != 0 {
		return r, fmt.Errorf("checker found %+v in %d good frames", r.Frames, frames)
	}
	r.GBps = float64(size) * reps / (total / 1000) / 1e9
	r.RatioToDtoD = r.GBps / d2d
	return r, nil
}

type compatRun struct {
	SlotSize      int         `json:"slot_size"`
	Slots         int         `json:"slots"`
	FrameSize     int         `json:"frame_size"`
	CopyStreams   int         `json:"copy_streams"`
	SourceWorkers int         `json:"source_workers"`
	Seconds       float64     `json:"seconds"`
	SourceGBps    float64     `json:"source_alone_gb_per_s"`
	GBps          float64     `json:"gb_per_s"`
	PeakGBps      float64     `json:"pinned_htod_peak_gb_per_s"`
	RatioToPeak   float64     `json:"ratio_to_peak"`
	Generated     uint64      `json:"frames_generated"`
	Frames        frame.Stats `json:"frames_checked_on_gpu"`
	MaxHeld       int         `json:"max_held"`
	SlotLatencyUs float64     `json:"mean_slot_latency_us"`
}

// benchCompat runs the compat path for a few seconds: the device model
// writes frames into a host ring in process, the session copies each slot
// to the GPU and checks its frames there, and the consumer releases it.
// The source is first run alone, so its own ceiling is on record.
type compatConfig struct{ slots, slotSize, workers, streams int }

func benchCompat(g *cuda.Device, cc compatConfig, peak float64) (*compatRun, error) {
	r := &compatRun{SlotSize: cc.slotSize, Slots: cc.slots, FrameSize: 64 << 10, CopyStreams: cc.streams,
		SourceWorkers: cc.workers, PeakGBps: peak}
	const run = 4 * time.Second
	host, err := unix.Mmap(-1, 0, r.SlotSize*r.Slots, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(host)
	newSource := func() (*acq.HostRing, error) {
		return acq.NewHostRing(acq.HostRingConfig{Ring: host, Slots: r.Slots, SlotSize: r.SlotSize, FrameSize: r.FrameSize,
			Workers: r.SourceWorkers})
	}

	src, err := newSource()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var n uint64
	for sl := range src.Slots() {
		n += sl.Bytes
		src.Release(sl.Index)
		if time.Since(t0) > run/2 {
			src.Stop()
		}
	}
	r.SourceGBps = float64(n) / time.Since(t0).Seconds() / 1e9

	gpu, err := stream.NewCUDA(g, r.CopyStreams)
	if err != nil {
		return nil, err
	}
	defer gpu.Close()
	if src, err = newSource(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	s, err := stream.Attach(ctx, stream.Config{SlotSize: uint64(r.SlotSize), Slots: r.Slots, GPU: gpu,
		Check: stream.CheckGPU, FrameSize: r.FrameSize}, host, src)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for f := range s.Filled() {
		if err := s.Release(f.Slot); err != nil {
			return nil, err
		}
	}
	if err := s.Err(); err != nil && err != context.DeadlineExceeded {
		return nil, err
	}
	st := s.Stats()
	r.Seconds = st.Elapsed.Seconds()
	r.GBps = st.GBps
	r.RatioToPeak = st.GBps / peak
	r.Generated = src.Generated()
	r.Frames = st.Frames
	r.MaxHeld = st.MaxHeld
	r.SlotLatencyUs = float64(st.SlotLatency.Nanoseconds()) / 1e3
	if st.Frames.Frames != r.Generated || st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
		return r, fmt.Errorf("frames generated %d, checked %+v", r.Generated, st.Frames)
	}
	return r, nil
}
