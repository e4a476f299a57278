// Package rtlguest is the guest side of the rig with a user's RTL in it
// (hw/testbench/rtlbridge, the example design): the shipped driver streams
// the design's frames into simulated GPU memory while the test reaches the
// design's registers through the user BAR, and the design's own counters
// account for every frame. vmtest's TestRTL boots it.
package rtlguest
