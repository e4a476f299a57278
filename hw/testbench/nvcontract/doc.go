// Package nvcontract holds guest tests of gpufpga against NVIDIA's P2P
// contract as the strict simulated GPU plays it: next to a proprietary
// driver, a driver without persistent pins, a free callback that fires
// before get_pages returns, and frees under running transfers and streams.
package nvcontract
