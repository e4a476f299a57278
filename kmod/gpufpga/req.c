// SPDX-License-Identifier: GPL-2.0
/*
 * A request's bus segments: windows of pinned pages, merged where they
 * follow each other on the bus and split at the descriptor limit, and
 * checked against what the engine can address; and its last reference,
 * which lets its pins go.
 */
#include <linux/eventfd.h>
#include <linux/slab.h>

#include "gpufpga.h"

static void gpufpga_req_free(struct kref *ref)
{
	struct gpufpga_req *r = container_of(ref, struct gpufpga_req, ref);
	u32 i;

	for (i = 0; i < r->nmems; i++)
		gpufpga_mem_put(r->mems[i]);
	if (r->efd)
		eventfd_ctx_put(r->efd);
	if (r->mems != r->mem_inline)
		kfree(r->mems);
	if (r->segs != r->seg_inline)
		kvfree(r->segs);
	kfree(r);
}

/**
 * gpufpga_req_put - drop a reference to a request
 * @r: the request
 *
 * Context: process context where it may be the last: freeing a request
 * lets its pins go, which may sleep.
 */
void gpufpga_req_put(struct gpufpga_req *r)
{
	kref_put(&r->ref, gpufpga_req_free);
}

/*
 * Most chains are a few descriptors: they are built in the request itself,
 * and only a longer one moves to an array of the most it may take.
 */
static int gpufpga_req_grow(struct gpufpga_req *r, u32 max)
{
	struct gpufpga_busseg *segs = kvmalloc_array(max, sizeof(*segs), GFP_KERNEL_ACCOUNT);

	if (!segs)
		return -ENOMEM;
	memcpy(segs, r->segs, r->nsegs * sizeof(*segs));
	r->segs = segs;
	return 0;
}

/* Appends n bytes at bus address addr, merging with the last segment. */
static int gpufpga_append_bus(struct gpufpga_req *r, dma_addr_t addr, u64 n, u32 max)
{
	struct gpufpga_busseg *last = r->nsegs ? &r->segs[r->nsegs - 1] : NULL;
	u64 take;
	int ret;

	if (last && last->addr + last->len == addr) {
		take = min_t(u64, XDMA_DESC_SPLIT_LEN - last->len, n);
		last->len += take;
		addr += take;
		n -= take;
	}
	while (n) {
		if (r->nsegs == max)
			return -E2BIG;
		if (r->segs == r->seg_inline && r->nsegs == ARRAY_SIZE(r->seg_inline)) {
			ret = gpufpga_req_grow(r, max);
			if (ret)
				return ret;
		}
		take = min_t(u64, XDMA_DESC_SPLIT_LEN, n);
		r->segs[r->nsegs].addr = addr;
		r->segs[r->nsegs].len = take;
		r->nsegs++;
		addr += take;
		n -= take;
	}
	return 0;
}

/**
 * gpufpga_append_window - append a window of pinned pages to a request
 * @r: the request
 * @m: the pin
 * @off: the window's first byte in m's pages
 * @len: its bytes
 *
 * Context: process context, may sleep: a long chain's segments move to an
 * array of max_descs.
 * Return: 0; -E2BIG past max_descs segments; -ENOMEM.
 */
int gpufpga_append_window(struct gpufpga_req *r, struct gpufpga_mem *m, u64 off, u64 len)
{
	return gpufpga_append_window_limited(r, m, off, len, gpufpga_max_descs);
}

/**
 * gpufpga_append_window_limited - gpufpga_append_window(), up to max segments
 * @r: the request
 * @m: the pin
 * @off: the window's first byte in m's pages
 * @len: its bytes
 * @max: the most segments r may hold
 *
 * Context: process context, may sleep, as gpufpga_append_window().
 * Return: 0; -E2BIG past max segments; -ENOMEM.
 */
int gpufpga_append_window_limited(struct gpufpga_req *r, struct gpufpga_mem *m, u64 off,
				  u64 len, u32 max)
{
	u64 ps = m->page_size, page, n;
	dma_addr_t addr;
	int ret;

	while (len) {
		page = off / ps;
		addr = m->bus[page] + off % ps;
		n = min(len, ps - off % ps);
		while (n < len && gpufpga_bus_follows(m->bus[page], m->bus[page + 1], ps)) {
			page++;
			n = min(len, n + ps);
		}
		ret = gpufpga_append_bus(r, addr, n, max);
		if (ret)
			return ret;
		off += n;
		len -= n;
	}
	return 0;
}

/**
 * gpufpga_check_alignment - whether the engine can run every segment
 * @ch: the channel
 * @segs: the segments, one descriptor each
 * @nsegs: how many
 * @card: the card address of the first, on a memory-mapped channel
 *
 * As the engine's ALIGNMENTS register allows: each bus address and, on a
 * memory-mapped channel, card address aligned, each length a multiple of
 * the granularity.
 *
 * Context: any.
 * Return: 0, or -EINVAL.
 */
int gpufpga_check_alignment(const struct gpufpga_chan *ch, const struct gpufpga_busseg *segs,
			    u32 nsegs, u64 card)
{
	u32 i;

	if (ch->addr_align == 1 && ch->len_gran == 1)
		return 0;
	for (i = 0; i < nsegs; i++) {
		if (segs[i].addr % ch->addr_align || segs[i].len % ch->len_gran)
			goto bad;
		if (!ch->stream && card % ch->addr_align)
			goto bad;
		card += segs[i].len;
	}
	return 0;
bad:
	dev_info_ratelimited(&ch->dev->pdev->dev, "%s channel %u takes %u-byte aligned addresses and lengths in %u-byte steps\n",
			     ch->dir ? "C2H" : "H2C", ch->index, ch->addr_align, ch->len_gran);
	return -EINVAL;
}
