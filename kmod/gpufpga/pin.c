// SPDX-License-Identifier: GPL-2.0
/*
 * Pins: GPU memory through NVIDIA's P2P API, host memory through
 * pin_user_pages, and dma-bufs through a peer-to-peer dynamic attachment.
 * Each kind ends as the same thing: the bus address of every page, which is
 * all a transfer uses.
 */
#include <linux/dma-resv.h>
#include <linux/iommu.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>

#include "compat.h"
#include "gpufpga.h"
#include "trace.h"

/* The DMA mapping layout this driver reads (nv-p2p.h). */
#define GPUFPGA_NV_MAP_MAJOR	NVIDIA_P2P_MAJOR_VERSION(NVIDIA_P2P_DMA_MAPPING_VERSION)
#define GPUFPGA_NV_MAP_MINOR	NVIDIA_P2P_MINOR_VERSION(NVIDIA_P2P_DMA_MAPPING_VERSION)

GPUFPGA_IMPORT_DMA_BUF_NS();

static DEFINE_MUTEX(gpufpga_nv_lock);
static const struct gpufpga_nv_ops *gpufpga_nv;

/**
 * gpufpga_register_nv - hand gpufpga NVIDIA's P2P entry points
 * @ops: the bridge's, which stay until gpufpga_unregister_nv()
 *
 * Context: process context; takes gpufpga_nv_lock.
 * Return: 0, or -EBUSY where another bridge registered first.
 */
int gpufpga_register_nv(const struct gpufpga_nv_ops *ops)
{
	int ret = 0;

	mutex_lock(&gpufpga_nv_lock);
	if (gpufpga_nv)
		ret = -EBUSY;
	else
		gpufpga_nv = ops;
	mutex_unlock(&gpufpga_nv_lock);
	if (!ret)
		pr_notice("gpufpga: GPU pins available through NVIDIA P2P\n");
	return ret;
}

/* Not GPL-only: the bridge links NVIDIA's proprietary exports too. */
EXPORT_SYMBOL(gpufpga_register_nv);

/**
 * gpufpga_unregister_nv - take NVIDIA's P2P entry points back
 * @ops: as registered
 *
 * Pins hold the bridge module, so none is left when it unloads.
 *
 * Context: process context; takes gpufpga_nv_lock.
 */
void gpufpga_unregister_nv(const struct gpufpga_nv_ops *ops)
{
	mutex_lock(&gpufpga_nv_lock);
	if (gpufpga_nv == ops)
		gpufpga_nv = NULL;
	mutex_unlock(&gpufpga_nv_lock);
}
EXPORT_SYMBOL(gpufpga_unregister_nv);

/* A pin holds the bridge module, so it cannot unload under the pin. */
static const struct gpufpga_nv_ops *gpufpga_nv_get(void)
{
	const struct gpufpga_nv_ops *ops;

	mutex_lock(&gpufpga_nv_lock);
	ops = gpufpga_nv;
	if (ops && !try_module_get(ops->owner))
		ops = NULL;
	mutex_unlock(&gpufpga_nv_lock);
	return ops;
}

static void gpufpga_nv_put(const struct gpufpga_nv_ops *ops)
{
	module_put(ops->owner);
}

/**
 * gpufpga_pin_kinds - the kinds of memory the driver can pin now
 *
 * Context: process context; takes gpufpga_nv_lock.
 * Return: a mask of BIT(GPUFPGA_PIN_*): GPU pins only with a bridge.
 */
u32 gpufpga_pin_kinds(void)
{
	const struct gpufpga_nv_ops *ops = gpufpga_nv_get();
	u32 kinds = BIT(GPUFPGA_PIN_HOST) | BIT(GPUFPGA_PIN_DMABUF);

	if (ops) {
		kinds |= BIT(GPUFPGA_PIN_GPU);
		gpufpga_nv_put(ops);
	}
	return kinds;
}

/*
 * Revocation: the memory behind m is going away. Stop every transfer that
 * touches it before returning: afterwards its pages belong to someone else.
 */
static void gpufpga_mem_revoke(struct gpufpga_mem *m)
{
	spin_lock(&m->lock);
	WRITE_ONCE(m->state, GPUFPGA_MEM_REVOKING);
	spin_unlock(&m->lock);

	gpufpga_chan_stop_all(m->dev, NULL, m, -EKEYREVOKED);

	spin_lock(&m->lock);
	WRITE_ONCE(m->state, GPUFPGA_MEM_REVOKED);
	spin_unlock(&m->lock);
	trace_gpufpga_revoke(m->dev->id, m->handle, m->kind, m->len);
}

/*
 * NVIDIA's free callback, run under NVIDIA's locks (which its get_pages,
 * put_pages and dma_(un)map_pages also take), possibly before get_pages
 * has returned to us. NVIDIA frees the table and mappings once we return:
 * mark them gone under m->lock, the lock every reader of them holds, then
 * stop the DMA that uses them. It takes no lock that is held across a call
 * into NVIDIA.
 */
static void gpufpga_nv_free_callback(void *data)
{
	struct gpufpga_mem *m = data;
	const struct gpufpga_nv_ops *ops;
	bool orphaned;

	spin_lock(&m->lock);
	m->nv.freed = true;
	orphaned = m->nv.orphaned;
	spin_unlock(&m->lock);
	if (orphaned) {
		/*
		 * Unpinned, but NVIDIA refused the put_pages: nothing uses m,
		 * and the references the unpin left for this call go now.
		 */
		ops = m->nv.ops;
		gpufpga_mem_put(m);
		gpufpga_nv_put(ops);
		return;
	}
	gpufpga_mem_revoke(m);
	complete_all(&m->nv.callback_done);	/* m may be freed from here on */
}

/*
 * Gives back what NVIDIA gave. A callback pin needs only put_pages, which
 * frees its mappings too, and nothing once its free callback has begun.
 * Returns false where NVIDIA refused the put_pages of a callback pin: it
 * keeps the pin, and will still call the free callback with m when the
 * memory is freed. m and the bridge module then stay, with a reference
 * each that the callback drops: the caller must not drop its own.
 */
static bool gpufpga_nv_release(struct gpufpga_mem *m, bool persistent)
{
	const struct gpufpga_nv_ops *ops = m->nv.ops;

	if (persistent) {
		if (m->nv.map)
			ops->dma_unmap_pages(m->dev->pdev, m->nv.pt, m->nv.map);
		if (m->nv.pt && ops->put_pages_persistent(m->nv.va, m->nv.pt, 0))
			dev_warn(&m->dev->pdev->dev, "nvidia_p2p_put_pages_persistent failed for %#llx\n",
				 m->nv.va);
	} else if (m->nv.pt) {
		bool freed;

		spin_lock(&m->lock);
		freed = m->nv.freed;
		spin_unlock(&m->lock);
		/*
		 * Once the callback has begun, NVIDIA frees the table itself:
		 * wait for the callback, which still uses m, to return. Before,
		 * put_pages; NVIDIA serialises it with a callback that starts
		 * meanwhile.
		 */
		if (!freed) {
			int ret = ops->put_pages(0, 0, m->nv.va, m->nv.pt);

			/*
			 * A free callback may have run while put_pages waited
			 * for NVIDIA's lock: NVIDIA then frees the table itself,
			 * and its put_pages returns 0 (a table it no longer
			 * finds) or an error. Either way, wait for the callback
			 * to let go of m. Any other failure leaves the pin
			 * registered with NVIDIA, callback and all: m is
			 * orphaned to the callback that will come.
			 */
			if (ret)
				kref_get(&m->ref);
			spin_lock(&m->lock);
			freed = m->nv.freed;
			if (ret && !freed)
				m->nv.orphaned = true;
			spin_unlock(&m->lock);
			if (ret && !freed) {
				dev_warn(&m->dev->pdev->dev, "nvidia_p2p_put_pages failed (%d) for %#llx: NVIDIA keeps the GPU memory pinned until it is freed\n",
					 ret, m->nv.va);
				return false;
			}
			if (ret)
				gpufpga_mem_put(m);	/* not the last reference */
		}
		if (freed)
			wait_for_completion(&m->nv.callback_done);
	}
	return true;
}

/*
 * Whether the card can address every page of m: NVIDIA's and an exporter's
 * bus addresses are not bounded by the device's DMA mask, which probe set
 * from the engine's address bits (ALIGNMENTS). Host pins are mapped through
 * the DMA API, which honours it.
 */
static bool gpufpga_mem_reachable(struct gpufpga_mem *m)
{
	struct device *dev = &m->dev->pdev->dev;
	u64 mask = dma_get_mask(dev);
	u32 i;

	for (i = 0; i < m->npages; i++) {
		if (m->bus[i] > mask || m->page_size - 1 > mask - m->bus[i]) {
			dev_info_ratelimited(dev, "pinned memory at bus address %pad is beyond the engine's %u address bits\n",
					     &m->bus[i], m->dev->addr_bits);
			return false;
		}
	}
	return true;
}

static void gpufpga_count_runs(struct gpufpga_mem *m)
{
	u32 i, run = 1;

	m->nruns = 1;
	m->largest_run = 1;
	for (i = 1; i < m->npages; i++) {
		if (gpufpga_bus_follows(m->bus[i - 1], m->bus[i], m->page_size)) {
			run++;
		} else {
			m->nruns++;
			run = 1;
		}
		m->largest_run = max(m->largest_run, run);
	}
}

/* Takes the mapping's bus addresses. Called with m->lock held. */
static int gpufpga_nv_take_map(struct gpufpga_mem *m, struct nvidia_p2p_dma_mapping *map)
{
	lockdep_assert_held(&m->lock);
	if (NVIDIA_P2P_MAJOR_VERSION(map->version) != GPUFPGA_NV_MAP_MAJOR ||
	    NVIDIA_P2P_MINOR_VERSION(map->version) < GPUFPGA_NV_MAP_MINOR ||
	    map->entries != m->npages) {
		dev_info_ratelimited(&m->dev->pdev->dev, "GPU pin: DMA mapping version %#x, %u entries not supported\n",
				     map->version, map->entries);
		return -EOPNOTSUPP;
	}
	memcpy(m->bus, map->dma_addresses, m->npages * sizeof(*m->bus));
	return 0;
}

/*
 * Pins GPU memory through NVIDIA's P2P API. The free callback may run at
 * any point from inside get_pages on, so the table and mapping are read
 * only under m->lock while the callback has not run. One window remains in
 * NVIDIA's API itself: a free that completes between get_pages and
 * dma_map_pages hands dma_map_pages a freed table, which NVIDIA frees once
 * the callback returns. Only a cudaFree of the memory being pinned, racing
 * the pin from another thread, opens it; persistent pins (no callback, the
 * free waits for the unpin) and dma-buf pins have no such window. A user's
 * mistake, or malice, there corrupts kernel memory: revocable pins are for
 * CAP_SYS_RAWIO, who could do that anyway, unless the administrator opens
 * them to all (nv_revocable_pins).
 */
static int gpufpga_pin_gpu(struct gpufpga_file *f, struct gpufpga_mem *m, u64 addr, u64 len)
{
	struct pci_dev *pdev = m->dev->pdev;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
	const struct gpufpga_nv_ops *ops;
	u64 va = round_down(addr, GPUFPGA_GPU_PAGE);
	u64 end = round_up(addr + len, GPUFPGA_GPU_PAGE);
	bool persistent = m->flags & GPUFPGA_PIN_PERSISTENT;
	int ret;

	if (end < addr || (end - va) / GPUFPGA_GPU_PAGE > UINT_MAX)
		return -EINVAL;
	ops = gpufpga_nv_get();
	if (!ops) {
		dev_info_ratelimited(&pdev->dev, "GPU pin: no NVIDIA P2P (load nvidia.ko, then gpufpga_nv.ko)\n");
		return -EOPNOTSUPP;
	}
	if (persistent && !ops->get_pages_persistent) {
		dev_info_once(&pdev->dev, "NVIDIA driver without persistent pins: GPU pins can be revoked\n");
		persistent = false;
		m->flags &= ~GPUFPGA_PIN_PERSISTENT;
	}
	if (!persistent && !READ_ONCE(gpufpga_nv_revocable_pins) && !f->rawio) {
		dev_info_ratelimited(&pdev->dev, "revocable GPU pin refused to %s[%d] without CAP_SYS_RAWIO: pin persistently or through a dma-buf (or set nv_revocable_pins)\n",
				     current->comm, task_pid_nr(current));
		ret = -EPERM;
		goto err_put;
	}
	m->nv.ops = ops;
	m->nv.va = va;
	init_completion(&m->nv.callback_done);
	m->page_size = GPUFPGA_GPU_PAGE;
	m->npages = (end - va) / GPUFPGA_GPU_PAGE;
	m->offset = addr - va;
	m->bus = kvmalloc_array(m->npages, sizeof(*m->bus), GFP_KERNEL_ACCOUNT);
	if (!m->bus) {
		ret = -ENOMEM;
		goto err_put;
	}
	if (persistent)
		ret = ops->get_pages_persistent(va, end - va, &pt, NVIDIA_P2P_FLAGS_DEFAULT);
	else
		ret = ops->get_pages(0, 0, va, end - va, &pt, gpufpga_nv_free_callback, m);
	if (ret) {
		dev_info_ratelimited(&pdev->dev,
				     "nvidia_p2p_get_pages%s(%#llx, %llu) failed (%d): not cudaMalloc'd GPU memory, past the end of its allocation,%s or BAR1 full\n",
				     persistent ? "_persistent" : "", va, end - va, ret,
				     persistent ? " persistent pins unsupported (MIG, vGPU)," : "");
		ret = ret == -ENOTSUPP ? -EOPNOTSUPP : ret;
		goto err_put;
	}
	spin_lock(&m->lock);
	m->nv.pt = pt;
	if (m->nv.freed)
		ret = -EKEYREVOKED;	/* freed before get_pages returned */
	else if (!gpufpga_nv_page_table_ok(pt) || pt->page_size != NVIDIA_P2P_PAGE_SIZE_64KB ||
		 pt->entries != m->npages)
		ret = -EOPNOTSUPP;
	else if (pt->gpu_uuid)
		memcpy(m->nv.gpu_uuid, pt->gpu_uuid, sizeof(m->nv.gpu_uuid));
	spin_unlock(&m->lock);
	if (ret) {
		if (ret == -EOPNOTSUPP)
			dev_info_ratelimited(&pdev->dev, "GPU pin: page table version or page size not supported\n");
		goto err_pages;
	}
	ret = ops->dma_map_pages(pdev, pt, &map);
	if (ret) {
		dev_info_ratelimited(&pdev->dev, "nvidia_p2p_dma_map_pages failed (%d): is an IOMMU between the FPGA and the GPU?\n",
				     ret);
		goto err_pages;
	}
	spin_lock(&m->lock);
	if (m->nv.freed) {
		ret = -EKEYREVOKED;
	} else {
		m->nv.map = map;
		ret = gpufpga_nv_take_map(m, map);
	}
	spin_unlock(&m->lock);
	if (ret)
		goto err_pages;
	return 0;

err_pages:
	if (!gpufpga_nv_release(m, persistent))
		ops = NULL;	/* the free callback puts it */
err_put:
	kvfree(m->bus);
	m->bus = NULL;
	if (ops)
		gpufpga_nv_put(ops);
	return ret;
}

static void gpufpga_unpin_gpu(struct gpufpga_mem *m)
{
	if (gpufpga_nv_release(m, m->flags & GPUFPGA_PIN_PERSISTENT))
		gpufpga_nv_put(m->nv.ops);
}

/* Expands DMA segments of whole pages into one bus address per page. */
static int gpufpga_bus_from_sgt(struct gpufpga_mem *m, struct sg_table *sgt,
				u64 first_page)
{
	struct scatterlist *sg;
	u64 page = 0, j, n;
	u32 k = 0;
	int i;

	for_each_sgtable_dma_sg(sgt, sg, i) {
		if (!IS_ALIGNED(sg_dma_address(sg), PAGE_SIZE) ||
		    !IS_ALIGNED(sg_dma_len(sg), PAGE_SIZE))
			return -EINVAL;
		n = sg_dma_len(sg) >> PAGE_SHIFT;
		for (j = 0; j < n && k < m->npages; j++, page++)
			if (page >= first_page)
				m->bus[k++] = sg_dma_address(sg) + (j << PAGE_SHIFT);
	}
	return k == m->npages ? 0 : -EINVAL;
}

static bool gpufpga_host_needs_sync(struct device *dev, struct gpufpga_mem *m)
{
	u32 i;

	for (i = 0; i < m->npages; i++)
		if (dma_need_sync(dev, m->bus[i]))
			return true;
	return false;
}

static int gpufpga_pin_host(struct gpufpga_mem *m, u64 addr, u64 len)
{
	struct device *dev = &m->dev->pdev->dev;
	u64 start = round_down(addr, PAGE_SIZE);
	u64 end = round_up(addr + len, PAGE_SIZE);
	long pinned;
	int ret;

	if (end < addr || (end - start) >> PAGE_SHIFT > UINT_MAX)
		return -EINVAL;
	m->page_size = PAGE_SIZE;
	m->npages = (end - start) >> PAGE_SHIFT;
	m->offset = addr - start;
	m->host.pages = kvmalloc_array(m->npages, sizeof(*m->host.pages), GFP_KERNEL_ACCOUNT);
	m->bus = kvmalloc_array(m->npages, sizeof(*m->bus), GFP_KERNEL_ACCOUNT);
	if (!m->host.pages || !m->bus) {
		ret = -ENOMEM;
		goto err_free;
	}
	/* Long-term pins count against RLIMIT_MEMLOCK, unless CAP_IPC_LOCK. */
	ret = account_locked_vm(current->mm, m->npages, true);
	if (ret) {
		dev_info_ratelimited(dev, "host pin of %u pages over RLIMIT_MEMLOCK (raise ulimit -l)\n",
				     m->npages);
		goto err_free;
	}
	mmgrab(current->mm);
	m->host.mm = current->mm;
	pinned = pin_user_pages_fast(start, m->npages, FOLL_WRITE | FOLL_LONGTERM,
				     m->host.pages);
	if (pinned != m->npages) {
		if (pinned > 0)
			unpin_user_pages(m->host.pages, pinned);
		ret = pinned < 0 ? pinned : -EFAULT;
		goto err_unaccount;
	}
	ret = sg_alloc_table_from_pages(&m->host.sgt, m->host.pages, m->npages, 0,
					(u64)m->npages << PAGE_SHIFT, GFP_KERNEL);
	if (ret)
		goto err_unpin;
	/*
	 * No CPU sync: a pin whose memory would need one is refused below, so
	 * the attribute holds for every pin kept. It is also what tells the
	 * DMA API's checker that two mappings of one cache line, as two pins
	 * of one page make, are safe.
	 */
	ret = dma_map_sgtable(dev, &m->host.sgt, DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
	if (ret)
		goto err_table;
	ret = gpufpga_bus_from_sgt(m, &m->host.sgt, 0);
	if (!ret && gpufpga_host_needs_sync(dev, m)) {
		/*
		 * Bounce buffers (SWIOTLB) or a non-coherent platform: the FPGA
		 * and user space would see different copies of long-lived pins.
		 */
		dev_info_ratelimited(dev, "host pin: DMA to this memory needs bounce buffers or cache maintenance (swiotlb=force, an IOMMU in strict bounce mode, or a non-coherent platform): not supported\n");
		ret = -EOPNOTSUPP;
	}
	if (ret)
		goto err_unmap;
	return 0;

err_unmap:
	dma_unmap_sgtable(dev, &m->host.sgt, DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
err_table:
	sg_free_table(&m->host.sgt);
err_unpin:
	unpin_user_pages(m->host.pages, m->npages);
err_unaccount:
	account_locked_vm(m->host.mm, m->npages, false);
	mmdrop(m->host.mm);
err_free:
	kvfree(m->host.pages);
	kvfree(m->bus);
	m->bus = NULL;
	return ret;
}

static void gpufpga_unpin_host(struct gpufpga_mem *m)
{
	dma_unmap_sgtable(&m->dev->pdev->dev, &m->host.sgt, DMA_BIDIRECTIONAL,
			  DMA_ATTR_SKIP_CPU_SYNC);
	sg_free_table(&m->host.sgt);
	unpin_user_pages_dirty_lock(m->host.pages, m->npages, true);
	account_locked_vm(m->host.mm, m->npages, false);
	mmdrop(m->host.mm);
	kvfree(m->host.pages);
}

/* The exporter is moving or freeing the buffer: it is gone for us. */
static void gpufpga_dmabuf_move_notify(struct dma_buf_attachment *att)
{
	gpufpga_mem_revoke(att->importer_priv);
}

static const struct dma_buf_attach_ops gpufpga_dmabuf_importer = {
	.allow_peer2peer = true,
	.move_notify = gpufpga_dmabuf_move_notify,
};

/*
 * An exporter may hand over BAR addresses it did not map for us: CUDA's
 * PCIe mapping type does, and so do NVIDIA drivers told not to remap peer
 * MMIO. Where an IOMMU translates for the FPGA, DMA to them faults or lands
 * elsewhere. A segment the exporter mapped is mapped whole, so its first
 * and last bytes tell; this catches an exporter that mapped nothing, not
 * one that mapped the wrong memory.
 */
static bool gpufpga_dmabuf_bypasses_iommu(struct device *dev, struct sg_table *sgt)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(dev);
	struct scatterlist *sg;
	int i;

	if (!dom || !(dom->type & __IOMMU_DOMAIN_PAGING))
		return false;
	for_each_sgtable_dma_sg(sgt, sg, i) {
		if (!sg_dma_len(sg))
			continue;
		if (!iommu_iova_to_phys(dom, sg_dma_address(sg)) ||
		    !iommu_iova_to_phys(dom, sg_dma_address(sg) + sg_dma_len(sg) - 1))
			return true;
	}
	return false;
}

static int gpufpga_pin_dmabuf(struct gpufpga_mem *m, int fd, u64 off, u64 len)
{
	struct device *dev = &m->dev->pdev->dev;
	u64 start = round_down(off, PAGE_SIZE);
	u64 end = round_up(off + len, PAGE_SIZE);
	struct sg_table *sgt;
	int ret;

	m->dmabuf.buf = dma_buf_get(fd);
	if (IS_ERR(m->dmabuf.buf))
		return PTR_ERR(m->dmabuf.buf);
	if (end < off || end > m->dmabuf.buf->size) {
		ret = -EINVAL;
		goto err_put;
	}
	m->page_size = PAGE_SIZE;
	m->npages = (end - start) >> PAGE_SHIFT;
	m->offset = off - start;
	m->bus = kvmalloc_array(m->npages, sizeof(*m->bus), GFP_KERNEL_ACCOUNT);
	if (!m->bus) {
		ret = -ENOMEM;
		goto err_put;
	}
	m->dmabuf.att = dma_buf_dynamic_attach(m->dmabuf.buf, dev, &gpufpga_dmabuf_importer, m);
	if (IS_ERR(m->dmabuf.att)) {
		ret = PTR_ERR(m->dmabuf.att);
		dev_info_ratelimited(dev, "dma-buf %s refused a peer-to-peer attachment (%d)\n",
				     m->dmabuf.buf->exp_name, ret);
		/* NVIDIA's exporter says -ENOTSUPP, which user space cannot name. */
		if (ret == -ENOTSUPP)
			ret = -EOPNOTSUPP;
		goto err_free;
	}
	/* Pinned, the exporter may not move it: only a free revokes it. */
	dma_resv_lock(m->dmabuf.buf->resv, NULL);
	ret = dma_buf_pin(m->dmabuf.att);
	if (ret) {
		dma_resv_unlock(m->dmabuf.buf->resv);
		goto err_detach;
	}
	sgt = dma_buf_map_attachment(m->dmabuf.att, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt))
		dma_buf_unpin(m->dmabuf.att);
	dma_resv_unlock(m->dmabuf.buf->resv);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto err_detach;
	}
	m->dmabuf.sgt = sgt;
	ret = gpufpga_bus_from_sgt(m, sgt, start >> PAGE_SHIFT);
	if (ret) {
		dev_info_ratelimited(dev, "dma-buf %s: segments not page aligned\n",
				     m->dmabuf.buf->exp_name);
		goto err_unmap;
	}
	if (gpufpga_dmabuf_bypasses_iommu(dev, sgt)) {
		dev_info_ratelimited(dev, "dma-buf %s: its addresses are not mapped by the IOMMU that translates for this device (the exporter handed over raw PCIe addresses): export with the default mapping type, or put the device's IOMMU group in passthrough (iommu=pt)\n",
				     m->dmabuf.buf->exp_name);
		ret = -EXDEV;
		goto err_unmap;
	}
	return 0;

err_unmap:
	dma_resv_lock(m->dmabuf.buf->resv, NULL);
	dma_buf_unmap_attachment(m->dmabuf.att, sgt, DMA_BIDIRECTIONAL);
	dma_buf_unpin(m->dmabuf.att);
	dma_resv_unlock(m->dmabuf.buf->resv);
err_detach:
	dma_buf_detach(m->dmabuf.buf, m->dmabuf.att);
err_free:
	kvfree(m->bus);
	m->bus = NULL;
err_put:
	dma_buf_put(m->dmabuf.buf);
	return ret;
}

static void gpufpga_unpin_dmabuf(struct gpufpga_mem *m)
{
	dma_resv_lock(m->dmabuf.buf->resv, NULL);
	dma_buf_unmap_attachment(m->dmabuf.att, m->dmabuf.sgt, DMA_BIDIRECTIONAL);
	dma_buf_unpin(m->dmabuf.att);
	dma_resv_unlock(m->dmabuf.buf->resv);
	dma_buf_detach(m->dmabuf.buf, m->dmabuf.att);
	dma_buf_put(m->dmabuf.buf);
}

static void gpufpga_mem_free(struct kref *ref)
{
	struct gpufpga_mem *m = container_of(ref, struct gpufpga_mem, ref);

	kvfree(m->bus);
	kref_put(&m->dev->ref, gpufpga_dev_release);
	kfree(m);
}

/**
 * gpufpga_mem_put - drop a reference to a pin
 * @m: the pin
 *
 * Context: any where the reference is not the last; process context
 * where it may be: the last one frees.
 */
void gpufpga_mem_put(struct gpufpga_mem *m)
{
	kref_put(&m->ref, gpufpga_mem_free);
}

/**
 * gpufpga_mem_active - whether a pin is neither revoked nor being revoked
 * @m: the pin
 *
 * Lockless, as it is asked under ch->lock, which the IRQ handler takes and
 * m->lock must not nest in: the state is written under m->lock before the
 * revoker takes ch->lock, so a reader under ch->lock sees it or is seen.
 *
 * Context: any.
 * Return: true while m may be used for new work.
 */
bool gpufpga_mem_active(struct gpufpga_mem *m)
{
	return READ_ONCE(m->state) == GPUFPGA_MEM_ACTIVE;
}

static u64 gpufpga_mem_bytes(struct gpufpga_mem *m)
{
	return (u64)m->npages * m->page_size;
}

/* Releases what the pin holds. No lock may be held. */
static void gpufpga_mem_release(struct gpufpga_mem *m)
{
	switch (m->kind) {
	case GPUFPGA_PIN_GPU:
		gpufpga_unpin_gpu(m);
		break;
	case GPUFPGA_PIN_HOST:
		gpufpga_unpin_host(m);
		break;
	case GPUFPGA_PIN_DMABUF:
		gpufpga_unpin_dmabuf(m);
		break;
	}
}

/* Unpins a pin that was published; drops the table's reference. */
static void gpufpga_mem_unpin(struct gpufpga_mem *m)
{
	gpufpga_mem_release(m);
	atomic64_sub(gpufpga_mem_bytes(m), &m->dev->pinned_total);
	wake_up_var(&m->dev->pinned_total);	/* remove() may wait for it */
	trace_gpufpga_unpin(m->dev->id, m->handle, m->kind, m->len);
	gpufpga_mem_put(m);
}

static int gpufpga_check_pin_arg(const struct gpufpga_pin *a)
{
	if (a->kind < GPUFPGA_PIN_GPU || a->kind > GPUFPGA_PIN_DMABUF ||
	    a->flags & ~GPUFPGA_PIN_FLAGS || a->pad ||
	    a->reserved[0] || a->reserved[1] || !a->len || a->addr + a->len < a->addr)
		return -EINVAL;
	if ((a->flags & GPUFPGA_PIN_PERSISTENT) && a->kind != GPUFPGA_PIN_GPU)
		return -EINVAL;
	if (a->kind != GPUFPGA_PIN_DMABUF && a->fd != -1)
		return -EINVAL;
	return 0;
}

/*
 * PIN returns only the errnos the uapi header lists for it. NVIDIA and a
 * dma-buf exporter may fail with others (-ENOTSUPP, which user space cannot
 * name, or an exporter's own): those become -EIO, with the original logged.
 */
static int gpufpga_pin_errno(struct gpufpga_dev *dev, int ret)
{
	switch (ret) {
	case -EINVAL:
	case -EBADF:
	case -EPERM:
	case -EOPNOTSUPP:
	case -EXDEV:
	case -EKEYREVOKED:
	case -ENOSPC:
	case -ENOMEM:
	case -EFAULT:
	case -EINTR:
	case -EIO:
		return ret;
	case -ENOTSUPP:
		return -EOPNOTSUPP;
	}
	dev_info_ratelimited(&dev->pdev->dev, "pin failed with %d, reported as -EIO\n", ret);
	return -EIO;
}

/**
 * gpufpga_ioctl_pin - GPUFPGA_IOC_PIN: pin memory for transfers and streams
 * @f: the file
 * @arg: the caller's struct gpufpga_pin
 * @size: its size
 *
 * Context: process context, dev->ioctl_rwsem held for reading.
 * Return: 0, or a negative errno.
 */
int gpufpga_ioctl_pin(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_dev *dev = f->dev;
	struct gpufpga_pin a;
	struct gpufpga_mem *m;
	u64 bytes;
	int ret;

	lockdep_assert_held(&dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, offsetofend(struct gpufpga_pin, pad));
	if (ret)
		return ret;
	ret = gpufpga_check_pin_arg(&a);
	if (ret)
		return ret;
	/* Refuse what could never fit before allocating for it. */
	if (a.len > gpufpga_max_pinned || a.len > gpufpga_max_pinned_total)
		return -ENOSPC;
	m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);
	if (!m)
		return -ENOMEM;
	kref_init(&m->ref);
	kref_get(&dev->ref);
	spin_lock_init(&m->lock);
	m->dev = dev;
	m->kind = a.kind;
	m->flags = a.flags;
	m->addr = a.addr;
	m->len = a.len;
	switch (a.kind) {
	case GPUFPGA_PIN_GPU:
		ret = gpufpga_pin_gpu(f, m, a.addr, a.len);
		break;
	case GPUFPGA_PIN_HOST:
		ret = gpufpga_pin_host(m, a.addr, a.len);
		break;
	default:
		ret = gpufpga_pin_dmabuf(m, a.fd, a.addr, a.len);
		break;
	}
	if (ret) {
		trace_gpufpga_error(dev->id, "pin", ret, 0);
		gpufpga_mem_put(m);
		return gpufpga_pin_errno(dev, ret);
	}
	if (a.kind != GPUFPGA_PIN_HOST && !gpufpga_mem_reachable(m)) {
		trace_gpufpga_error(dev->id, "pin", -EOPNOTSUPP, 0);
		gpufpga_mem_release(m);
		gpufpga_mem_put(m);
		return -EOPNOTSUPP;
	}
	gpufpga_count_runs(m);
	bytes = gpufpga_mem_bytes(m);

	mutex_lock(&f->lock);
	if (f->npins >= gpufpga_max_pins || f->pinned + bytes > gpufpga_max_pinned) {
		ret = -ENOSPC;
		goto err_unlock;
	}
	if (atomic64_add_return(bytes, &dev->pinned_total) > gpufpga_max_pinned_total) {
		ret = -ENOSPC;
		goto err_total;
	}
	m->handle = ++f->next_handle;
	ret = xa_insert(&f->pins, m->handle, m, GFP_KERNEL);
	if (ret)
		goto err_total;
	f->npins++;
	f->pinned += bytes;
	spin_lock(&m->lock);
	m->published = true;
	spin_unlock(&m->lock);
	mutex_unlock(&f->lock);

	trace_gpufpga_pin(dev->id, m->handle, m->kind, m->len, m->npages, m->nruns);
	a.handle = m->handle;
	a.offset = m->offset;
	a.page_size = m->page_size;
	a.npages = m->npages;
	a.nruns = m->nruns;
	a.largest_run = m->largest_run;
	a.flags = m->flags;	/* without PERSISTENT where it fell back */
	/* The pin stays if the copy fails; it dies with the file. */
	return gpufpga_copy_out(arg, size, &a, sizeof(a));

err_total:
	atomic64_sub(bytes, &dev->pinned_total);
err_unlock:
	mutex_unlock(&f->lock);
	if (ret == -ENOSPC)
		dev_info_ratelimited(&dev->pdev->dev, "pin of %llu bytes over a limit (max_pins %u, max_pinned %lu, max_pinned_total %lu)\n",
				     bytes, gpufpga_max_pins, gpufpga_max_pinned,
				     gpufpga_max_pinned_total);
	trace_gpufpga_error(dev->id, "pin", ret, 0);
	gpufpga_mem_release(m);
	gpufpga_mem_put(m);
	return ret;
}

/* Removes a pin from the file's table. Called with f->lock held. */
static void gpufpga_unpublish(struct gpufpga_file *f, struct gpufpga_mem *m)
{
	lockdep_assert_held(&f->lock);
	xa_erase(&f->pins, m->handle);
	f->npins--;
	f->pinned -= gpufpga_mem_bytes(m);
}

/**
 * gpufpga_ioctl_unpin - GPUFPGA_IOC_UNPIN: let a pin go
 * @f: the file
 * @arg: the caller's struct gpufpga_unpin
 * @size: its size
 *
 * Context: process context, dev->ioctl_rwsem held for reading; takes f->lock.
 * Return: 0; -ENOENT for no such pin; -EBUSY while work uses it.
 */
int gpufpga_ioctl_unpin(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_unpin a;
	struct gpufpga_mem *m;
	int ret;

	lockdep_assert_held(&f->dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, sizeof(a));
	if (ret)
		return ret;
	if (a.flags || a.pad)
		return -EINVAL;
	mutex_lock(&f->lock);
	m = xa_load(&f->pins, a.handle);
	if (!m) {
		mutex_unlock(&f->lock);
		return -ENOENT;
	}
	if (atomic_read(&m->inflight)) {
		mutex_unlock(&f->lock);
		return -EBUSY;
	}
	gpufpga_unpublish(f, m);
	mutex_unlock(&f->lock);
	gpufpga_mem_unpin(m);
	return 0;
}

/**
 * gpufpga_unpin_all - let every pin of a file go
 * @f: the file
 *
 * At close, after every transfer of the file has ended, and at removal,
 * after the device's have.
 *
 * Context: process context, may sleep; takes f->lock.
 */
void gpufpga_unpin_all(struct gpufpga_file *f)
{
	struct gpufpga_mem *m;
	unsigned long handle;

	for (;;) {
		handle = 0;
		mutex_lock(&f->lock);
		m = xa_find(&f->pins, &handle, ULONG_MAX, XA_PRESENT);
		if (m)
			gpufpga_unpublish(f, m);
		mutex_unlock(&f->lock);
		if (!m)
			break;
		gpufpga_mem_unpin(m);
	}
}

/**
 * gpufpga_ioctl_query - GPUFPGA_IOC_QUERY: describe a pin
 * @f: the file
 * @arg: the caller's struct gpufpga_query
 * @size: its size
 *
 * Bus addresses are for CAP_SYS_ADMIN only.
 *
 * Context: process context, dev->ioctl_rwsem held for reading; takes f->lock.
 * Return: 0, or a negative errno: -ENOENT for no such pin.
 */
int gpufpga_ioctl_query(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_query a;
	struct gpufpga_mem *m;
	int ret;

	lockdep_assert_held(&f->dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, offsetofend(struct gpufpga_query, flags));
	if (ret)
		return ret;
	if (a.flags || a.reserved[0] || a.reserved[1])
		return -EINVAL;
	if (a.pages && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	mutex_lock(&f->lock);
	m = xa_load(&f->pins, a.handle);
	if (!m) {
		ret = -ENOENT;
		goto out;
	}
	a.kind = m->kind;
	spin_lock(&m->lock);
	a.state = m->state == GPUFPGA_MEM_ACTIVE ? GPUFPGA_PIN_ACTIVE : GPUFPGA_PIN_REVOKED;
	spin_unlock(&m->lock);
	a.addr = m->addr;
	a.len = m->len;
	a.offset = m->offset;
	a.page_size = m->page_size;
	a.npages = m->npages;
	a.nruns = m->nruns;
	a.largest_run = m->largest_run;
	a.inflight = atomic_read(&m->inflight);
	a.pad = 0;
	if (a.pages) {
		u64 __user *up = u64_to_user_ptr(a.pages);
		u32 i, n = min(a.max_pages, m->npages);

		for (i = 0; i < n && !ret; i++)
			ret = put_user((u64)m->bus[i], up + i);
	}
out:
	mutex_unlock(&f->lock);
	return ret ?: gpufpga_copy_out(arg, size, &a, sizeof(a));
}
