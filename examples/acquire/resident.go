package main

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// framestatsFuncPTX is framestats_func.cu as `make ptx` compiled it: the
// per-frame statistics as a function the GPU-resident consumer runs.
//
//go:embed framestats_func.ptx
var framestatsFuncPTX []byte

// residentDepth is how many fills' records may wait for the host.
const residentDepth = 64

// FrameCount counts the frames framestats_func checked where they
// landed, in fill order (acquire -resident -check); bad fills are the
// session's Stats.BadFills.
type FrameCount struct {
	mu  sync.Mutex
	acc frame.Checker
}

// Stats returns the counts so far.
func (c *FrameCount) Stats() frame.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acc.Stats
}

// ResidentFunc returns framestats as a resident session's function
// (acquire -resident): the GPU-resident consumer runs it on every fill as
// the fill lands, with no launch and no CPU work per slot, and every
// frame's record reaches fn, in order, on a goroutine of the consumer's.
// With check not nil, the function first checks every frame word by word
// (the library's gpufpga_frm1_check) and check counts them.
func ResidentFunc(slotSize uint64, frameSize, threshold int, check *FrameCount, fn func(Record)) (*stream.ResidentFunc, error) {
	if frameSize <= headerBytes || frameSize%4 != 0 || slotSize%uint64(frameSize) != 0 {
		return nil, fmt.Errorf("%w: frames of %d bytes in slots of %d: frames need a multiple of 4 bytes above the %d-byte header, and slots whole frames",
			stream.ErrConfig, frameSize, slotSize, headerBytes)
	}
	if check != nil && frameSize%16 != 0 {
		return nil, fmt.Errorf("%w: frames of %d bytes: the GPU checks frames of a multiple of 16 bytes", stream.ErrConfig, frameSize)
	}
	perSlot := int(slotSize / uint64(frameSize))
	state := make([]byte, 16) // struct framestats_state
	binary.LittleEndian.PutUint32(state, uint32(frameSize))
	binary.LittleEndian.PutUint32(state[4:], uint32(int32(threshold)))
	if check != nil {
		binary.LittleEndian.PutUint32(state[8:], 1)
	}
	return &stream.ResidentFunc{
		Name: "framestats_func.ptx", PTX: framestatsFuncPTX, State: state,
		OutSize: recordHeader + perSlot*recordBytes, OutDepth: residentDepth,
		OnRecord: func(_ uint64, rec []byte) {
			n := min(int(binary.LittleEndian.Uint64(rec)), perSlot)
			if check != nil {
				first, good := binary.LittleEndian.Uint64(rec[8:]), binary.LittleEndian.Uint64(rec[16:])
				check.mu.Lock()
				for i := range good {
					check.acc.Account(first+i, frameSize)
				}
				check.mu.Unlock()
			}
			for i := range n {
				fn(decodeRecord(rec[recordHeader+i*recordBytes:]))
			}
		},
	}, nil
}

// recordHeader is a fill's record's head: its frames, the first one's
// sequence number and the frames that passed their check.
const recordHeader = 24

// ConsumeResident waits for a resident session to end, stopping it once
// limit bytes have come (0: none): its consumer hands the records over by
// itself.
func ConsumeResident(s *stream.Session, limit uint64) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	filled := s.Filled() // nothing comes: it closes when the session ends
	for {
		select {
		case _, ok := <-filled:
			if !ok {
				return nil
			}
		case <-tick.C:
			if limit > 0 && s.Stats().Bytes >= limit {
				if err := s.Stop(); err != nil {
					return err
				}
			}
		}
	}
}
