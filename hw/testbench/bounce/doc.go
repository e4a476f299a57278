// Package bounce holds the guest test of gpufpga on a platform whose DMA
// goes through SWIOTLB bounce buffers (swiotlb=force): the rig boots it
// separately, through vmtest's TestBounceBuffers.
package bounce
